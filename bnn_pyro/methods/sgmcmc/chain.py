"""``ChainStep``: one SG-MCMC step as a :class:`~bnn_pyro.training.TrainingStep` of the one
training loop, and ``RunPlan``: the step sizes, adaptation and collection of a whole run.

A run without a given ``lr`` measures its step on the posterior it samples, and on minibatches
steps with a control variate (:class:`~bnn_pyro.methods.sgmcmc.measured.MeasuredStep`, which
``ChainStep`` is).

The cyclical schedule (``csghmc``) is not right on a unimodal posterior, by its design: each
cycle's noise-free exploration pulls the chain to the mode, and the sampling stage that
follows steps with the cosine's smallest step sizes (below a tenth of the largest at the
default ``explore``), too small to spread out again before the cycle ends: its samples are
too narrow and worth a few draws per cycle. The ways out are not the cyclical method any
more (noise in the exploration: sghmc with a varying step), or not safe (a sampling stage
restarted at a measured step throws a network's weights that the exploration left idle,
whose preconditioner is large, far enough to diverge). It is meant for visiting several
modes; its defaults are the cyclical method's (4 cycles, ``explore=0.8``, no burn-in), with
the step measured at the start of each cycle and of its sampling stage (stable on any
posterior's scale) and a preconditioner averaged over every exploration step (on
minibatches, over Springenberg et al.'s window).
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
from bnn_pyro.methods.sgmcmc.measured import MeasuredStep, which_chains
from bnn_pyro.methods.sgmcmc.potential import PyroPotential
from bnn_pyro.methods.sgmcmc.samplers import (
    Generators,
    SGHMCState,
    adapt_sghmc,
    cyclical_lr,
    sghmc_step,
    sgld_step,
)
from bnn_pyro.methods.sgmcmc.stability import WINDOW, KineticGuard
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
        where on the whole data set it averages every update: :func:`adapt_sghmc` with
        ``forget=False``)."""
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
            # a cycle's last step always samples (:meth:`sampling`): there is a first one
            explored = next(j for j in range(length) if self.sampling(j))
            # explored >> j < explored for j >= 1 (k = 0 returned above): the first exploration
            early = any(k == explored >> j for j in range(1, 6))
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
        if self.schedule != "cyclical":  # every step samples
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


class ChainStep(MeasuredStep, TrainingStep):
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
            minibatch noise asks (:data:`~bnn_pyro.methods.sgmcmc.step_sizes.NOISE_SHARE`).
        data: ``(X, y)``, the whole data set (``(K, N, ...)`` for K chains) of a run with a
            ``target``: a step on a minibatch then takes the control variate (module
            docstring). ``None``: the plain minibatch gradient.
        dense: SGLD with a ``target`` measures a dense preconditioner with its step
            (:mod:`~bnn_pyro.methods.sgmcmc.dense`).

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
        dense: bool = False,
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
        # an SGHMC chain at a constant schedule that turns unstable after its burn-in goes back
        # and halves its step (:mod:`~bnn_pyro.methods.sgmcmc.stability`)
        guarded = self.state is not None and plan.schedule == "constant"
        self.guard = (
            KineticGuard(
                theta, self.state, self.collectors, plan.burn_in, temperature, dataset_size
            )  # fmt: skip
            if guarded and plan.burn_in >= WINDOW
            else None
        )
        # a cyclical run on the whole data set averages its preconditioner over every
        # exploration step (set at its first step, where the batch's rows are known)
        self.average_all = False
        self.start_measuring(target, data, dense)
        self.k = 0  # the step about to be taken
        self.sampled = 0  # sampling-stage steps so far (what thinning counts)
        self._epoch: list[torch.Tensor] = []  # each step's U, per chain

    def start_epoch(self, epoch: int) -> None:
        self._epoch = []
        self.new_epoch(epoch)

    def __call__(self, xb: torch.Tensor, yb: torch.Tensor) -> float:
        k, plan, n = self.k, self.plan, self.dataset_size
        adapting = self.state is not None and plan.adapting(k)
        if k == 0 and self.state is not None:
            self._choose_window(xb)
        value, grad = self.potential.gradient(self.theta, xb, yb, n)
        if self.controlled(xb):
            grad = self.controlled_gradient(grad, xb, yb)
        # U per chain, (K,) (K = 1 alone), on the CPU: the history's numbers, read every step
        values = torch.as_tensor(value, dtype=torch.float64, device="cpu").reshape(-1)
        grads_finite = torch.isfinite(grad).reshape(len(values), -1).all(1).cpu()
        finite = torch.isfinite(values) & grads_finite
        if not bool(finite.all()):
            raise TrainingDivergedError(
                f"SG-MCMC: the potential or its gradient is not finite{which_chains(finite)}: "
                f"{values.tolist()}"
            )
        if self.target is not None:
            self.measure(xb, yb, grad, plan.travelling(k), plan.calibrating(k))
        if adapting:
            adapt_sghmc(self.state, grad, forget=not self.average_all)  # type: ignore[arg-type]
            self.preconditioner_moved()
        lr, sampling = plan.step_size(k) * self.step_scale(), plan.sampling(k)
        if self.guard is not None:
            lr = lr * self.guard.shrink
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
                    preconditioner=self.dense,
                )
        # a chain that blew up goes back to a stable step (this step is then not offered)
        went_back = None if self.guard is None else self.guard.after_step(k)
        finite = torch.isfinite(self.theta).reshape(len(values), -1).all(1).cpu()
        if not bool(finite.all()):
            where = which_chains(finite)
            raise TrainingDivergedError(f"SG-MCMC: the chain left the finite numbers{where}")
        if sampling:  # the collector drops the burn-in's and thins the rest
            for chain, collector in enumerate(self.collectors):
                if went_back is not None and went_back[chain]:
                    continue
                row = self.theta if self.theta.dim() == 1 else self.theta[chain]
                collector.offer(self.sampled, lambda row=row: self.potential.constrain(row))
            self.sampled += 1
        self.k += 1
        self._epoch.append(values)
        return float(values.mean())

    def end_epoch(self, losses: list[float], sizes: list[int]) -> dict[str, Any]:
        """The mean ``U`` per point, each minibatch weighted by its rows; with K chains, the
        chains' mean and ``member_loss`` (each chain's)."""
        values = torch.stack(self._epoch)  # (steps, K), float64 on the CPU
        weights = values.new_tensor(sizes).reshape(-1, 1)
        per_chain = (values * weights).sum(0) / weights.sum()
        row: dict[str, Any] = {"loss": float(per_chain.mean())}
        if self.theta.dim() == 2:
            row["member_loss"] = per_chain.tolist()
        return row

    def _choose_window(self, xb: torch.Tensor) -> None:
        """SGHMC's preconditioner window for this run (:func:`adapt_sghmc`): a cyclical run on
        the whole data set averages every exploration step, since its noise-free gradient goes
        to zero as the chain settles and Springenberg et al.'s window, which shrinks while the
        gradient is not noisy, would follow it down; on minibatches the gradient keeps its
        noise and the window stays theirs (measured on UCI energy at a given ``lr``: the
        average over every step left the chain's training fit behind, RMSE 0.60 against 0.49).
        """
        self.average_all = self.plan.schedule == "cyclical" and not self._minibatch(xb)
        if self.average_all:
            self.state.tau.zero_()  # type: ignore[union-attr]

    def heat(self, chain: int = 0) -> float | None:
        """Chain ``chain``'s mean kinetic temperature over the sampling steps it kept
        (:meth:`~bnn_pyro.methods.sgmcmc.stability.KineticGuard.heat`: 1 on an exact chain);
        ``None`` for a run the guard does not watch (SGLD, a cyclical schedule, a burn-in under
        :data:`~bnn_pyro.methods.sgmcmc.stability.WINDOW` steps) or a chain that kept no step."""
        if self.guard is None:
            return None
        value = float(self.guard.heat()[chain])
        return None if math.isnan(value) else value

    def state_dict(self) -> dict:
        """No resumable state: an SG-MCMC run is not resumed."""
        return {}
