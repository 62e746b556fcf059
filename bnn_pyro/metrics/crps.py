"""Continuous ranked probability score (CRPS) of regression predictions, lower is better.

``CRPS(F, y) = integral (F(x) - 1{x >= y})^2 dx = E|X - y| - 1/2 E|X - X'|`` with ``X, X'``
independent draws from the predictive ``F``. It is in the units of ``y``, so a score computed on
normalised targets is turned into original units by multiplying with the target std
(``y_scale``). With several outputs the CRPS is computed per output (it is a univariate score).
"""

from __future__ import annotations

import math

import torch

from bnn_pyro.metrics._validation import (
    check_reduction,
    check_samples,
    check_scales,
    check_target,
    check_y_scale,
)

__all__ = ["crps_from_samples", "crps_gaussian_mixture"]

# Elements of one (S, S, chunk, O) float64 block of the pairwise term: 2**21 * 8 bytes = 16 MiB
# per temporary, a handful of temporaries alive at once.
_PAIRWISE_BUDGET = 2**21


def _expected_abs_normal(mu: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    """``E|Z|`` for ``Z ~ N(mu, s^2)``: ``s sqrt(2/pi) exp(-mu^2/2s^2) + mu (1 - 2 Phi(-mu/s))``."""
    sigma = var.sqrt()
    ratio = mu / sigma
    return sigma * math.sqrt(2.0 / math.pi) * torch.exp(-0.5 * ratio.square()) + mu * (
        1.0 - 2.0 * torch.special.ndtr(-ratio)
    )


def _finish(
    per_point: torch.Tensor, y_scale: torch.Tensor | None, reduction: str, dtype: torch.dtype
) -> float | torch.Tensor:
    if y_scale is not None:
        per_point = per_point * y_scale
    if reduction == "mean":
        return per_point.mean().item()
    return per_point.to(dtype)


def crps_gaussian_mixture(
    locs: torch.Tensor,
    scales: torch.Tensor | float,
    y: torch.Tensor,
    y_scale: torch.Tensor | float | None = None,
    reduction: str = "mean",
    chunk_size: int | None = None,
) -> float | torch.Tensor:
    """Closed-form CRPS of the equally weighted Gaussian mixture over the S samples.

    With ``A(mu, var) = E|Normal(mu, var)|`` (analytic), the CRPS of
    ``F = 1/S sum_s Normal(locs[s], scales[s]^2)`` at ``y`` is
    ``1/S sum_s A(y - locs[s], scales[s]^2) - 1/(2 S^2) sum_{s,t} A(locs[s] - locs[t],
    scales[s]^2 + scales[t]^2)`` (Grimit et al. 2006). The pairwise term costs ``O(S^2)`` per
    point; it is evaluated over chunks of points so memory stays bounded (about 16 MiB per
    temporary) whatever ``N``.

    Args:
        locs: ``(S, N)`` or ``(S, N, O)`` per-sample predictive means.
        scales: positive noise standard deviations, a float or a tensor broadcastable to
            ``locs``.
        y: ``(N)`` or ``(N, O)`` targets.
        y_scale: optional target std (float or ``(O,)``) the inputs were normalised with; the
            score is multiplied by it to give original units.
        reduction: ``"mean"`` (a float, averaged over points and outputs) or ``"none"``
            (a tensor of ``y``'s shape).
        chunk_size: points per chunk of the pairwise term; by default chosen from ``S`` and
            ``O`` to keep each temporary near 16 MiB.

    Returns:
        The mean CRPS as a float, or the per-point CRPS of shape ``y.shape``.

    Raises:
        TypeError: if an argument is not a (floating) tensor where one is needed.
        ValueError: on shape mismatches, non-positive scales, a bad ``reduction`` or
            ``chunk_size``.

    Example:
        >>> # one Gaussian N(0, 1) at y = 0: CRPS = sqrt(2/pi) - 1/sqrt(pi)
        >>> round(crps_gaussian_mixture(torch.zeros(1, 1), 1.0, torch.zeros(1)), 6)
        0.233695
    """
    check_reduction(reduction)
    if chunk_size is not None and (
        isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1
    ):
        raise ValueError(f"chunk_size must be a positive int or None, got {chunk_size!r}")
    locs = check_samples(locs, "locs")
    scales = check_scales(scales, locs)
    y = check_target(y, locs.shape[1:])
    y_scale = check_y_scale(y_scale, y)

    loc64 = locs.double()
    var64 = scales.double().square().expand(locs.shape)
    if loc64.dim() == 2:  # work on (S, N, O) throughout
        loc64, var64, y64 = loc64.unsqueeze(-1), var64.unsqueeze(-1), y.double().unsqueeze(-1)
    else:
        y64 = y.double()
    n_samples, n_points, n_out = loc64.shape
    if chunk_size is None:
        chunk_size = max(1, _PAIRWISE_BUDGET // (n_samples * n_samples * n_out))

    first = _expected_abs_normal(y64 - loc64, var64).mean(dim=0)  # (N, O)
    second = torch.empty_like(first)
    for start in range(0, n_points, chunk_size):
        sl = slice(start, start + chunk_size)
        mu, var = loc64[:, sl], var64[:, sl]
        pair = _expected_abs_normal(mu[:, None] - mu[None, :], var[:, None] + var[None, :])
        second[sl] = pair.mean(dim=(0, 1))
    per_point = first - 0.5 * second
    if y.dim() == 1:
        per_point = per_point.squeeze(-1)
    return _finish(per_point, y_scale, reduction, torch.promote_types(locs.dtype, y.dtype))


def crps_from_samples(
    samples: torch.Tensor,
    y: torch.Tensor,
    y_scale: torch.Tensor | float | None = None,
    reduction: str = "mean",
) -> float | torch.Tensor:
    """Empirical CRPS of the predictive samples, in ``O(S log S)`` per point.

    It is the CRPS of the empirical distribution of the samples,
    ``1/S sum_i |x_i - y| - 1/(2 S^2) sum_{i,j} |x_i - x_j|``; the double sum is computed from
    the sorted samples as ``2 sum_i (2 i - S - 1) x_(i)`` (``i = 1..S``). This is the plain
    ("energy form") estimator, not the "fair" one that divides by ``S (S - 1)``; it is the
    exact CRPS of an ``S``-point ensemble and tends to the model's CRPS as ``S`` grows.

    Args:
        samples: ``(S, N)`` or ``(S, N, O)`` samples of the predictive distribution of ``y``.
        y: ``(N)`` or ``(N, O)`` targets.
        y_scale: optional target std the inputs were normalised with (see
            :func:`crps_gaussian_mixture`).
        reduction: ``"mean"`` (a float) or ``"none"`` (a tensor of ``y``'s shape).

    Returns:
        The mean CRPS as a float, or the per-point CRPS of shape ``y.shape``.

    Raises:
        TypeError: if ``samples``/``y`` are not floating tensors.
        ValueError: on a shape mismatch, non-finite values or a bad ``reduction``.

    Example:
        >>> samples = torch.tensor([[0.0], [1.0]])  # two samples for one point
        >>> crps_from_samples(samples, torch.tensor([0.0]))  # (0 + 1) / 2 - 2 / (2 * 4)
        0.25
    """
    check_reduction(reduction)
    samples = check_samples(samples, "samples")
    y = check_target(y, samples.shape[1:])
    y_scale = check_y_scale(y_scale, y)

    x = samples.double()
    n_samples = x.shape[0]
    first = (x - y.double()).abs().mean(dim=0)
    ranks = x.new_ones(n_samples).cumsum(dim=0)  # 1, ..., S, exact in float64
    weights = (2.0 * ranks - n_samples - 1.0).reshape(-1, *([1] * (x.dim() - 1)))
    second = (weights * x.sort(dim=0).values).sum(dim=0) / n_samples**2
    per_point = first - second
    return _finish(per_point, y_scale, reduction, torch.promote_types(samples.dtype, y.dtype))
