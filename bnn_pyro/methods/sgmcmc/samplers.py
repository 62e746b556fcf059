"""The SG-MCMC update rules as pure functions of flat tensors, and the cyclical step size (the
step sizes they default to: :mod:`~bnn_pyro.methods.sgmcmc.step_sizes`).

Every rule takes the *per-datum* gradient ``g = ∇U(θ) / N`` of a minibatch estimate of the
potential ``U(θ) = -log p(θ) - (N/B) Σ_batch log p(y|x, θ)`` over ``N`` training points, so that
one step size ``lr`` means the same on data sets of any size (the scaling of Springenberg et
al. 2016). ``θ`` is a flat ``(P,)`` vector (unconstrained coordinates), and so is every state.

* :func:`sgld_step`: stochastic gradient Langevin dynamics (Welling & Teh 2011), with
  ``ε = lr / N``: ``θ ← θ - ε ∇U + sqrt(2 ε T) ξ``. On a Gaussian posterior of precision ``A``
  its stationary covariance is ``T A⁻¹ (I - εA/2)⁻¹``: the step's bias grows with ``ε λ_max``.
  A dense preconditioner ``M`` (:mod:`~bnn_pyro.methods.sgmcmc.dense`) replaces ``A`` by
  ``M A`` in both the bias and the rate each direction relaxes at.
* :func:`sghmc_step`: SGHMC with the diagonal preconditioner ``M⁻¹ = 1 / sqrt(E[g²])`` of
  Springenberg et al. 2016 (estimated while the chain burns in, :func:`adapt_sghmc`), integrated
  by the BAOAB splitting of Leimkuhler & Matthews (2013): with ``h = lr / sqrt(N)`` and the
  velocity ``v = h M⁻¹ p``, a kick ``v ← v - lr² M⁻¹ g``, half a drift ``θ ← θ + v/2``, the
  friction and noise ``v ← (1 - mdecay) v + ξ``, ``ξ ~ N(0, mdecay (2 - mdecay) T (lr²/N)
  M⁻¹)``, and the other half drift. Its stationary law on a Gaussian posterior is the exact
  ``N(μ, T A⁻¹)`` at every stable step (``lr² λ_max(M⁻¹A/N) < 4``) and every friction, where the
  Euler-type update ``θ ← θ + v`` after the kick and the noise widens it by
  ``1 / (1 - s / (2 (2 - mdecay)))`` along a curvature direction with ``s = lr² λ``.
* The minibatch gradient's own noise adds to the injected one. None of the rules subtracts an
  estimate of it (along a direction it need not be white: the minibatches of one reshuffled
  epoch add up to the full gradient, so its effect depends on how fast the chain moves within an
  epoch); the default step sizes keep its share small instead
  (:mod:`~bnn_pyro.methods.sgmcmc.step_sizes`), and a default run on minibatches first shrinks
  the noise itself with a control variate (:mod:`~bnn_pyro.methods.sgmcmc.measured`).
* :func:`cyclical_lr` and :func:`cycle_position`: the cosine step size of cyclical SG-MCMC
  (Zhang et al. 2020), restarted ``cycles`` times over the run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from bnn_pyro.methods.sgmcmc.dense import DensePreconditioner

__all__ = [
    "Generators",
    "SGHMCState",
    "StepSize",
    "adapt_sghmc",
    "cycle_position",
    "cyclical_lr",
    "sghmc_step",
    "sgld_step",
    "standard_normal",
]

#: A step size: one float, or a tensor that broadcasts against ``θ`` (``(K, 1)``: one per chain
#: of a ``(K, P)`` stack).
StepSize = float | torch.Tensor

#: The source of a step's noise: one generator for one chain, or one per row of a ``(K, P)``
#: stack of K chains (each row's draws then come from its own chain's generator).
Generators = torch.Generator | Sequence[torch.Generator] | None


@dataclass
class SGHMCState:
    """The state of a scale-adapted SGHMC chain over ``P`` coordinates (each field ``(P,)``).

    Attributes:
        momentum: ``v``, the velocity (``h M⁻¹ r`` for the momentum ``r``, ``h = lr / sqrt(N)``).
        tau: the length of the burn-in's averaging window, per coordinate (Springenberg et al.).
        grad_mean: running mean of ``g``.
        grad_sq: running mean of ``g²`` (what ``M⁻¹`` is built from).
        minv: the preconditioner ``M⁻¹ = 1 / sqrt(grad_sq)``.
        lr: the step size of the last step (a new one rescales ``momentum``): a float, or a
            ``(K, 1)`` tensor for K chains.

    Example:
        >>> state = SGHMCState.start(torch.zeros(3))
        >>> state.minv.tolist(), state.momentum.tolist()
        ([1.0, 1.0, 1.0], [0.0, 0.0, 0.0])
    """

    momentum: torch.Tensor
    tau: torch.Tensor
    grad_mean: torch.Tensor
    grad_sq: torch.Tensor
    minv: torch.Tensor
    lr: StepSize = 0.0

    @classmethod
    def start(cls, theta: torch.Tensor) -> SGHMCState:
        """A chain at rest at ``theta (P,)``, with the initial estimates of pysgmcmc (ones)."""
        ones = torch.ones_like(theta)
        return cls(torch.zeros_like(theta), ones, ones.clone(), ones.clone(), ones.clone())


def standard_normal(like: torch.Tensor, generator: Generators = None) -> torch.Tensor:
    """Standard normal draws shaped like ``like``: ``(P,)`` from one generator, or ``(K, P)``
    with row ``k`` from ``generator[k]`` (what chain ``k`` alone would draw, so K chains stacked
    draw each chain's own noise).

    Example:
        >>> gens = [torch.Generator().manual_seed(s) for s in (0, 1)]
        >>> stacked = standard_normal(torch.zeros(2, 3), gens)
        >>> alone = torch.randn(3, generator=torch.Generator().manual_seed(1))
        >>> stacked.shape, bool(torch.equal(stacked[1], alone))
        (torch.Size([2, 3]), True)
    """
    device, dtype = like.device, like.dtype
    if generator is None or isinstance(generator, torch.Generator):
        return torch.randn(like.shape, generator=generator, device=device, dtype=dtype)
    if like.dim() != 2 or len(generator) != like.shape[0]:
        raise ValueError(
            f"one generator per chain: {len(generator)} generators for a stack of shape "
            f"{tuple(like.shape)}"
        )
    return torch.stack(
        [torch.randn(like.shape[1:], generator=g, device=device, dtype=dtype) for g in generator]
    )


def adapt_sghmc(state: SGHMCState, grad: torch.Tensor, forget: bool = True) -> None:
    """One burn-in update of the preconditioner (in place): Springenberg et al.'s running
    averages of ``g`` and ``g²`` over a window ``tau`` that grows while the gradient is noisy.

    With ``forget=False`` the averages are over every update so far (``tau`` counts them; start
    it at 0): what a noise-free stage (a cyclical run's exploration) needs, where a full-batch
    gradient goes to zero as the chain settles, so the window, which shrinks while the gradient
    is not noisy, would follow it down and the preconditioner would grow without bound.

    Args:
        state: the chain's state.
        grad: ``(P,)`` the per-datum gradient of this step.
        forget: Springenberg et al.'s window (``True``) or the plain mean of every update.

    Example:
        >>> state = SGHMCState.start(torch.zeros(2))
        >>> for _ in range(200):
        ...     adapt_sghmc(state, torch.tensor([2.0, -0.5]))
        >>> [round(v, 3) for v in state.minv.tolist()]
        [0.5, 2.0]
        >>> state = SGHMCState.start(torch.zeros(1)); state.tau.zero_()
        tensor([0.])
        >>> for g in (4.0, 0.0, 0.0, 0.0):
        ...     adapt_sghmc(state, torch.tensor([g]), forget=False)
        >>> [round(v, 6) for v in state.minv.tolist()]  # 1 / sqrt(mean g²) = 1 / sqrt(16 / 4)
        [0.5]
    """
    r = 1.0 / (state.tau + 1.0)
    state.grad_mean.mul_(1.0 - r).add_(r * grad)
    state.grad_sq.mul_(1.0 - r).add_(r * grad * grad)
    if forget:
        state.tau = 1.0 + state.tau * (1.0 - state.grad_mean.square() / state.grad_sq)
    else:
        state.tau = state.tau + 1.0
    state.minv = state.grad_sq.sqrt().add(1e-16).reciprocal()


def sghmc_step(
    theta: torch.Tensor,
    state: SGHMCState,
    grad: torch.Tensor,
    *,
    lr: StepSize,
    mdecay: float,
    temperature: float,
    dataset_size: int,
    generator: Generators = None,
    noise: bool = True,
) -> None:
    """One BAOAB step of preconditioned SGHMC, in place on ``theta (P,)`` and ``state``: the
    kick ``v ← v - lr² M⁻¹ g``, ``θ ← θ + v/2``, ``v ← (1 - mdecay) v + ξ`` with
    ``ξ ~ N(0, mdecay (2 - mdecay) T (lr²/N) M⁻¹)``, ``θ ← θ + v/2`` (module docstring).

    Args:
        theta: the position (unconstrained coordinates), or ``(K, P)`` K chains (every state
            field then ``(K, P)`` too).
        state: the chain's state; its ``momentum`` is rescaled first if ``lr`` changed.
        grad: ``(P,)`` the per-datum minibatch gradient ``∇U / N`` at ``theta``.
        lr: the step size (> 0): a float, or a ``(K, 1)`` tensor (one per chain).
        mdecay: the momentum decay (friction) per step, in (0, 1).
        temperature: ``T``; the chain samples ``p(θ|D)^(1/T)``.
        dataset_size: ``N``.
        generator: the source of the injected noise (one per chain for ``(K, P)``, see
            :func:`standard_normal`).
        noise: ``False`` for a noise-free step (momentum SGD: a cyclical run's exploration).

    Example:
        >>> theta, state = torch.zeros(2), SGHMCState.start(torch.zeros(2))
        >>> sghmc_step(theta, state, torch.ones(2), lr=0.1, mdecay=0.1, temperature=1.0,
        ...            dataset_size=100, noise=False)
        >>> [round(v, 6) for v in theta.tolist()]  # v = -lr² M⁻¹ g; θ += v/2 + (1 - mdecay) v/2
        [-0.0095, -0.0095]
    """
    if _changed(state.lr, lr):
        state.momentum.mul_(lr / state.lr)  # v = h M⁻¹ r: the momentum r is kept
    state.lr = lr
    velocity = state.momentum
    velocity.sub_(lr * lr * state.minv * grad)
    theta.add_(0.5 * velocity)
    velocity.mul_(1.0 - mdecay)
    if noise:
        variance = mdecay * (2.0 - mdecay) * temperature * lr * lr / dataset_size * state.minv
        velocity.add_(variance.sqrt() * standard_normal(theta, generator))
    theta.add_(0.5 * velocity)


def _changed(previous: StepSize, lr: StepSize) -> bool:
    """Whether a chain that last stepped with ``previous`` (0: never) now steps with ``lr``."""
    if isinstance(previous, torch.Tensor) or isinstance(lr, torch.Tensor):
        return not (isinstance(previous, float) and previous == 0.0) and (
            not isinstance(previous, torch.Tensor)
            or not isinstance(lr, torch.Tensor)
            or not torch.equal(previous, lr)
        )
    return previous > 0 and lr != previous


def sgld_step(
    theta: torch.Tensor,
    grad: torch.Tensor,
    *,
    lr: StepSize,
    temperature: float,
    dataset_size: int,
    generator: Generators = None,
    noise: bool = True,
    preconditioner: DensePreconditioner | None = None,
) -> None:
    """One SGLD step in place: ``θ ← θ - ε ∇U + sqrt(2 ε T) ξ`` with ``ε = lr / N``; with a
    constant preconditioner ``M``, ``θ ← θ - ε M ∇U + sqrt(2 ε T) M^{1/2} ξ`` (the same
    stationary law for any ``M``, :mod:`~bnn_pyro.methods.sgmcmc.dense`).

    Args:
        theta: ``(P,)`` the position, or ``(K, P)`` K chains.
        grad: like ``theta``: the per-datum minibatch gradient ``∇U / N`` (so ``ε ∇U = lr g``).
        lr: the step size per datum (> 0): a float, or a ``(K, 1)`` tensor (one per chain).
        temperature: ``T``; the chain samples ``p(θ|D)^(1/T)`` (up to the step's bias).
        dataset_size: ``N``.
        generator: the source of the injected noise (one per chain for ``(K, P)``).
        noise: ``False`` for a plain SGD step (a cyclical run's exploration).
        preconditioner: ``M`` (one per chain for ``(K, P)``); ``None``: the identity.

    Example:
        >>> theta = torch.zeros(2)
        >>> sgld_step(theta, torch.ones(2), lr=0.1, temperature=1.0, dataset_size=10, noise=False)
        >>> theta.tolist()
        [-0.10000000149011612, -0.10000000149011612]
        >>> pre = DensePreconditioner(torch.eye(2), torch.tensor([1.0, 2.0]))  # M = diag(1, 4)
        >>> sgld_step(theta, torch.ones(2), lr=0.1, temperature=1.0, dataset_size=10,
        ...           noise=False, preconditioner=pre)
        >>> [round(v, 6) for v in theta.tolist()]
        [-0.2, -0.5]
    """
    theta.sub_(lr * (grad if preconditioner is None else preconditioner.apply(grad)))
    if noise:
        variance = 2.0 * lr * temperature / dataset_size
        scale = variance.sqrt() if isinstance(variance, torch.Tensor) else math.sqrt(variance)
        xi = standard_normal(theta, generator)
        theta.add_(scale * (xi if preconditioner is None else preconditioner.sqrt_apply(xi)))


def cycle_position(step: int, total: int, cycles: int) -> float:
    """Where ``step`` (0-based) of a run of ``total`` steps in ``cycles`` cycles sits in its
    cycle, in ``[0, 1)`` (Zhang et al.'s ``r(k)``; each cycle ``ceil(total / cycles)`` steps).

    Example:
        >>> [cycle_position(k, 8, 2) for k in range(5)]
        [0.0, 0.25, 0.5, 0.75, 0.0]
    """
    length = math.ceil(total / cycles)
    return (step % length) / length


def cyclical_lr(step: int, total: int, cycles: int, lr: float) -> float:
    """The cosine step size of cyclical SG-MCMC: ``lr/2 (cos(π r) + 1)`` for
    ``r = cycle_position(step, total, cycles)``, from ``lr`` down towards 0 in every cycle.

    Example:
        >>> [round(cyclical_lr(k, 8, 2, 1.0), 3) for k in range(5)]
        [1.0, 0.854, 0.5, 0.146, 1.0]
    """
    return 0.5 * lr * (math.cos(math.pi * cycle_position(step, total, cycles)) + 1.0)
