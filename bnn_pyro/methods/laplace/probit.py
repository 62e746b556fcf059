"""The probit approximation (MacKay 1992) of the softmax of Gaussian logits: what the Laplace
approximation's GLM predictive of a classifier returns by default (laplace-torch's
``link_approx="probit"``), deterministic."""

from __future__ import annotations

import math

import numpy as np
import torch

from bnn_pyro.likelihoods.base import PROBIT_SCALE, probit_scale

__all__ = ["probit_moments"]

#: Gauss-Legendre nodes and weights on ``[0, 1]`` for the probit variance's integral, whose
#: integrand is smooth and bounded on the whole interval: 32 nodes agree with SciPy's bivariate
#: normal CDF to about 1e-15 in float64.
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(32)
_NODES, _WEIGHTS = (_NODES + 1) / 2, _WEIGHTS / 2


def probit_moments(
    logits: torch.Tensor, variance: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The probit approximation of the softmax of Gaussian logits: class probabilities and a
    variance of each, deterministic.

    The probabilities are ``softmax(f / sqrt(1 + π/8 · v))`` (MacKay 1992; laplace-torch's
    ``link_approx="probit"``): each logit's mean ``f_k`` moderated by its own variance ``v_k``,
    the covariances between the logits left out.

    The variance of class ``k`` is that of ``Φ(a u)``, ``a² = π/8``, for a Gaussian ``u`` of
    variance ``v_k`` whose mean puts ``E[Φ(a u)]`` at the probability ``p_k`` above:
    ``Φ₂(h, h; ρ) - p_k²`` with ``h = Φ⁻¹(p_k)``, ``ρ = a² v_k / (1 + a² v_k)`` and ``Φ₂`` the
    bivariate normal CDF, computed as ``(1/2π) ∫₀^{asin ρ} exp(-h² / (1 + sin t)) dt`` by
    Gauss-Legendre quadrature. It is exact for a probit-link binary model (one logit, the case
    MacKay's approximation is derived for); for several classes it inherits the probabilities'
    approximation (each class against the rest, logit covariances left out). It is the variance
    of a variable in ``[0, 1]`` with mean ``p_k``: between 0 (``v_k = 0``) and ``p_k (1 - p_k)``
    (``v_k → ∞``), so never above 1/4.

    Args:
        logits: ``(..., C)`` means of the logits (``C >= 2``).
        variance: ``(..., C)`` their variances (``>= 0``), e.g.
            :meth:`~bnn_pyro.methods.laplace.predictive.LaplacePredictive.glm_variance`.

    Returns:
        ``probs (..., C)``, summing to 1 over ``C``, and ``variance (..., C)``.

    Raises:
        ValueError: ``logits`` and ``variance`` of different shapes, or fewer than 2 classes
            (checked on shapes only: no host sync).

    Example:
        >>> probs, var = probit_moments(torch.tensor([[2.0, 0.0]]), torch.tensor([[0.0, 0.0]]))
        >>> torch.allclose(probs, torch.softmax(torch.tensor([[2.0, 0.0]]), -1)), var.tolist()
        (True, [[0.0, 0.0]])
        >>> probs, var = probit_moments(torch.zeros(1, 2), torch.full((1, 2), 1e12))
        >>> probs.tolist(), [round(v, 4) for v in var[0].tolist()]  # the bound p (1 - p)
        ([[0.5, 0.5]], [0.25, 0.25])
    """
    if logits.shape != variance.shape or logits.dim() < 1 or logits.shape[-1] < 2:
        raise ValueError(
            "logits and variance must have one shape (..., C) with C >= 2 classes, got "
            f"{tuple(logits.shape)} and {tuple(variance.shape)}"
        )
    scaled = PROBIT_SCALE * variance
    probs = torch.softmax(logits * probit_scale(variance), dim=-1)
    rho = torch.reciprocal(1 + torch.reciprocal(scaled))  # a²v / (1 + a²v): 0 at 0, 1 at inf
    top = torch.asin(rho)
    nodes, weights = (probs.new_tensor(t) for t in (_NODES, _WEIGHTS))  # probs' dtype, device
    h2 = torch.special.ndtri(probs).square().unsqueeze(-1)  # inf where p is 0 or 1: var 0
    integrand = torch.exp(-h2 / (1 + torch.sin(top.unsqueeze(-1) * nodes)))
    return probs, top / (2 * math.pi) * (integrand * weights).sum(-1)
