"""Closed-form Gaussian KL divergences and the ELBO loss (the functional API).

The Gaussian KL formula lives here once (:func:`gaussian_kl`); the torch-native Bayesian layers
(:class:`~bnn_pyro.nn.bayesian_linear.BayesianLinear`,
:class:`~bnn_pyro.nn.gaussian_linear.GaussianLinear`) call it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["elbo_loss", "gaussian_kl", "kl_cost"]

_LOSS_FNS = ("mse", "cross_entropy")


def _check_tensor(value: object, name: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    return value


def _check_prior_sigma(prior_sigma: float | torch.Tensor, name: str) -> None:
    if isinstance(prior_sigma, bool) or not isinstance(prior_sigma, (int, float, torch.Tensor)):
        raise TypeError(f"{name} must be a float or a tensor, got {type(prior_sigma).__name__}")
    if isinstance(prior_sigma, torch.Tensor):
        if not bool((prior_sigma > 0).all()) or not bool(torch.isfinite(prior_sigma).all()):
            raise ValueError(f"{name} must be finite and > 0 everywhere, got {prior_sigma}")
    elif not (math.isfinite(prior_sigma) and prior_sigma > 0):
        raise ValueError(f"{name} must be a finite float > 0, got {prior_sigma}")


def gaussian_kl(
    mean: torch.Tensor,
    std: torch.Tensor,
    prior_std: float | torch.Tensor = 1.0,
    reduction: str = "sum",
) -> torch.Tensor:
    """KL(N(mean, std²) || N(0, prior_std²)), elementwise, in closed form.

    ``KL = log(prior_std / std) + (std² + mean²) / (2 prior_std²) - 1/2``.

    Args:
        mean: ``(...)`` posterior means.
        std: ``(...)`` posterior standard deviations (> 0), same shape as ``mean``.
        prior_std: prior standard deviation, a float or a tensor broadcastable to ``mean``.
        reduction: ``"sum"`` (a scalar tensor) or ``"none"`` (the elementwise ``(...)`` KL).

    Returns:
        Scalar tensor (``reduction="sum"``) or a tensor shaped like ``mean``.

    Example:
        >>> float(gaussian_kl(torch.zeros(3), torch.ones(3)))
        0.0
        >>> round(float(gaussian_kl(torch.ones(1), torch.ones(1))), 4)
        0.5
    """
    _check_tensor(mean, "mean")
    _check_tensor(std, "std")
    if mean.shape != std.shape:
        raise ValueError(
            f"std must have the shape of mean {tuple(mean.shape)}, got {tuple(std.shape)}"
        )
    _check_prior_sigma(prior_std, "prior_std")
    if reduction not in ("sum", "none"):
        raise ValueError(f"reduction must be 'sum' or 'none', got {reduction!r}")
    prior = torch.as_tensor(prior_std, dtype=mean.dtype, device=mean.device)
    kl = torch.log(prior) - torch.log(std) + (std**2 + mean**2) / (2 * prior**2) - 0.5
    return kl.sum() if reduction == "sum" else kl


def kl_cost(mu: torch.Tensor, rho: torch.Tensor, prior_sigma: float = 1.0) -> torch.Tensor:
    """Summed KL between the weight posterior N(mu, softplus(rho)²) and the prior N(0, σ_p²).

    ``rho`` is sometimes called a "log-variance", but the sampling formula is
    ``W = mu + softplus(rho) * eps``, i.e. ``sigma = softplus(rho) = log(1 + exp(rho))``. This
    function follows the formula, not the name.

    Args:
        mu: ``(...)`` weight means.
        rho: ``(...)`` unconstrained scale parameters, same shape as ``mu``.
        prior_sigma: standard deviation of the zero-mean Gaussian prior (> 0).

    Returns:
        Scalar tensor ``sum(log(σ_p/σ) + (σ² + mu²)/(2σ_p²) - 1/2)``.

    Example:
        >>> rho = torch.log(torch.expm1(torch.ones(4)))  # softplus(rho) = 1
        >>> float(kl_cost(torch.zeros(4), rho))
        0.0
    """
    _check_tensor(mu, "mu")
    _check_tensor(rho, "rho")
    if mu.shape != rho.shape:
        raise ValueError(f"rho must have the shape of mu {tuple(mu.shape)}, got {tuple(rho.shape)}")
    _check_prior_sigma(prior_sigma, "prior_sigma")
    return gaussian_kl(mu, F.softplus(rho), prior_sigma)


def elbo_loss(
    predictions: torch.Tensor,
    targets: torch.Tensor,
    kl: torch.Tensor,
    beta: float = 1.0,
    loss_fn: str = "mse",
) -> torch.Tensor:
    """The negative ELBO to minimise: ``reconstruction_loss + beta * kl``.

    The reconstruction loss is a *mean* over the batch (``F.mse_loss`` or ``F.cross_entropy``).
    Scaling: the per-datum negative ELBO is ``mean NLL + KL / N`` for a data set of N points, so
    ``beta = 1 / N`` gives the ELBO (divided by N). The common advice "typically ``1 /
    num_batches``" applies to a reconstruction loss *summed* over each batch, not to this mean.

    Args:
        predictions: ``(N, O)`` outputs (logits for ``"cross_entropy"``).
        targets: ``(N, O)`` for ``"mse"``; ``(N,)`` class indices or ``(N, O)`` class
            probabilities for ``"cross_entropy"``.
        kl: scalar tensor, e.g. from :func:`kl_cost`.
        beta: KL weight (>= 0).
        loss_fn: ``"mse"`` or ``"cross_entropy"``.

    Returns:
        Scalar tensor.

    Example:
        >>> p = torch.zeros(4, 2)
        >>> float(elbo_loss(p, torch.ones(4, 2), torch.tensor(3.0), beta=0.5))
        2.5
    """
    _check_tensor(predictions, "predictions")
    _check_tensor(targets, "targets")
    _check_tensor(kl, "kl")
    if kl.dim() != 0:
        raise ValueError(f"kl must be a scalar tensor, got shape {tuple(kl.shape)}")
    if isinstance(beta, bool) or not isinstance(beta, (int, float)):
        raise TypeError(f"beta must be a float, got {type(beta).__name__}")
    if not (math.isfinite(beta) and beta >= 0):
        raise ValueError(f"beta must be a finite float >= 0, got {beta}")
    if loss_fn not in _LOSS_FNS:
        raise ValueError(f"loss_fn must be one of {_LOSS_FNS}, got {loss_fn!r}")
    if len(predictions) != len(targets):
        raise ValueError(
            f"targets must have {len(predictions)} rows like predictions, got {len(targets)}"
        )
    if loss_fn == "mse":
        if predictions.shape != targets.shape:
            raise ValueError(
                f"targets must have the shape of predictions {tuple(predictions.shape)} for "
                f"loss_fn='mse', got {tuple(targets.shape)}"
            )
        reconstruction = F.mse_loss(predictions, targets)
    else:
        reconstruction = F.cross_entropy(predictions, targets)
    return reconstruction + beta * kl
