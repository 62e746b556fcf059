"""The Laplace evidence ``log p(D | λ)`` and its maximiser in the prior precision λ.

``eigenvalues`` are those of the curvature ``H`` (float64, clipped at 0; see
:meth:`~bnn_pyro.methods.laplace.structures.HessianStructure.eigenvalues`), ``lam`` the scalar
λ, ``mean`` the flat θ* ``(P,)``.
"""

from __future__ import annotations

import math

import torch

__all__ = ["log_evidence", "optimal_diagonal_prior_precision", "optimal_prior_precision"]


def log_evidence(
    loglik: float, mean: torch.Tensor, eigenvalues: torch.Tensor, lam: float
) -> torch.Tensor:
    """``log p(D|θ*) - λ/2 ‖θ*‖² + P/2 log λ - 1/2 log det(H + λ I)`` (float64 scalar).

    This is ``log p(D|θ*) + log N(θ*; 0, λ⁻¹ I) + P/2 log 2π - 1/2 log det(H + λ I)``.

    Example:
        >>> e = torch.tensor([1.0, 3.0], dtype=torch.float64)  # H = diag(1, 3), θ* = 0
        >>> value = float(log_evidence(0.0, torch.zeros(2), e, 1.0))  # -1/2 log det(H + I)
        >>> abs(value - (-0.5 * math.log(2 * 4))) < 1e-12
        True
    """
    theta2 = float((mean.double() ** 2).sum())
    logdet = torch.log(eigenvalues + lam).sum()
    return loglik - 0.5 * lam * theta2 + 0.5 * mean.numel() * math.log(lam) - 0.5 * logdet


def optimal_prior_precision(
    mean: torch.Tensor, eigenvalues: torch.Tensor, bounds: tuple[float, float]
) -> float:
    """The λ in ``bounds`` that maximises :func:`log_evidence`.

    Its derivative is ``(Σ_i e_i / (λ (e_i + λ)) - ‖θ*‖²) / 2`` with ``e_i`` the eigenvalues
    of H: strictly decreasing in λ, so the maximiser is the unique root (MacKay's
    ``λ = γ / ‖θ*‖²``, γ the effective number of parameters), found by bisection in log λ.

    Example:
        >>> e = torch.tensor([1.0], dtype=torch.float64)  # θ* = 1: λ = γ = 1 / (1 + λ)
        >>> round(optimal_prior_precision(torch.tensor([1.0]), e, (1e-8, 1e8)), 6)  # (√5 - 1) / 2
        0.618034
    """
    e, theta2 = eigenvalues, float((mean.double() ** 2).sum())

    def slope(log_lam: float) -> float:
        lam = math.exp(log_lam)
        return float((e / (lam * (e + lam))).sum()) - theta2

    a, b = math.log(bounds[0]), math.log(bounds[1])
    # a maximiser at a bound is that bound itself (exp(log(1e8)) is 1e8 + 2e-7: out of bounds)
    if slope(a) <= 0:
        return float(bounds[0])
    if slope(b) >= 0:
        return float(bounds[1])
    for _ in range(200):
        mid = 0.5 * (a + b)
        a, b = (mid, b) if slope(mid) > 0 else (a, mid)
    return math.exp(0.5 * (a + b))


def optimal_diagonal_prior_precision(
    mean: torch.Tensor, curvature: torch.Tensor, bounds: tuple[float, float]
) -> torch.Tensor:
    """One λ_i per coordinate, each in ``bounds``, maximising the evidence of a diagonal
    curvature ``H = diag(h)`` (float64 ``(P,)``).

    The evidence is then a sum of one term per coordinate, ``-λ θ²/2 + log λ / 2 -
    log(h + λ) / 2``, whose derivative ``h / (2λ(h + λ)) - θ²/2`` is strictly decreasing: its
    root, the positive root of ``θ² λ² + θ² h λ - h = 0``, is
    ``λ = 2h / (θ² h + sqrt(θ⁴ h² + 4 θ² h))`` (MacKay's fixed point for one coordinate;
    0 where ``h = 0``, unbounded where ``θ = 0``), clipped to ``bounds``.

    Args:
        mean: ``(P,)`` θ*.
        curvature: ``(P,)`` the diagonal ``h`` of H (clipped at 0).
        bounds: ``(low, high)`` of every λ_i.

    Raises:
        ValueError: ``mean`` and ``curvature`` not both ``(P,)``, or bounds not ``0 < low <
            high``.

    Example:
        >>> lam = optimal_diagonal_prior_precision(
        ...     torch.tensor([1.0, 0.0, 2.0]), torch.tensor([1.0, 5.0, 0.0]), (1e-8, 1e8))
        >>> [f"{v:.6g}" for v in lam.tolist()]  # (√5 - 1) / 2; no θ: high; no data: low
        ['0.618034', '1e+08', '1e-08']
        >>> one = optimal_prior_precision(torch.tensor([1.0]), torch.ones(1).double(), (1e-8, 1e8))
        >>> abs(one - lam[0].item()) < 1e-9  # one coordinate: the scalar maximiser
        True
    """
    if mean.shape != curvature.shape or mean.dim() != 1:
        raise ValueError(
            f"mean and curvature must both be (P,), got {tuple(mean.shape)} and "
            f"{tuple(curvature.shape)}"
        )
    low, high = bounds
    if not 0 < low < high:
        raise ValueError(f"bounds must be (low, high) with 0 < low < high, got {bounds}")
    theta2 = mean.double() ** 2
    h = curvature.double().clamp_min(0)
    disc = torch.sqrt(theta2 * theta2 * h * h + 4 * theta2 * h)
    root = 2 * h / (theta2 * h + disc).clamp_min(torch.finfo(torch.float64).tiny)
    root = torch.where(theta2 == 0, torch.full_like(root, high), root)
    root = torch.where(h == 0, torch.full_like(root, low), root)
    return root.clamp(low, high)
