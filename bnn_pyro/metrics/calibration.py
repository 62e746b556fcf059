"""Calibration of regression predictions: coverage of central intervals vs their nominal level.

The central interval of level ``p`` of a predictive CDF ``F`` is ``[Q((1-p)/2), Q((1+p)/2)]``.
For the Gaussian mixture, ``F`` is continuous and strictly increasing, so ``y`` lies in that
interval exactly when its probability integral transform ``u = F(y)`` satisfies
``|2u - 1| <= p``. The coverage is therefore computed from ``F(y)`` directly: exact, vectorized,
no quantile search (bisection) and no sampling.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from bnn_pyro._checks import check_finite, check_int, check_tensor
from bnn_pyro.metrics._validation import check_samples, check_scales, check_target

__all__ = [
    "CalibrationErrors",
    "RegressionCalibration",
    "calibration_errors",
    "gaussian_mixture_cdf",
    "gaussian_mixture_quantile",
    "regression_calibration",
]


_SQRT_HALF = math.sqrt(0.5)


def _normal_cdf(z: torch.Tensor) -> torch.Tensor:
    """``Phi(z)`` with full relative precision in the lower tail: ``torch.special.ndtr`` is
    accurate only to about ``1e-16`` absolute there (``ndtr(-9)`` is 0, ``Phi(-9) = 1.1e-19``),
    which would put the quantiles of levels below ``1e-15`` several tenths of a sd off."""
    return 0.5 * torch.special.erfc(-z * _SQRT_HALF)


class RegressionCalibration(NamedTuple):
    """Result of :func:`regression_calibration`.

    Attributes:
        levels: ``(L,)`` nominal levels of the central intervals.
        coverage: ``(L,)`` observed fraction of targets inside each interval.
        error: mean over levels of ``|coverage - level|`` (0 is perfect calibration).

    Example:
        >>> locs, scales, y = torch.zeros(1, 1000, 1), torch.ones(1, 1000, 1), torch.randn(1000, 1)
        >>> result = regression_calibration(locs, scales, y, levels=torch.tensor([0.5, 0.9]))
        >>> result.levels.tolist(), bool(result.error < 0.1)
        ([0.5, 0.8999999761581421], True)
    """

    levels: torch.Tensor
    coverage: torch.Tensor
    error: float


def gaussian_mixture_cdf(
    locs: torch.Tensor, scales: torch.Tensor | float, y: torch.Tensor
) -> torch.Tensor:
    """CDF of the equally weighted Gaussian mixture over samples at ``y`` (the PIT values).

    ``F(y[n, o]) = 1/S sum_s Phi((y[n, o] - locs[s, n, o]) / scales[s, n, o])``. For a
    calibrated model these values are uniform on ``[0, 1]``.

    Args:
        locs: ``(S, N)`` or ``(S, N, O)`` per-sample predictive means.
        scales: positive noise standard deviations, a float or broadcastable to ``locs``.
        y: ``(N)`` or ``(N, O)`` targets.

    Returns:
        Tensor of ``y``'s shape with values in ``[0, 1]``.

    Example:
        >>> locs = torch.tensor([[-1.0], [1.0]])  # a symmetric mixture around 0
        >>> gaussian_mixture_cdf(locs, 0.5, torch.zeros(1)).tolist()
        [0.5]
    """
    locs = check_samples(locs, "locs")
    scales = check_scales(scales, locs)
    y = check_target(y, locs.shape[1:])
    z = (y.double() - locs.double()) / scales.double()
    return _normal_cdf(z).mean(dim=0).to(torch.promote_types(locs.dtype, y.dtype))


#: Bisection steps of :func:`gaussian_mixture_quantile`: each halves the bracket, and the
#: bracket starts at most ``2 (spread + 16 max scale)`` wide, so 64 steps reach float64's
#: resolution for any bracket under ``2**12`` times the answer.
_BISECTION_STEPS = 64
#: The bisection bracket holds every component's ``loc ± _BRACKET_SDS scale``.
_BRACKET_SDS = 16


def gaussian_mixture_quantile(
    locs: torch.Tensor, scales: torch.Tensor | float, levels: torch.Tensor | list[float]
) -> torch.Tensor:
    """Quantiles of the equally weighted Gaussian mixture over samples: the inverse of
    :func:`gaussian_mixture_cdf`.

    The mixture's CDF is continuous and strictly increasing, so each quantile is found by
    bisection, vectorised over points, outputs and levels, in float64. The bracket holds every
    component's ``loc ± 16 scale``: outside it each ``Φ`` is within ``1e-57`` of 0 or 1.

    Args:
        locs: ``(S, N)`` or ``(S, N, O)`` per-sample predictive means.
        scales: positive noise standard deviations, a float or broadcastable to ``locs``.
        levels: ``(L,)`` probabilities in ``(0, 1)``.

    Returns:
        ``(L, N)`` or ``(L, N, O)``: the level-``levels[l]`` quantile at each point, the
        smallest ``x`` with ``F(x) >= levels[l]`` to float64 resolution, in ``locs``' dtype
        (a level below ``Φ(-16)``, 6e-58, gives the bracket's lower end).

    Raises:
        ValueError: a level outside ``(0, 1)``, or ``locs``/``scales`` as in
            :func:`gaussian_mixture_cdf`.

    Example:
        >>> q = gaussian_mixture_quantile(torch.zeros(1, 2), 1.0, [0.025, 0.975])
        >>> [round(v, 4) for v in q[:, 0].tolist()]  # the standard normal's ±1.96
        [-1.96, 1.96]
        >>> locs = torch.tensor([[-1.0], [1.0]])  # two components: the median is 0
        >>> abs(float(gaussian_mixture_quantile(locs, 0.5, [0.5])[0, 0])) < 1e-12
        True
    """
    locs = check_samples(locs, "locs")
    scales = check_scales(scales, locs).expand_as(locs).double()
    levels = torch.as_tensor(levels, dtype=torch.float64)  # a float tensor: no type to check
    if levels.dim() != 1 or levels.numel() == 0:
        raise ValueError(f"levels must have shape (L,) with L >= 1, got {tuple(levels.shape)}")
    check_finite("levels", levels)
    if bool(((levels <= 0) | (levels >= 1)).any()):
        raise ValueError(f"levels must lie in (0, 1) (probabilities), got {levels.tolist()}")
    mu = locs.double()
    shape = (-1,) + (1,) * (mu.dim() - 1)
    p = levels.to(mu.device).reshape(shape)  # (L, 1, ...) against points (N, ...)
    bracket = (len(levels), *mu.shape[1:])
    low = (mu - _BRACKET_SDS * scales).amin(0).expand(bracket).clone()
    high = (mu + _BRACKET_SDS * scales).amax(0).expand(bracket).clone()
    for _ in range(_BISECTION_STEPS):
        middle = (low + high) / 2
        below = _normal_cdf((middle.unsqueeze(1) - mu) / scales).mean(1) < p
        low = torch.where(below, middle, low)
        high = torch.where(below, high, middle)
    # A middle with F < p moves low, any other high: high ends at Q(p) = min{x: F(x) >= p} to
    # float64 resolution (exactly, where a middle hits F = p)
    return high.to(locs.dtype)


def regression_calibration(
    locs: torch.Tensor,
    scales: torch.Tensor | float,
    y: torch.Tensor,
    levels: torch.Tensor | None = None,
) -> RegressionCalibration:
    """Observed coverage of the mixture's central intervals against their nominal levels.

    A calibrated model has ``coverage ~= levels``; coverage below the level means
    over-confident intervals, above means under-confident ones. The coverage pools all points
    and outputs. See the module docstring for why no quantiles are needed.

    Args:
        locs: ``(S, N)`` or ``(S, N, O)`` per-sample predictive means.
        scales: positive noise standard deviations, a float or broadcastable to ``locs``.
        y: ``(N)`` or ``(N, O)`` targets.
        levels: ``(L,)`` nominal levels in ``[0, 1]``; default ``0.05, 0.10, ..., 0.95``.

    Returns:
        :class:`RegressionCalibration` ``(levels, coverage, error)`` with ``error`` the mean
        absolute gap between coverage and level.

    Raises:
        TypeError: if an argument is not a floating tensor where one is needed.
        ValueError: on shape mismatches, non-positive scales, or levels outside ``[0, 1]``.

    Example:
        >>> y = torch.tensor([-2.0, -0.5, 0.5, 2.0])
        >>> result = regression_calibration(torch.zeros(1, 4), 1.0, y, torch.tensor([0.5, 0.9]))
        >>> result.coverage.tolist()  # |y| <= 0.674 for 2 of 4 points, |y| <= 1.645 for 2 of 4
        [0.5, 0.5]
        >>> round(result.error, 6)
        0.2
    """
    if levels is None:
        levels = torch.arange(1, 20, dtype=torch.float64) / 20
    levels = check_tensor("levels", levels)
    if levels.dim() != 1 or levels.numel() == 0:
        raise ValueError(f"levels must have shape (L,) with L >= 1, got {tuple(levels.shape)}")
    check_finite("levels", levels)
    if bool(((levels < 0) | (levels > 1)).any()):
        raise ValueError("levels must lie in [0, 1] (nominal coverage probabilities)")
    pit = gaussian_mixture_cdf(locs, scales, y).double().reshape(-1)
    distance = (2.0 * pit - 1.0).abs()  # y is inside the level-p interval iff distance <= p
    nominal = levels.to(distance.device)  # compared with float64: promoted exactly
    coverage = (distance[None, :] <= nominal[:, None]).double().mean(dim=1)
    error = (coverage - nominal).abs().mean().item()
    return RegressionCalibration(levels, coverage.to(levels), error)


class CalibrationErrors(NamedTuple):
    """Result of :func:`calibration_errors`: three summaries of the gap between the observed
    coverage of the central intervals and their levels (0 is perfect calibration).

    Attributes:
        mace: the mean absolute gap over the levels.
        rmsce: the root mean squared gap.
        miscalibration_area: the area between the coverage curve (linear between the levels)
            and the diagonal.

    Example:
        >>> y = torch.randn(500, generator=torch.Generator().manual_seed(0))
        >>> errors = calibration_errors(torch.zeros(1, 500), 0.5, y)  # over-confident: sd 1
        >>> errors.mace > 0.2, errors.miscalibration_area > 0.2
        (True, True)
    """

    mace: float
    rmsce: float
    miscalibration_area: float


def calibration_errors(
    locs: torch.Tensor, scales: torch.Tensor | float, y: torch.Tensor, num_levels: int = 100
) -> CalibrationErrors:
    """MACE, RMSCE and miscalibration area of the mixture's central intervals, at
    ``num_levels`` levels evenly spaced from 0 to 1 (uncertainty-toolbox's definitions, with
    its "interval" proportions; for one Gaussian per point the same numbers, tested).

    Args:
        locs: ``(S, N)`` or ``(S, N, O)`` per-sample predictive means.
        scales: positive noise standard deviations, a float or broadcastable to ``locs``.
        y: ``(N)`` or ``(N, O)`` targets.
        num_levels: how many levels, ``>= 2``.

    Returns:
        :class:`CalibrationErrors` ``(mace, rmsce, miscalibration_area)``.

    Example:
        >>> y = torch.tensor([-2.0, -0.5, 0.5, 2.0])
        >>> errors = calibration_errors(torch.zeros(1, 4), 1.0, y, num_levels=3)  # levels 0, .5, 1
        >>> [round(e, 4) for e in errors]  # coverage 0, 0.5, 1: |2Φ(±0.5) - 1| = 0.383 <= 0.5
        [0.0, 0.0, 0.0]
    """
    check_int("num_levels", num_levels, minimum=2)
    levels = torch.linspace(0.0, 1.0, num_levels, dtype=torch.float64)
    result = regression_calibration(locs, scales, y, levels)
    gap = result.coverage - levels  # the coverage comes back on the levels' device and dtype
    a, b, h = gap[:-1].abs(), gap[1:].abs(), levels[1]  # h: the spacing (levels[0] is 0)
    # The gap is linear between two levels: where it keeps its sign the area under |gap| is a
    # trapezoid, h (a + b) / 2; where it crosses 0, two triangles,
    # h (a² + b²) / 2(a + b) = h (a + b) / 2 - h ab / (a + b).
    crossing = (-gap[:-1] * gap[1:]).clamp_min(0)  # ab where the sign changes, else 0
    total = (a + b).clamp_min(torch.finfo(gap.dtype).tiny)
    area = (h * (a + b) / 2 - h * crossing / total).sum()
    return CalibrationErrors(float(gap.abs().mean()), float(gap.pow(2).mean().sqrt()), float(area))
