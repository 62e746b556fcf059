"""The step sizes a run without a given ``lr`` takes (:mod:`~bnn_pyro.methods.sgmcmc.measured`):
the largest curvature of the preconditioned potential, and the SGHMC and SGLD steps scaled to it
and bounded by the minibatch noise.

* :func:`largest_curvature`: ``λ_max`` of the preconditioned per-datum Hessian ``M⁻¹ ∇²U / N``
  by power iteration on Hessian-vector products, which the default step sizes are scaled by.
* :func:`sghmc_step_size`, :func:`sgld_step_size`: the step at a target ``lr² λ_max`` (SGHMC,
  BAOAB: exact on a Gaussian at every stable step) or ``lr λ_max`` (SGLD, whose bias grows with
  it), or shorter where the minibatch noise's share of the injected noise would pass
  :data:`NOISE_SHARE`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = [
    "NOISE_SHARE",
    "SGLD_TRAVEL",
    "largest_curvature",
    "sghmc_step_size",
    "sgld_step_size",
]

#: The largest share of the injected noise's variance that the minibatch gradient's noise may
#: add along any direction at a default step size (:func:`sghmc_step_size`,
#: :func:`sgld_step_size`): where it is white noise it widens the samples' variance along that
#: direction by about that share, less along the others; a tenth is about the sampling error of
#: a variance at the few hundred effective draws a default run reaches (``sqrt(2 / ESS)``).
NOISE_SHARE = 0.1

#: SGLD's ``lr λ_max`` while it burns in (or explores): its bias does not matter before the chain
#: is collected, its stability does (``lr λ_max < 2``), and it travels as far per step as that
#: allows with a margin for a curvature that grows on the way.
SGLD_TRAVEL = 1.0


def largest_curvature(
    hvp: Callable[[torch.Tensor], torch.Tensor],
    start: torch.Tensor,
    minv: torch.Tensor | None = None,
    iterations: int = 12,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``λ_max`` of the preconditioned Hessian ``M⁻¹ H`` by power iteration.

    ``M⁻¹ H`` is similar to the symmetric ``M^{-1/2} H M^{-1/2}``, so the iteration converges to
    the eigenvalue of largest magnitude; its estimate is the growth of the ``M``-norm
    ``sqrt(xᵀ M x)`` of the last iterate (from below as the iterate converges).

    Args:
        hvp: ``x ↦ H x`` for ``x`` shaped like ``start``, row by row for a ``(K, P)`` stack.
        start: ``(P,)`` or ``(K, P)``: the first iterate (any vector not orthogonal to the
            top eigenvector).
        minv: the diagonal ``M⁻¹``, shaped like ``start``; ``None``: the identity.
        iterations: the Hessian-vector products spent.

    Returns:
        ``(λ, x)``: ``λ`` ``()`` or ``(K,)``, and the last iterate ``x`` shaped like ``start``.

    Example:
        >>> H = torch.tensor([[3.0, 1.0], [1.0, 2.0]])
        >>> lam, _ = largest_curvature(lambda x: x @ H, torch.ones(2), iterations=30)
        >>> round(float(lam), 4), round(float(torch.linalg.eigvalsh(H).max()), 4)
        (3.618, 3.618)
    """
    minv = torch.ones_like(start) if minv is None else minv

    def m_norm(x: torch.Tensor) -> torch.Tensor:
        return (x.square() / minv).sum(-1, keepdim=True).sqrt().clamp_min(1e-30)

    x = start / m_norm(start)
    value = torch.zeros_like(x[..., :1])
    for _ in range(iterations):
        y = minv * hvp(x)
        value = m_norm(y)
        x = y / value
    return value.squeeze(-1), x


def sghmc_step_size(
    curvature: torch.Tensor,
    noise: torch.Tensor | None,
    *,
    target: float,
    mdecay: float,
    temperature: float,
    dataset_size: int,
    share: float = NOISE_SHARE,
) -> torch.Tensor:
    """The SGHMC step ``lr`` with ``lr² λ_max = target`` for ``λ_max`` the largest curvature of
    ``M⁻¹ ∇²U / N`` (:func:`largest_curvature`), or smaller where the minibatch noise asks.

    The kick's noise ``lr² M⁻¹ ζ`` (``ζ`` the minibatch gradient's error, per datum, of
    covariance ``V``) against the injected ``mdecay (2 - mdecay) T (lr²/N) M⁻¹`` is the share
    ``lr² N w / (mdecay (2 - mdecay) T)`` along the direction where ``w``, the largest variance
    of ``M^{-1/2} ζ``, is reached; the step keeps it ``<= share``.

    Args:
        curvature: ``λ_max``, ``()`` or ``(K,)`` (one per chain).
        noise: ``w`` like ``curvature``, or ``None`` for full-batch gradients (no noise).
        target: ``lr² λ_max`` (BAOAB is stable below 4 on a Gaussian).
        mdecay, temperature, dataset_size: the chain's.
        share: the noise's largest share.

    Returns:
        ``lr`` like ``curvature``.

    Example:
        >>> float(sghmc_step_size(torch.tensor(4.0), None, target=1.0, mdecay=0.2,
        ...                       temperature=1.0, dataset_size=100))
        0.5
    """
    lr2 = target / curvature.clamp_min(1e-30)
    if noise is not None:
        bound = share * mdecay * (2.0 - mdecay) * temperature / (dataset_size * noise)
        lr2 = torch.minimum(lr2, bound.clamp_min(1e-30))
    return lr2.sqrt()


def sgld_step_size(
    curvature: torch.Tensor,
    noise: torch.Tensor | None,
    *,
    target: float,
    temperature: float,
    dataset_size: int,
    share: float = NOISE_SHARE,
) -> torch.Tensor:
    """The SGLD step ``lr`` (``ε = lr / N``) with ``ε λ_max(∇²U) = lr λ_max(∇²U / N) = target``,
    or smaller where the minibatch noise asks.

    The step's own bias on a Gaussian posterior widens the variance along the stiffest direction
    by ``1 / (1 - target / 2)`` (module docstring) and less along the others. The minibatch
    noise ``lr ζ`` against the injected ``2 lr T / N`` is the share ``lr N w / (2 T)`` for ``w``
    the largest variance of ``ζ``; the step keeps it ``<= share``.

    Args:
        curvature: ``λ_max`` of ``∇²U / N``, ``()`` or ``(K,)``.
        noise: ``w`` like ``curvature``, or ``None`` for full-batch gradients.
        target: ``lr λ_max``.
        temperature, dataset_size: the chain's.
        share: the noise's largest share.

    Example:
        >>> float(sgld_step_size(torch.tensor(4.0), None, target=0.5, temperature=1.0,
        ...                      dataset_size=100))
        0.125
    """
    lr = target / curvature.clamp_min(1e-30)
    if noise is not None:
        lr = torch.minimum(
            lr, (2.0 * share * temperature / (dataset_size * noise)).clamp_min(1e-30)
        )
    return lr
