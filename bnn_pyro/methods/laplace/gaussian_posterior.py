"""The Gaussian posterior ``N(θ*, (H + λ I)⁻¹)`` of the Laplace approximation, as plain math.

``h`` is the curvature: its diagonal ``(P,)`` (``structure="diag"``) or the ``(P, P)`` matrix
(``"full"``); ``lam`` the scalar prior precision λ; ``mean`` the flat θ* ``(P,)``.
"""

from __future__ import annotations

import math

import torch


def precision(h: torch.Tensor, lam: float, structure: str) -> torch.Tensor:
    """``H + λ I``: ``(P,)`` diagonal or ``(P, P)``."""
    if structure == "diag":
        return h + lam
    return h + lam * torch.eye(len(h), dtype=h.dtype, device=h.device)


def covariance(h: torch.Tensor, lam: float, structure: str) -> torch.Tensor:
    """``(H + λ I)⁻¹`` as a ``(P, P)`` matrix."""
    if structure == "diag":
        return torch.diag(1.0 / (h + lam))
    return torch.cholesky_inverse(torch.linalg.cholesky(precision(h, lam, structure)))


def sample(
    mean: torch.Tensor, h: torch.Tensor, lam: float, structure: str, num_samples: int
) -> torch.Tensor:
    """``(S, P)`` draws (the global RNG of ``mean``'s device). Full: with ``H + λI = L Lᵀ``,
    ``θ = θ* + L⁻ᵀ z``."""
    z = torch.randn(num_samples, mean.numel(), dtype=mean.dtype, device=mean.device)
    if structure == "diag":
        return mean + z / (h + lam).sqrt()
    chol = torch.linalg.cholesky(precision(h, lam, structure))
    return mean + torch.linalg.solve_triangular(chol.T, z.T, upper=True).T


def eigenvalues(h: torch.Tensor, structure: str) -> torch.Tensor:
    """Eigenvalues of ``H`` in float64, clipped at 0 (the diagonal itself for ``"diag"``)."""
    e = h.double() if structure == "diag" else torch.linalg.eigvalsh(h.double())
    return e.clamp_min(0)


def log_evidence(
    loglik: float, mean: torch.Tensor, h: torch.Tensor, lam: float, structure: str
) -> torch.Tensor:
    """``log p(D|θ*) - λ/2 ‖θ*‖² + P/2 log λ - 1/2 log det(H + λ I)`` (float64 scalar).

    This is ``log p(D|θ*) + log N(θ*; 0, λ⁻¹ I) + P/2 log 2π - 1/2 log det(H + λ I)``.
    """
    theta2 = float((mean.double() ** 2).sum())
    logdet = torch.log(eigenvalues(h, structure) + lam).sum()
    return loglik - 0.5 * lam * theta2 + 0.5 * mean.numel() * math.log(lam) - 0.5 * logdet


def optimal_prior_precision(
    mean: torch.Tensor, h: torch.Tensor, structure: str, bounds: tuple[float, float]
) -> float:
    """The λ in ``bounds`` that maximises :func:`log_evidence`.

    Its derivative is ``(Σ_i e_i / (λ (e_i + λ)) - ‖θ*‖²) / 2`` with ``e_i`` the eigenvalues
    of H: strictly decreasing in λ, so the maximiser is the unique root (MacKay's
    ``λ = γ / ‖θ*‖²``, γ the effective number of parameters), found by bisection in log λ.
    """
    e, theta2 = eigenvalues(h, structure), float((mean.double() ** 2).sum())

    def slope(log_lam: float) -> float:
        lam = math.exp(log_lam)
        return float((e / (lam * (e + lam))).sum()) - theta2

    a, b = math.log(bounds[0]), math.log(bounds[1])
    if slope(a) <= 0:
        b = a
    elif slope(b) >= 0:
        a = b
    for _ in range(200):
        mid = 0.5 * (a + b)
        a, b = (mid, b) if slope(mid) > 0 else (a, mid)
    return math.exp(0.5 * (a + b))
