"""The step a run measures on the posterior it samples (``fit`` on the whole data set without a
given ``lr``, or with ``lr="measured"``), and the control variate of its minibatches:
:class:`MeasuredStep`, the part of :class:`~bnn_pyro.methods.sgmcmc.chain.ChainStep` that sets
its step size (which step ``fit``'s arguments ask for:
:func:`~bnn_pyro.methods.sgmcmc.step_sizes.run_step`).

At the points :meth:`~bnn_pyro.methods.sgmcmc.chain.RunPlan.calibrating` names (most of them in
the burn-in, where the preconditioner adapts too), the chain measures the largest curvature of
its preconditioned potential by power iteration on finite-difference Hessian-vector products
(:func:`~bnn_pyro.methods.sgmcmc.step_sizes.largest_curvature`) and, with minibatches, the
variance of the minibatch gradient (the gradient of the previous minibatch at the same
position), and takes :func:`~bnn_pyro.methods.sgmcmc.step_sizes.sghmc_step_size` or
:func:`~bnn_pyro.methods.sgmcmc.step_sizes.sgld_step_size`. The burn-in's last calibration
comes after its last adapting step, and later ones may only shrink the step: on a posterior
whose curvature is the same everywhere (a Gaussian) the full-batch chain runs one fixed update
rule.

Such a run on minibatches (``lr="measured"``;
:func:`~bnn_pyro.methods.sgmcmc.step_sizes.even_batch` of them an epoch, of equal size) steps
with the minibatch gradient and its control variate (SVRG: ``g_B(θ) - g_B(θ̃) +
g(θ̃)``, ``θ̃`` the position at the epoch's start and ``g(θ̃)`` its gradient on the whole data
set), and measures
the curvature on the whole data set. The plain minibatch gradient's noise is often far larger
than the noise the sampler injects at the step the curvature allows (on a small network's
posterior a hundred times), so a chain that keeps its share small barely moves; the control
variate's noise is the minibatch noise of ``g(θ) - g(θ̃)`` alone, which shrinks with the chain's
move within an epoch. Its size thus follows the step: the noise is measured through the
sampling stage too, and the step may grow back after the burn-in (:meth:`MeasuredStep.measure`).
"""

from __future__ import annotations

from typing import Any

import torch

from bnn_pyro.exceptions import TrainingDivergedError
from bnn_pyro.methods.sgmcmc.dense import DensePreconditioner, dense_preconditioner
from bnn_pyro.methods.sgmcmc.step_sizes import (
    NOISE_SHARE,
    SGLD_TRAVEL,
    largest_curvature,
    sghmc_step_size,
    sgld_step_size,
)

__all__ = [
    "CHUNK",
    "MeasuredStep",
    "which_chains",
]


#: The rows of one pass of the whole data set's gradient (the control variate's anchor, the
#: curvature of a run on minibatches), or the minibatch's if more.
CHUNK = 1024


class MeasuredStep:
    """The measured step and the control variate of a
    :class:`~bnn_pyro.methods.sgmcmc.chain.ChainStep` (module docstring), which calls
    :meth:`start_measuring` when it is made, :meth:`new_epoch` at each epoch's start, and per
    step :meth:`controlled_gradient` (on a minibatch with the data), :meth:`measure` (with a
    ``target``), :meth:`preconditioner_moved` (while SGHMC adapts) and :meth:`step_scale`. It
    reads the chain's ``potential``, ``theta``, ``plan``, ``state``, ``dataset_size``,
    ``temperature``, ``mdecay`` and ``k``.

    Example:
        >>> import bnn_pyro as bp
        >>> X = torch.randn(16, 2); y = X.sum(-1, keepdim=True)
        >>> m = bp.make("sghmc", bp.nn.mlp(2, [], 1), bp.Gaussian(scale=0.1))
        >>> step = m.start_run(X, y, steps=8, lr=None)
        >>> isinstance(step, MeasuredStep), step.controlled(X[:4]), step.controlled(X)
        (True, True, False)
    """

    potential: Any
    theta: torch.Tensor
    plan: Any
    state: Any
    dataset_size: int
    temperature: float
    mdecay: float
    k: int

    def start_measuring(
        self,
        target: float | None,
        data: tuple[torch.Tensor, torch.Tensor] | None,
        dense: bool,
    ) -> None:
        """Set up a run: ``target`` (``None``: the plan's step sizes, nothing measured),
        ``data``, the whole data set (kept only with a ``target``, for the control variate),
        and ``dense``: SGLD measures its dense preconditioner with its step
        (:mod:`~bnn_pyro.methods.sgmcmc.dense`; only with a ``target``)."""
        self.target = target
        self.use_dense = dense and target is not None and self.state is None
        #: SGLD's dense preconditioner, once measured (:meth:`_calibrate`); ``None``: the identity.
        self.dense: DensePreconditioner | None = None
        # the measured step (per chain, (K, 1); (1,) alone) that plan.step_size(k) multiplies
        self.scale: float | torch.Tensor = 1.0
        self._calibration: dict[str, Any] = {}  # M⁻¹ at the last calibration, its direction, noise
        # Σ Δg², Σ (xᵀΔg)² (x of unit M-norm), count, Σ the step's power, since the calibration
        self._noise: list[Any] = []
        self._previous: tuple[torch.Tensor, torch.Tensor] | None = None  # the last minibatch
        self._moved = False
        self.data = data if target is not None else None
        self._anchor: tuple[torch.Tensor, torch.Tensor] | None = None  # θ̃, its full gradient
        self._epoch_index = 0

    def new_epoch(self, epoch: int) -> None:
        """An epoch starts: its first minibatch step sets a new anchor."""
        self._anchor = None
        self._epoch_index = epoch

    def preconditioner_moved(self) -> None:
        """SGHMC's ``M⁻¹`` left its value at the last calibration (:meth:`step_scale`)."""
        self._moved = True

    def _rows(self, xb: torch.Tensor) -> int:
        return xb.shape[0 if self.theta.dim() == 1 else 1]

    def _minibatch(self, xb: torch.Tensor) -> bool:
        return self._rows(xb) < self.dataset_size

    def controlled(self, xb: torch.Tensor) -> bool:
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

    def controlled_gradient(
        self, grad: torch.Tensor, xb: torch.Tensor, yb: torch.Tensor
    ) -> torch.Tensor:
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

    def measure(
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
            due = travelling or (self.controlled(xb) and self._epoch_index % 4 == 0)
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
        if self.controlled(xp):  # then this step's gradient set the epoch's anchor too
            anchor, full = self._anchor  # type: ignore[misc]
            other = other - self.potential.gradient(anchor, xp, yp, self.dataset_size)[1] + full
        d = (grad - other).detach()
        x = self._calibration["direction"]
        along = (x * d).sum(-1).square()  # x has unit M-norm: sqrt(Σ x² / M⁻¹) = 1
        if self.dense is not None:  # the noise the preconditioned step sees: M^{1/2} d
            d = self.dense.sqrt_apply(d)
        power = self._power(self.step_scale())  # the step this noise was measured at
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
        :data:`~bnn_pyro.methods.sgmcmc.step_sizes.SGLD_TRAVEL`; the others step as the chain
        samples (``self.target`` and the noise's share
        :data:`~bnn_pyro.methods.sgmcmc.step_sizes.NOISE_SHARE`), so the chain cools and settles
        at that step before it is collected. The step is rounded down to a power
        of ``2^(1/8)``; after the burn-in of a constant schedule it only shrinks, when a
        curvature that grew on the way rounds it lower by ``2^(1/4)`` or more (one power is
        within what the measure itself varies by).

        ``λ_max`` is :func:`largest_curvature` of finite-difference Hessian-vector products,
        started from ``M⁻¹ g`` scaled to a root mean square of 1 (per chain) plus
        :meth:`_spread`. A run with SGLD's dense preconditioner ``M`` travels without it, then
        measures ``M`` in the second half of the burn-in, at its end and at the start of a
        sampling stage, and ``λ_max`` of ``M^{1/2} H M^{1/2}`` (from ``g``: on the whitened
        potential, any start with a share of the top eigenvector converges alike).
        """
        k, plan, theta, n = self.k, self.plan, self.theta.detach(), self.dataset_size
        minv = self.state.minv.clone() if self.state is not None else torch.ones_like(theta)
        size = theta.square().mean(-1, keepdim=True).sqrt() + 1e-2
        controlled = self.controlled(xb)
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

        # the first half of a constant schedule's burn-in and a cycle's exploration travel
        early = plan.travelling(k) and not (plan.schedule == "constant" and 2 * k >= plan.burn_in)
        if self.use_dense:
            # travel plain (a Newton-like step far from a mode can throw a network's weights
            # far); measure M once the chain has settled: in the second half of the burn-in, at
            # its end and where a sampling stage starts; keep it while the chain samples
            starts = k > 0 and not plan.sampling(k - 1)
            if early:
                self.dense = None
            elif plan.travelling(k) or k == plan.burn_in or starts:
                self.dense = dense_preconditioner(hvp, theta)
        pre, curvature = self.dense, hvp
        if pre is not None:  # the whitened potential: its curvature is 1 where H is constant

            def curvature(x: torch.Tensor) -> torch.Tensor:
                return pre.sqrt_apply(hvp(pre.sqrt_apply(x)))

        start = minv * grad
        start = start / start.square().mean(-1, keepdim=True).sqrt().clamp_min(1e-30)
        lam, direction = largest_curvature(curvature, start + self._spread(theta), minv)
        if pre is not None:  # back to θ's coordinates, of unit M-norm
            direction = pre.sqrt_apply(direction)
        if not bool(torch.isfinite(lam).all()):
            where = which_chains(torch.isfinite(lam).reshape(-1))  # () for one chain
            raise TrainingDivergedError(f"SG-MCMC: the potential's curvature is not finite{where}")
        # the second half of a burn-in already steps as the chain will sample: it settles there;
        # a controlled chain's noise grows with its step, so it bounds the travel's steps too
        travel = early and not controlled
        noise = self._calibration.get("noise")
        if self._noise:  # gathered since the last calibration: its count is >= 1
            count = self._noise[2]
            noise = torch.maximum(
                (minv * self._noise[0]).amax(-1) / (2 * count), self._noise[1] / (2 * count)
            )
            if self.controlled(xb):
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
        self._calibration = {"minv": minv, "direction": direction, "noise": noise}
        self._noise, self._moved = [], False

    def _power(self, scale: float | torch.Tensor) -> torch.Tensor:
        """What the noise's share grows with at the measured step ``scale``: ``lr²`` (SGHMC) or
        ``lr`` (SGLD), per chain ``(K,)`` (``(1,)`` alone)."""
        # scale is the calibrated (K, 1) tensor (noise is gathered after a calibration only):
        # the product keeps theta's dtype and device
        lr = torch.as_tensor(scale * self.plan.step_size(self.k)).reshape(-1)
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
        power = power.reshape(noise.shape).clamp_min(1e-30)  # both of theta's dtype
        return (NOISE_SHARE * c * noise / (self.dataset_size * power)).sqrt()

    def _spread(self, theta: torch.Tensor) -> torch.Tensor:
        """A fixed vector with every coordinate nonzero and no two alike (the same for every
        chain and run), so that the power iteration's start is never orthogonal to the top
        eigenvector: ``cos(φ k + 1)`` for coordinate ``k`` and the golden angle
        ``φ = π (3 - √5) ≈ 2.399963``."""
        k = torch.arange(theta.shape[-1], device=theta.device, dtype=theta.dtype)
        return torch.cos(2.399963 * k + 1.0).expand_as(theta)

    def step_scale(self) -> float | torch.Tensor:
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


def which_chains(finite: torch.Tensor) -> str:
    """`` (chain(s) [..] of K)`` naming the chains that are not ``finite`` ``(K,)``, empty for one
    chain (an error message's tail).

    Example:
        >>> which_chains(torch.tensor([True, False, True])), which_chains(torch.tensor([False]))
        (' (chain(s) [2] of 3)', '')
    """
    if len(finite) == 1:
        return ""
    bad = [k + 1 for k, ok in enumerate(finite.tolist()) if not ok]
    return f" (chain(s) {bad} of {len(finite)})"
