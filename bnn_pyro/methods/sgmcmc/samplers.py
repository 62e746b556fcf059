"""The SG-MCMC update rules as pure functions of flat tensors, and the cyclical step size.

Every rule takes the *per-datum* gradient ``g = ∇U(θ) / N`` of a minibatch estimate of the
potential ``U(θ) = -log p(θ) - (N/B) Σ_batch log p(y|x, θ)`` over ``N`` training points, so that
one step size ``lr`` means the same on data sets of any size (the scaling of Springenberg et
al. 2016). ``θ`` is a flat ``(P,)`` vector (unconstrained coordinates), and so is every state.

* :func:`sgld_step`: stochastic gradient Langevin dynamics (Welling & Teh 2011), with
  ``ε = lr / N``: ``θ ← θ - ε ∇U + sqrt(2 ε T) ξ``.
* :func:`sghmc_step`: the scale-adapted SGHMC of Springenberg et al. 2016 (as in pysgmcmc):
  ``v ← v - lr² M⁻¹ g - mdecay v + ξ``, ``θ ← θ + v``, with a diagonal preconditioner
  ``M⁻¹ = 1 / sqrt(E[g²])`` estimated while the chain burns in (:func:`adapt_sghmc`) and
  ``ξ ~ N(0, 2 mdecay T (lr²/N) M⁻¹)``: with ``h = lr / sqrt(N)`` and the friction
  ``C = mdecay M / h``, this is Chen et al. 2014's SGHMC at step ``h``, whose noise ``2 C h``
  (times ``T``) makes ``p(θ|D)^(1/T)`` its stationary law as ``h → 0``. Like Springenberg et
  al. (and pysgmcmc) it takes the minibatch gradient's own noise (their ``B̂``) as 0: an
  estimate of it subtracted from ``ξ`` made the samples *too narrow* here (measured: 10-14%
  too small variances on the Bayesian linear regression of the tests), since the minibatches
  of one reshuffled epoch add up to the full gradient and their noise largely cancels along
  the chain. What remains of it widens the samples by a few percent (4% there at the default
  ``lr``), growing with ``lr²``.
* :func:`cyclical_lr` and :func:`cycle_position`: the cosine step size of cyclical SG-MCMC
  (Zhang et al. 2020), restarted ``cycles`` times over the run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = [
    "Generators",
    "SGHMCState",
    "adapt_sghmc",
    "cycle_position",
    "cyclical_lr",
    "sghmc_step",
    "sgld_step",
    "standard_normal",
]

#: The source of a step's noise: one generator for one chain, or one per row of a ``(K, P)``
#: stack of K chains (each row's draws then come from its own chain's generator).
Generators = torch.Generator | Sequence[torch.Generator] | None


@dataclass
class SGHMCState:
    """The state of a scale-adapted SGHMC chain over ``P`` coordinates (each field ``(P,)``).

    Attributes:
        momentum: ``v``, the last move (``lr M⁻¹ r`` for the momentum ``r``).
        tau: the length of the burn-in's averaging window, per coordinate (Springenberg et al.).
        grad_mean: running mean of ``g``.
        grad_sq: running mean of ``g²`` (what ``M⁻¹`` is built from).
        minv: the preconditioner ``M⁻¹ = 1 / sqrt(grad_sq)``.
        lr: the step size of the last step (a new one rescales ``momentum``).

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
    lr: float = 0.0

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


def adapt_sghmc(state: SGHMCState, grad: torch.Tensor) -> None:
    """One burn-in update of the preconditioner (in place): Springenberg et al.'s running
    averages of ``g`` and ``g²`` over a window ``tau`` that grows while the gradient is noisy.

    Args:
        state: the chain's state.
        grad: ``(P,)`` the per-datum gradient of this step.

    Example:
        >>> state = SGHMCState.start(torch.zeros(2))
        >>> for _ in range(200):
        ...     adapt_sghmc(state, torch.tensor([2.0, -0.5]))
        >>> [round(v, 3) for v in state.minv.tolist()]
        [0.5, 2.0]
    """
    r = 1.0 / (state.tau + 1.0)
    state.grad_mean.mul_(1.0 - r).add_(r * grad)
    state.grad_sq.mul_(1.0 - r).add_(r * grad * grad)
    state.tau = 1.0 + state.tau * (1.0 - state.grad_mean.square() / state.grad_sq)
    state.minv = state.grad_sq.sqrt().add(1e-16).reciprocal()


def sghmc_step(
    theta: torch.Tensor,
    state: SGHMCState,
    grad: torch.Tensor,
    *,
    lr: float,
    mdecay: float,
    temperature: float,
    dataset_size: int,
    generator: Generators = None,
    noise: bool = True,
) -> None:
    """One scale-adapted SGHMC step, in place on ``theta (P,)`` and ``state``.

    Args:
        theta: the position (unconstrained coordinates), or ``(K, P)`` K chains (every state
            field then ``(K, P)`` too).
        state: the chain's state; its ``momentum`` is rescaled first if ``lr`` changed.
        grad: ``(P,)`` the per-datum minibatch gradient ``∇U / N`` at ``theta``.
        lr: the step size (> 0).
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
        >>> theta.tolist()  # v = -lr² M⁻¹ g, θ += v
        [-0.009999999776482582, -0.009999999776482582]
    """
    if state.lr > 0 and lr != state.lr:
        state.momentum.mul_(lr / state.lr)  # v = lr M⁻¹ r: the momentum r is kept
    state.lr = lr
    state.momentum.mul_(1.0 - mdecay).sub_(lr * lr * state.minv * grad)
    if noise:
        variance = 2.0 * mdecay * temperature * lr * lr / dataset_size * state.minv
        state.momentum.add_(variance.sqrt() * standard_normal(theta, generator))
    theta.add_(state.momentum)


def sgld_step(
    theta: torch.Tensor,
    grad: torch.Tensor,
    *,
    lr: float,
    temperature: float,
    dataset_size: int,
    generator: Generators = None,
    noise: bool = True,
) -> None:
    """One SGLD step in place: ``θ ← θ - ε ∇U + sqrt(2 ε T) ξ`` with ``ε = lr / N``.

    Args:
        theta: ``(P,)`` the position, or ``(K, P)`` K chains.
        grad: like ``theta``: the per-datum minibatch gradient ``∇U / N`` (so ``ε ∇U = lr g``).
        lr: the step size per datum (> 0).
        temperature: ``T``; the chain samples ``p(θ|D)^(1/T)`` (up to the step's bias).
        dataset_size: ``N``.
        generator: the source of the injected noise (one per chain for ``(K, P)``).
        noise: ``False`` for a plain SGD step (a cyclical run's exploration).

    Example:
        >>> theta = torch.zeros(2)
        >>> sgld_step(theta, torch.ones(2), lr=0.1, temperature=1.0, dataset_size=10, noise=False)
        >>> theta.tolist()
        [-0.10000000149011612, -0.10000000149011612]
    """
    theta.sub_(lr * grad)
    if noise:
        scale = math.sqrt(2.0 * lr * temperature / dataset_size)
        theta.add_(scale * standard_normal(theta, generator))


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
