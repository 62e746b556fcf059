"""Point and density scores of regression predictions: RMSE and the Gaussian log-likelihood.

The predictive distribution of a sampled model is the equally weighted Gaussian mixture
``p(y | x) = 1/S sum_s Normal(y; locs[s], scales[s])`` returned by
:meth:`bnn_pyro.base.BaseBayesianMethod.predictive_gaussian`.

Units: models are usually trained on targets normalised as ``y_n = (y - y_mean) / y_std``. Pass
``y_scale=y_std`` to report in the original units of ``y``:

* RMSE scales linearly: ``rmse_original = y_std * rmse_normalised``.
* A density picks up the Jacobian of ``y = y_mean + y_std * y_n``:
  ``log p(y) = log p_n(y_n) - log(y_std)``, so the log-likelihood in original units is the one in
  normalised units minus ``log(y_std)`` (summed over outputs when there are several).
"""

from __future__ import annotations

import math

import torch

from bnn_pyro._checks import check_finite, check_tensor
from bnn_pyro.metrics._validation import (
    check_reduction,
    check_samples,
    check_scales,
    check_target,
    check_y_scale,
)

__all__ = ["gaussian_log_likelihood", "gaussian_nll", "rmse"]

_LOG_2PI = math.log(2.0 * math.pi)


def rmse(mean: torch.Tensor, y: torch.Tensor, y_scale: torch.Tensor | float | None = None) -> float:
    """Root mean squared error of the predictive mean, over all points and outputs.

    Args:
        mean: ``(N[, O])`` predictive mean (the ``mean`` of ``predict``).
        y: ``(N[, O])`` targets, same shape as ``mean``.
        y_scale: optional target standard deviation (a float, or ``(O,)``) that ``mean`` and
            ``y`` were normalised with; the error is multiplied by it, giving RMSE in original
            units.

    Returns:
        The RMSE as a Python float.

    Raises:
        TypeError: if ``mean``/``y`` are not floating tensors.
        ValueError: on a shape mismatch, non-finite values or a non-positive ``y_scale``.

    Example:
        >>> rmse(torch.tensor([1.0, 2.0]), torch.tensor([2.0, 4.0]))  # sqrt((1 + 4) / 2)
        1.5811388300841898
        >>> rmse(torch.tensor([1.0, 2.0]), torch.tensor([2.0, 4.0]), y_scale=2.0)
        3.1622776601683795
    """
    mean = check_tensor("mean", mean)
    if mean.dim() < 1 or mean.shape[0] < 1:
        raise ValueError(f"mean must have shape (N[, O]) with N >= 1, got {tuple(mean.shape)}")
    check_finite("mean", mean)
    y = check_target(y, mean.shape)
    scale = check_y_scale(y_scale, y)
    err = mean.double() - y.double()
    if scale is not None:
        err = err * scale
    return math.sqrt(err.square().mean().item())


def gaussian_log_likelihood(
    locs: torch.Tensor,
    scales: torch.Tensor | float,
    y: torch.Tensor,
    y_scale: torch.Tensor | float | None = None,
    reduction: str = "mean",
) -> float | torch.Tensor:
    """Test log-likelihood of ``y`` under the Gaussian mixture over the S predictive samples.

    Per point ``n``: ``log(1/S sum_s prod_o Normal(y[n, o]; locs[s, n, o], scales[s, n, o]))``,
    computed stably as a logsumexp over ``s`` minus ``log S``. With several outputs the noise is
    independent across outputs, so each sample's log-densities are summed over ``o`` first (the
    joint density of the vector ``y[n]``). The result is averaged over points (the number the
    UCI tables report, in nats, higher is better).

    Args:
        locs: ``(S, N)`` or ``(S, N, O)`` per-sample predictive means.
        scales: per-sample observation noise standard deviations, a positive float or a tensor
            broadcastable to ``locs`` (e.g. ``()``, ``(O,)``, ``(S, 1, 1)`` or ``(S, N, O)``).
        y: ``(N)`` or ``(N, O)`` targets (``locs.shape[1:]``).
        y_scale: optional target standard deviation (float or ``(O,)``) that ``locs``,
            ``scales`` and ``y`` were normalised with. Then ``sum_o log(y_scale[o])`` is
            subtracted from every point, which gives the log-likelihood in original units.
        reduction: ``"mean"`` (a float) or ``"none"`` (the ``(N,)`` per-point values).

    Returns:
        The mean log-likelihood as a float, or an ``(N,)`` tensor for ``reduction="none"``.

    Raises:
        TypeError: if an argument is not a (floating) tensor where one is needed.
        ValueError: on shape mismatches, ``S < 1``, non-positive scales or a bad ``reduction``.

    Example:
        >>> locs = torch.zeros(1, 1)  # one sample, one point: a standard normal predictive
        >>> round(gaussian_log_likelihood(locs, 1.0, torch.zeros(1)), 6)  # -log(2 pi) / 2
        -0.918939
        >>> round(gaussian_log_likelihood(locs, 1.0, torch.zeros(1), y_scale=2.0), 6)
        -1.612086
    """
    check_reduction(reduction)
    locs = check_samples(locs, "locs")
    scales = check_scales(scales, locs)
    y = check_target(y, locs.shape[1:])
    y_scale = check_y_scale(y_scale, y)

    loc64, scale64 = locs.double(), scales.double()
    z = (y.double() - loc64) / scale64
    log_density = -0.5 * z.square() - scale64.log() - 0.5 * _LOG_2PI  # (S, N[, O])
    if log_density.dim() == 3:
        log_density = log_density.sum(dim=-1)
    per_point = torch.logsumexp(log_density, dim=0) - math.log(locs.shape[0])
    if y_scale is not None:
        per_point = per_point - y_scale.log().expand(y.shape[1:]).sum()
    if reduction == "mean":
        return per_point.mean().item()
    return per_point.to(torch.promote_types(locs.dtype, y.dtype))


def gaussian_nll(
    locs: torch.Tensor,
    scales: torch.Tensor | float,
    y: torch.Tensor,
    y_scale: torch.Tensor | float | None = None,
    reduction: str = "mean",
) -> float | torch.Tensor:
    """Negative of :func:`gaussian_log_likelihood` (lower is better), same arguments.

    Lakshminarayanan et al. (2017) report this NLL; it is the negated test log-likelihood of
    Hernández-Lobato & Adams (2015) and Gal & Ghahramani (2016).

    Args:
        locs: ``(S, N)`` or ``(S, N, O)`` per-sample predictive means.
        scales: positive noise standard deviations, a float or broadcastable to ``locs``.
        y: ``(N)`` or ``(N, O)`` targets.
        y_scale: optional target std for original units (see :func:`gaussian_log_likelihood`).
        reduction: ``"mean"`` (a float) or ``"none"`` (the ``(N,)`` per-point values).

    Returns:
        The mean NLL as a float, or an ``(N,)`` tensor for ``reduction="none"``.

    Example:
        >>> round(gaussian_nll(torch.zeros(1, 1), 1.0, torch.zeros(1)), 6)
        0.918939
    """
    out = gaussian_log_likelihood(locs, scales, y, y_scale=y_scale, reduction=reduction)
    return -out
