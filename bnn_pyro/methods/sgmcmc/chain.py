"""``ChainStep``: one SG-MCMC step as a :class:`~bnn_pyro.training.TrainingStep` of the one
training loop, and ``RunPlan``: the step sizes, adaptation and collection of a whole run.

A run without a given ``lr`` scales its step to the posterior it samples: at the points
:meth:`RunPlan.calibrating` names (most of them in the burn-in, where the preconditioner adapts
too), the chain measures the largest curvature of its preconditioned potential by power
iteration on finite-difference Hessian-vector products
(:func:`~bnn_pyro.methods.sgmcmc.samplers.largest_curvature`) and, with minibatches, the
variance of the minibatch gradient (the gradient of the previous minibatch at the same position),
and takes :func:`~bnn_pyro.methods.sgmcmc.samplers.sghmc_step_size` or
:func:`~bnn_pyro.methods.sgmcmc.samplers.sgld_step_size`. The burn-in's last calibration comes
after its last adapting step, and later ones may only shrink the step: on a posterior whose
curvature is the same everywhere (a Gaussian) the full-batch chain runs one fixed update rule.

Such a run on minibatches (:func:`even_batch` of them an epoch, of equal size) steps with the
minibatch gradient and its control variate (SVRG: ``g_B(θ) - g_B(θ̃) + g(θ̃)``, ``θ̃`` the
position at the epoch's start and ``g(θ̃)`` its gradient on the whole data set), and measures
the curvature on the whole data set. The plain minibatch gradient's noise is often far larger
than the noise the sampler injects at the step the curvature allows (on a small network's
posterior a hundred times), so a chain that keeps its share small barely moves; the control
variate's noise is the minibatch noise of ``g(θ) - g(θ̃)`` alone, which shrinks with the chain's
move within an epoch. Its size thus follows the step: the noise is measured through the
sampling stage too, and the step may grow back after the burn-in
(:meth:`ChainStep._scaled_noise`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from bnn_pyro._checks import check_int
from bnn_pyro.exceptions import TrainingDivergedError
from bnn_pyro.methods.sgmcmc.collector import SampleCollector
from bnn_pyro.methods.sgmcmc.potential import PyroPotential
from bnn_pyro.methods.sgmcmc.samplers import (
    NOISE_SHARE,
    SGLD_TRAVEL,
    Generators,
    SGHMCState,
    adapt_sghmc,
    cyclical_lr,
    largest_curvature,
    sghmc_step,
    sghmc_step_size,
    sgld_step,
    sgld_step_size,
)
from bnn_pyro.training import TrainingStep

__all__ = ["ChainStep", "RunPlan", "plan_run"]


@dataclass(frozen=True)
class RunPlan:
    """What each step ``k`` of a run of ``total`` steps does.

    Args:
        total: the run's steps (epochs times minibatches per epoch).
        lr: the step size (the largest one of a cyclical schedule).
        schedule: ``"constant"`` or ``"cyclical"`` (cosine, restarted ``cycles`` times).
        cycles: the cycles of a cyclical schedule.
        explore: the share of each cycle explored without noise and without collecting.
        burn_in: steps before any sample is collected.

    Example:
        >>> plan = RunPlan(total=8, lr=1.0, schedule="cyclical", cycles=2, explore=0.5, burn_in=0)
        >>> [plan.sampling(k) for k in range(4)], plan.candidates(thinning=1)
        ([False, False, True, True], 4)
    """

    total: int
    lr: float
    schedule: str = "constant"
    cycles: int = 1
    explore: float = 0.0
    burn_in: int = 0

    def step_size(self, k: int) -> float:
        """The step size of step ``k``."""
        if self.schedule == "cyclical":
            return cyclical_lr(k, self.total, self.cycles, self.lr)
        return self.lr

    def sampling(self, k: int) -> bool:
        """Whether step ``k`` injects noise and may be collected (the sampling stage)."""
        if self.schedule == "cyclical":  # the last step of a cycle always samples
            length = math.ceil(self.total / self.cycles)
            return k % length >= min(length - 1, math.ceil(self.explore * length - 1e-9))
        return True

    def adapting(self, k: int) -> bool:
        """Whether step ``k`` adapts the SGHMC preconditioner (burn-in; a cycle's exploration,
        where it averages every update: :func:`adapt_sghmc` with ``forget=False``)."""
        if self.schedule == "cyclical":
            return not self.sampling(k)
        return k < self.burn_in

    def calibrating(self, k: int) -> bool:
        """Whether a step size scaled to the posterior is measured before step ``k``.

        Constant: at the start; at 1/32, 1/16, ..., 1/2 of the burn-in (the chain and the
        preconditioner move most early on); at its end; then every sixteenth of the run, where
        the step may only shrink (:class:`ChainStep`). Cyclical: at the start of each cycle and
        of each sampling stage, and at 1/32, ..., 1/2 of the first exploration stage.

        Example:
            >>> plan = RunPlan(total=160, lr=1.0, burn_in=64)
            >>> [k for k in range(160) if plan.calibrating(k)]
            [0, 2, 4, 8, 16, 32, 64, 74, 84, 94, 104, 114, 124, 134, 144, 154]
        """
        if k == 0:
            return True
        if self.schedule == "cyclical":
            length = math.ceil(self.total / self.cycles)
            explored = next((j for j in range(length) if self.sampling(j)), length)
            early = k < explored and any(k == explored >> j for j in range(1, 6))
            return early or k % length == 0 or (self.sampling(k) and not self.sampling(k - 1))
        if k >= self.burn_in:
            return (k - self.burn_in) % math.ceil(self.total / 16) == 0
        return any(k == self.burn_in >> j for j in range(1, 6))

    def travelling(self, k: int) -> bool:
        """Whether step ``k`` collects nothing (the burn-in, a cycle's exploration): a step size
        measured there only has to bring the chain to the posterior, not to sample it.

        Example:
            >>> plan = RunPlan(total=8, lr=1.0, schedule="cyclical", cycles=2, explore=0.5)
            >>> [plan.travelling(k) for k in range(4)], RunPlan(8, 1.0, burn_in=2).travelling(2)
            ([True, True, False, False], False)
        """
        return k < self.burn_in or not self.sampling(k)

    def sampling_steps(self, start: int = 0, stop: int | None = None) -> int:
        """How many of the steps ``start, ..., stop - 1`` (default: to the end) sample."""
        stop = self.total if stop is None else stop
        if self.schedule == "constant":
            return max(0, stop - start)
        return sum(self.sampling(k) for k in range(start, stop))

    def candidates(self, thinning: int) -> int:
        """How many samples a run with this burn-in and ``thinning`` offers to be kept."""
        return math.ceil(self.sampling_steps(self.burn_in) / thinning)


def plan_run(
    total: int,
    lr: float,
    schedule: str = "constant",
    cycles: int = 1,
    explore: float = 0.0,
    burn_in: int | None = None,
    thinning: int | None = None,
    max_samples: int = 1000,
) -> tuple[RunPlan, int]:
    """The plan of a run of ``total`` steps and its thinning, the arguments checked first.

    Args:
        total, lr, schedule, cycles, explore: as :class:`RunPlan` (``cycles`` and ``explore``
            only count for ``"cyclical"``).
        burn_in: steps before any sample is kept; ``None``: a quarter of the run for a
            constant step size, 0 for a cyclical one (its exploration stages burn in).
        thinning: keep every ``thinning``-th sampling step after the burn-in; ``None``:
            spread ``max_samples`` evenly over them.
        max_samples: the collector's bound (for the default thinning).

    Raises:
        ValueError: ``burn_in`` negative or not below ``total``; ``thinning`` larger than the
            sampling steps after the burn-in; no sampling step left.

    Example:
        >>> plan, thinning = plan_run(1000, 0.1, max_samples=100)
        >>> plan.burn_in, thinning
        (250, 7)
        >>> plan_run(10, 0.1, burn_in=5, thinning=6)
        Traceback (most recent call last):
          ...
        ValueError: thinning must be <= the 5 sampling steps after the burn-in, got 6
    """
    cyclical = schedule == "cyclical"
    if burn_in is None:
        burn_in = 0 if cyclical else total // 4
    burn_in = check_int("burn_in", burn_in, minimum=0)
    if burn_in >= total:
        raise ValueError(f"burn_in must be < the run's {total} steps, got {burn_in}")
    plan = RunPlan(total, lr, schedule, cycles if cyclical else 1, explore if cyclical else 0.0,
                   burn_in)  # fmt: skip
    after = plan.sampling_steps(burn_in)
    if after == 0:
        raise ValueError("the run has no sampling step after its burn-in: run more epochs")
    if thinning is None:
        thinning = max(1, after // check_int("max_samples", max_samples))
    thinning = check_int("thinning", thinning)
    if thinning > after:
        raise ValueError(
            f"thinning must be <= the {after} sampling steps after the burn-in, got {thinning}"
        )
    return plan, thinning


def even_batch(n: int, batch: int) -> int:
    """The rows per minibatch of a measured run asked for ``batch`` of ``n`` rows: as many
    minibatches an epoch as ``batch`` gives, of (nearly) equal size, so that no small last one
    (``n mod batch`` rows, whose gradient noise is many times the others') sets the step.

    Args:
        n: the rows of the data set (>= 1).
        batch: the rows asked for per minibatch, in ``[1, n]``.

    Returns:
        ``ceil(n / k)`` for ``k = ceil(n / batch)`` minibatches, at most ``batch``: the same
        ``k`` minibatches an epoch, the last at most ``k - 1`` rows short of the others.

    Example:
        >>> even_batch(100, 32), even_batch(200, 128), even_batch(100, 100), even_batch(7, 3)
        (25, 100, 100, 3)
    """
    if n < 1 or not 1 <= batch <= n:
        raise ValueError(f"even_batch needs 1 <= batch <= n, got batch={batch}, n={n}")
    return math.ceil(n / math.ceil(n / batch))


#: The rows of one pass of the whole data set's gradient (the control variate's anchor, the
#: curvature of a run on minibatches), or the minibatch's if more.
CHUNK = 1024


class ChainStep(TrainingStep):
    """One step of the chain on a minibatch: the potential's gradient, the sampler's update
    of ``theta (P,)`` in place, and the collector's offer; or the same for K chains stacked,
    ``theta (K, P)``, each with its own collector and noise generator (what
    :func:`~bnn_pyro.methods.sgmcmc.stacked.fit_stacked_sgmcmc` runs).

    Args:
        potential: the model's :class:`~bnn_pyro.methods.sgmcmc.potential.PyroPotential`
            (one chain), or a potential of K chains whose ``gradient`` maps ``theta (K, P)``
            and ``(K, B, ...)`` minibatches to ``(U (K,), g (K, P))`` and whose ``constrain``
            maps a chain's ``(P,)`` (:class:`~bnn_pyro.methods.sgmcmc.stacked.StackedPotential`).
        theta: ``(P,)`` the position, or ``(K, P)`` the K chains' positions; moved in place.
        sampler: ``"sghmc"`` or ``"sgld"``.
        plan: the run's :class:`RunPlan` (shared by the K chains).
        collector: keeps the samples; it is offered the sampling-stage steps, numbered from 0
            (its ``burn_in`` counts those, ``plan.sampling_steps(0, plan.burn_in)``). One per
            chain for ``theta (K, P)``.
        dataset_size: ``N``.
        temperature: ``T``.
        mdecay: SGHMC's momentum decay.
        generator: the source of the injected noise (one per chain for ``theta (K, P)``).
        target: ``None``: the step sizes are ``plan``'s. A float: ``plan.lr`` is a factor of a
            step measured on the posterior (module docstring): ``lr² λ_max`` (SGHMC) or
            ``lr λ_max`` (SGLD) equals ``target`` at ``plan.lr = 1``, or less where the
            minibatch noise asks (:data:`~bnn_pyro.methods.sgmcmc.samplers.NOISE_SHARE`).
        data: ``(X, y)``, the whole data set (``(K, N, ...)`` for K chains) of a run with a
            ``target``: a step on a minibatch then takes the control variate (module
            docstring). ``None``: the plain minibatch gradient.

    Example:
        >>> import pyro, pyro.distributions as dist
        >>> def model(x, y=None, dataset_size=None):
        ...     w = pyro.sample("w", dist.Normal(0.0, 1.0))
        ...     with pyro.plate("data", dataset_size or len(x), subsample=torch.arange(len(x))):
        ...         pyro.sample("obs", dist.Normal(w * x, 1.0), obs=y)
        >>> x = torch.randn(20)
        >>> potential = PyroPotential(model, x, x)
        >>> step = ChainStep(potential, torch.zeros(1), "sgld", RunPlan(50, 0.1),
        ...                  SampleCollector(100), 20, 1.0, 0.1, torch.Generator().manual_seed(0))
        >>> _ = [step(x, x) for _ in range(50)]
        >>> step.collector.samples.shape
        torch.Size([50, 1])
    """

    #: A chain samples: its potential rises from its lowest point by design (no blow-up).
    minimizes = False

    def __init__(
        self,
        potential: PyroPotential | Any,
        theta: torch.Tensor,
        sampler: str,
        plan: RunPlan,
        collector: SampleCollector | Sequence[SampleCollector],
        dataset_size: int,
        temperature: float,
        mdecay: float,
        generator: Generators,
        target: float | None = None,
        data: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> None:
        self.potential, self.theta, self.sampler, self.plan = potential, theta, sampler, plan
        self.collectors = [collector] if isinstance(collector, SampleCollector) else list(collector)
        chains = 1 if theta.dim() == 1 else theta.shape[0]
        if len(self.collectors) != chains:
            raise ValueError(f"one collector per chain: {len(self.collectors)} for {chains}")
        self.collector = self.collectors[0]
        self.dataset_size, self.temperature, self.mdecay = dataset_size, temperature, mdecay
        self.generator = generator
        self.state = SGHMCState.start(theta) if sampler == "sghmc" else None
        if self.state is not None and plan.schedule == "cyclical":
            self.state.tau.zero_()  # the preconditioner is the mean over every exploration step
        self.target = target
        # the measured step (per chain, (K, 1); (1,) alone) that plan.step_size(k) multiplies
        self.scale: float | torch.Tensor = 1.0
        self._calibration: dict[str, Any] = {}  # M⁻¹ at the last calibration, its direction
        # Σ Δg², Σ (xᵀΔg)² / xᵀMx, count, Σ the step's power, since the calibration
        self._noise: list[Any] = []
        self._previous: tuple[torch.Tensor, torch.Tensor] | None = None  # the last minibatch
        self._moved = False
        # the whole data set, for the control variate of a measured run on minibatches
        self.data = data if target is not None else None
        self._anchor: tuple[torch.Tensor, torch.Tensor] | None = None  # θ̃, its full gradient
        self._epoch_index = 0
        self.k = 0  # the step about to be taken
        self.sampled = 0  # sampling-stage steps so far (what thinning counts)
        self._epoch: list[torch.Tensor] = []  # each step's U, per chain

    def start_epoch(self, epoch: int) -> None:
        self._epoch = []
        self._anchor = None  # each epoch's first minibatch step sets a new one
        self._epoch_index = epoch

    def __call__(self, xb: torch.Tensor, yb: torch.Tensor) -> float:
        k, plan, n = self.k, self.plan, self.dataset_size
        adapting = self.state is not None and plan.adapting(k)
        value, grad = self.potential.gradient(self.theta, xb, yb, n)
        if self._controlled(xb):
            grad = self._control(grad, xb, yb)
        # U per chain, (K,) (K = 1 alone), on the CPU: the history's numbers, read every step
        values = torch.as_tensor(value, dtype=torch.float64, device="cpu").reshape(-1)
        grads_finite = torch.isfinite(grad).reshape(len(values), -1).all(-1).cpu()
        finite = torch.isfinite(values) & grads_finite
        if not bool(finite.all()):
            raise TrainingDivergedError(
                f"SG-MCMC: the potential or its gradient is not finite{_which(finite)}: "
                f"{values.tolist()}"
            )
        if self.target is not None:
            self._measure(xb, yb, grad, plan.travelling(k), plan.calibrating(k))
        if adapting:
            adapt_sghmc(self.state, grad, forget=plan.schedule != "cyclical")  # type: ignore[arg-type]
            self._moved = True  # M⁻¹ left its value at the last calibration
        lr, sampling = plan.step_size(k) * self._step_scale(), plan.sampling(k)
        with torch.no_grad():
            if self.state is not None:
                sghmc_step(
                    self.theta,
                    self.state,
                    grad,
                    lr=lr,
                    mdecay=self.mdecay,
                    temperature=self.temperature,
                    dataset_size=n,
                    generator=self.generator,
                    noise=sampling,
                )
            else:
                sgld_step(
                    self.theta,
                    grad,
                    lr=lr,
                    temperature=self.temperature,
                    dataset_size=n,
                    generator=self.generator,
                    noise=sampling,
                )
        finite = torch.isfinite(self.theta).reshape(len(values), -1).all(-1).cpu()
        if not bool(finite.all()):
            where = _which(finite)
            raise TrainingDivergedError(f"SG-MCMC: the chain left the finite numbers{where}")
        if sampling:  # the collector drops those before the burn-in's end and thins the rest
            rows = [self.theta] if self.theta.dim() == 1 else list(self.theta)
            for row, collector in zip(rows, self.collectors, strict=True):
                collector.offer(self.sampled, lambda row=row: self.potential.constrain(row))
            self.sampled += 1
        self.k += 1
        self._epoch.append(values)
        return float(values.mean())

    # ------------------------------------------------------------------ the control variate
    def _rows(self, xb: torch.Tensor) -> int:
        return xb.shape[0 if self.theta.dim() == 1 else 1]

    def _minibatch(self, xb: torch.Tensor) -> bool:
        return self._rows(xb) < self.dataset_size

    def _controlled(self, xb: torch.Tensor) -> bool:
        """Whether this step's gradient takes the control variate (a measured run, with the
        data, on a minibatch)."""
        return self.data is not None and self._minibatch(xb)

    def full_gradient(self, theta: torch.Tensor, chunk: int) -> torch.Tensor:
        """``∇U(θ) / N`` on the whole data set, ``chunk`` rows at a time: the mean of the
        chunks' per-datum gradients weighted by their rows (each stands for ``N`` points, and
        the prior's share is the same in each).

        Example:
            >>> import bnn_pyro as bp
            >>> X = torch.randn(10, 2); y = X.sum(-1, keepdim=True)
            >>> m = bp.make("sghmc", bp.nn.mlp(2, [], 1), bp.Gaussian(scale=0.1))
            >>> step = m.start_run(X, y, steps=4, lr=None)
            >>> whole = step.potential.gradient(step.theta, X, y, 10)[1]
            >>> torch.allclose(step.full_gradient(step.theta, 3), whole, atol=1e-5)
            True
        """
        if self.data is None:
            raise ValueError("full_gradient needs the run's data (a measured run: lr=None)")
        x, y = self.data
        axis, n = (0 if theta.dim() == 1 else 1), self.dataset_size
        total = torch.zeros_like(theta)
        for first in range(0, n, chunk):
            rows = min(chunk, n - first)
            xc, yc = x.narrow(axis, first, rows), y.narrow(axis, first, rows)
            total = total + self.potential.gradient(theta, xc, yc, n)[1] * (rows / n)
        return total

    def _chunk(self, xb: torch.Tensor) -> int:
        """The rows of one pass of :meth:`full_gradient`: ``CHUNK`` or the minibatch's, if
        more, at most ``N``."""
        return min(self.dataset_size, max(self._rows(xb), CHUNK))

    def _control(self, grad: torch.Tensor, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        """The minibatch gradient with its control variate (SVRG, Johnson & Zhang 2013; for
        Langevin dynamics Dubey et al. 2016): ``g_B(θ) - g_B(θ̃) + g(θ̃)``, with ``θ̃`` the
        position at the epoch's first step and ``g(θ̃)`` its full-data gradient. Unbiased, and
        its noise is the minibatch's noise of ``g(θ) - g(θ̃)``: it shrinks with the chain's
        move within an epoch instead of being that of the gradient itself."""
        if self._anchor is None:
            anchor = self.theta.detach().clone()
            self._anchor = (anchor, self.full_gradient(anchor, self._chunk(xb)))
            return self._anchor[1].clone()  # θ = θ̃: the minibatch terms cancel
        anchor, full = self._anchor
        _, at_anchor = self.potential.gradient(anchor, xb, yb, self.dataset_size)
        return grad - at_anchor + full

    # ------------------------------------------------------------------ the measured step

    def _measure(
        self,
        xb: torch.Tensor,
        yb: torch.Tensor,
        grad: torch.Tensor,
        travelling: bool,
        calibrating: bool,
    ) -> None:
        """The noise of this minibatch's gradient (while travelling; with the control variate,
        whose noise grows with the step, on every step of one epoch in four of the sampling
        stage too: the noise differs from one step of an epoch to the next), then
        the step if due."""
        if not self._minibatch(xb):
            self._previous = None
        else:
            due = travelling or (self._controlled(xb) and self._epoch_index % 4 == 0)
            if due and self._previous is not None and "direction" in self._calibration:
                self._add_noise(grad)
            self._previous = (xb, yb)
        if calibrating:
            self._calibrate(xb, yb, grad)

    def _add_noise(self, grad: torch.Tensor) -> None:
        """One sample of the minibatch gradient's noise: the gradients of this minibatch and of
        the last at the same position differ by two minibatches' errors."""
        xp, yp = self._previous  # type: ignore[misc]
        _, other = self.potential.gradient(self.theta, xp, yp, self.dataset_size)
        if self._controlled(xp) and self._anchor is not None:
            anchor, full = self._anchor
            other = other - self.potential.gradient(anchor, xp, yp, self.dataset_size)[1] + full
        d = (grad - other).detach()
        x, minv = self._calibration["direction"], self._calibration["minv"]
        along = (x * d).sum(-1).square() / (x.square() / minv).sum(-1)
        power = self._power(self._step_scale())  # the step this noise was measured at
        if not self._noise:
            self._noise = [torch.zeros_like(d), torch.zeros_like(along), 0, 0.0]
        self._noise[0] += d.square()
        self._noise[1] += along
        self._noise[2] += 1
        self._noise[3] = self._noise[3] + power

    def _calibrate(self, xb: torch.Tensor, yb: torch.Tensor, grad: torch.Tensor) -> None:
        """Measure ``λ_max`` at ``theta`` on this minibatch and set the step.

        The step is :func:`sghmc_step_size` or :func:`sgld_step_size`, with the minibatch
        noise gathered since the last calibration (the last estimate where none was). A step
        that collects nothing (:meth:`RunPlan.travelling`), but for the second half of a
        constant schedule's burn-in, travels: on the curvature alone (the noise only heats a
        chain that is not collected yet), SGLD at
        :data:`~bnn_pyro.methods.sgmcmc.samplers.SGLD_TRAVEL`; the others step as the chain
        samples (``self.target`` and the noise's share
        :data:`~bnn_pyro.methods.sgmcmc.samplers.NOISE_SHARE`), so the chain cools and settles
        at that step before it is collected. The step is rounded down to a power
        of ``2^(1/8)``; after the burn-in of a constant schedule it only shrinks, when a
        curvature that grew on the way rounds it lower by ``2^(1/4)`` or more (one power is
        within what the measure itself varies by).
        """
        k, plan, theta, n = self.k, self.plan, self.theta.detach(), self.dataset_size
        minv = self.state.minv.clone() if self.state is not None else torch.ones_like(theta)
        size = theta.square().mean(-1, keepdim=True).sqrt() + 1e-2
        controlled = self._controlled(xb)
        if controlled:  # the curvature of the whole data's potential
            chunk = self._chunk(xb)
            grad = self.full_gradient(theta, chunk)

            def gradient(at: torch.Tensor) -> torch.Tensor:
                return self.full_gradient(at, chunk)

        else:

            def gradient(at: torch.Tensor) -> torch.Tensor:
                return self.potential.gradient(at, xb, yb, n)[1]

        def hvp(x: torch.Tensor) -> torch.Tensor:
            delta = 1e-3 * size / x.square().mean(-1, keepdim=True).sqrt().clamp_min(1e-30)
            return (gradient(theta + delta * x) - grad) / delta

        start = minv * grad
        start = start / start.square().mean(-1, keepdim=True).sqrt().clamp_min(1e-30)
        lam, direction = largest_curvature(hvp, start + self._spread(theta), minv)
        if not bool(torch.isfinite(lam).all()):
            raise TrainingDivergedError(
                f"SG-MCMC: the potential's curvature is not finite{_which(torch.isfinite(lam))}"
            )
        # the second half of a burn-in already steps as the chain will sample: it settles there;
        # a controlled chain's noise grows with its step, so it bounds the travel's steps too
        travel = plan.travelling(k) and not (plan.schedule == "constant" and 2 * k >= plan.burn_in)
        travel = travel and not controlled
        noise = self._calibration.get("noise")
        if self._noise and self._noise[2] > 0:
            count = self._noise[2]
            noise = torch.maximum(
                (minv * self._noise[0]).amax(-1) / (2 * count), self._noise[1] / (2 * count)
            )
            if self._controlled(xb):
                noise = self._scaled_noise(noise, self._noise[3] / count)
        target, noise_then = self.target, None if travel else noise
        if self.state is not None:
            scale = sghmc_step_size(lam, noise_then, target=target, mdecay=self.mdecay,
                                    temperature=self.temperature, dataset_size=n)  # fmt: skip
        else:
            target = max(target, SGLD_TRAVEL) if travel else target  # type: ignore[type-var]
            scale = sgld_step_size(lam, noise_then, target=target, temperature=self.temperature,
                                   dataset_size=n)  # fmt: skip
        # rounded down to a power of 2^(1/8): a run does not follow its arithmetic's last bits
        # (K chains run stacked sum the same terms in another order and end as their own fits)
        scale = torch.exp2(torch.floor(8 * torch.log2(scale)) / 8).reshape(*theta.shape[:-1], 1)
        if (
            plan.schedule == "constant"
            and k > plan.burn_in
            and isinstance(self.scale, torch.Tensor)
        ):
            # a controlled chain's measured noise follows its step: it may grow back, damped
            moved = (scale < self.scale / 1.1) | (controlled & (scale > self.scale * 1.1))
            scale = torch.where(moved, scale, self.scale)
        self.scale = scale
        self._calibration = {"minv": minv, "direction": direction, "curvature": lam, "noise": noise}
        self._noise, self._moved = [], False

    def _power(self, scale: float | torch.Tensor) -> torch.Tensor:
        """What the noise's share grows with at the measured step ``scale``: ``lr²`` (SGHMC) or
        ``lr`` (SGLD), per chain ``(K,)`` (``(1,)`` alone)."""
        lr = torch.as_tensor(scale * self.plan.step_size(self.k), dtype=self.theta.dtype)
        lr = lr.to(self.theta.device).reshape(-1)
        return lr.square() if self.state is not None else lr

    def _scaled_noise(self, noise: torch.Tensor, power: torch.Tensor) -> torch.Tensor:
        """The control variate's noise ``w`` measured at the step power ``p₀`` (:meth:`_power`)
        as the noise the step size functions are to bound.

        That noise is the minibatch noise of ``g(θ) - g(θ̃)``, whose size follows the chain's
        move within an epoch: ``w ∝ p`` where the move is small against the posterior's width,
        so that the share of the injected noise, ``∝ p w``, grows as ``p²``. The largest ``p``
        with a share ``<= share`` is then ``p₀ sqrt(share / share₀)``, for ``share₀`` the share
        at ``p₀``: a step that measured a tiny noise at a tiny step does not leap to one whose
        noise it never saw. The noise returned is the one at which the step size functions give
        that ``p``: ``sqrt(share c w / (N p₀))``, with ``c`` the injected noise's constant
        (``mdecay (2 - mdecay) T`` for SGHMC, ``2 T`` for SGLD). Where the move is already as
        wide as the posterior, ``w`` grows more slowly than ``p`` and the share at the new step
        is smaller than assumed (the calibrations after it measure it again).
        """
        t = self.temperature
        c = self.mdecay * (2.0 - self.mdecay) * t if self.state is not None else 2.0 * t
        power = power.to(noise).reshape(noise.shape).clamp_min(1e-30)
        return (NOISE_SHARE * c * noise / (self.dataset_size * power)).sqrt()

    def _spread(self, theta: torch.Tensor) -> torch.Tensor:
        """A fixed vector with every coordinate nonzero and no two alike (the same for every
        chain and run), so that the power iteration's start is never orthogonal to the top
        eigenvector."""
        k = torch.arange(theta.shape[-1], device=theta.device, dtype=theta.dtype)
        return torch.cos(2.399963 * k + 1.0).expand_as(theta)

    def _step_scale(self) -> float | torch.Tensor:
        """The measured step, shrunk while the SGHMC preconditioner grows past its value at the
        last calibration (``lr² M⁻¹`` then stays at most what was measured)."""
        if self.target is None or self.state is None or not self._moved:
            return self.scale
        ratio = (self._calibration["minv"] / self.state.minv).amin(-1, keepdim=True)
        return self.scale * ratio.clamp(max=1.0).sqrt()

    def step_size(self) -> torch.Tensor | None:
        """The measured step of each chain (``(K,)``; ``(1,)`` alone) at the last
        calibration, ``None`` for a run with given step sizes.

        Example:
            >>> import bnn_pyro as bp
            >>> X = torch.randn(16, 2); y = X.sum(-1, keepdim=True)
            >>> m = bp.make("sgld", bp.nn.mlp(2, [], 1), bp.Gaussian(scale=0.1))
            >>> step = m.start_run(X, y, steps=8, lr=None)
            >>> _ = step(X, y)  # the first step measures it
            >>> step.step_size().shape, m.start_run(X, y, steps=8, lr=0.01).step_size()
            (torch.Size([1]), None)
        """
        if self.target is None or not isinstance(self.scale, torch.Tensor):
            return None
        return self.scale.reshape(-1)

    def end_epoch(self, losses: list[float], sizes: list[int]) -> dict[str, Any]:
        """The mean ``U`` per point, each minibatch weighted by its rows; with K chains, the
        chains' mean and ``member_loss`` (each chain's)."""
        weights = torch.tensor(sizes, dtype=torch.float64, device="cpu")
        per_chain = (torch.stack(self._epoch) * weights.unsqueeze(-1)).sum(0) / weights.sum()
        row: dict[str, Any] = {"loss": float(per_chain.mean())}
        if self.theta.dim() == 2:
            row["member_loss"] = per_chain.tolist()
        return row

    def state_dict(self) -> dict:
        """No resumable state: an SG-MCMC run is not resumed."""
        return {}


def _which(finite: torch.Tensor) -> str:
    """`` (chain(s) [..] of K)`` for a stack of chains, empty for one."""
    if len(finite) == 1:
        return ""
    bad = [k + 1 for k, ok in enumerate(finite.tolist()) if not ok]
    return f" (chain(s) {bad} of {len(finite)})"
