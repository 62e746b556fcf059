"""Regression calibration: hand-worked coverages, error summaries and mixture quantiles, and the
argument checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from bnn_pyro.metrics import (
    calibration_errors,
    gaussian_mixture_cdf,
    gaussian_mixture_quantile,
    regression_calibration,
)

F64 = {"dtype": torch.float64}


# ------------------------------------------------------------------------------ coverage
def test_the_interval_ends_count_as_covered():
    """N(0, 1) predictions: y = 0 has PIT 1/2, so |2u - 1| = 0 and it lies in the level-0
    interval [0, 0]; y = 40 has PIT 1.0 in float64, |2u - 1| = 1, on the end of the level-1
    interval. Coverage at levels (0, 1): (1/2, 1)."""
    result = regression_calibration(
        torch.zeros(1, 2, **F64), 1.0, torch.tensor([0.0, 40.0], **F64), torch.tensor([0.0, 1.0])
    )
    assert result.coverage.tolist() == [0.5, 1.0]


def test_a_single_level_is_enough():
    """Targets ±0.5 and ±2 under N(0, 1): the 50% interval ±0.674 holds the first two."""
    y = torch.tensor([-2.0, -0.5, 0.5, 2.0])
    result = regression_calibration(torch.zeros(1, 4), 1.0, y, torch.tensor([0.5]))
    assert result.coverage.tolist() == [0.5] and result.error == 0.0


def test_the_default_levels_are_the_nineteen_multiples_of_a_twentieth():
    """Targets 0 (inside every interval) and 40 (PIT 1, inside only the level-1 one): the
    coverage is 1/2 at every default level k / 20, k = 1..19, so the error is the mean of
    |1/2 - k/20|, (2 * (9 + 8 + ... + 1) / 20) / 19 = (90 / 20) / 19."""
    result = regression_calibration(torch.zeros(1, 2, **F64), 1.0, torch.tensor([0.0, 40.0], **F64))
    assert result.levels.dtype == torch.float64
    assert result.levels.tolist() == [k / 20 for k in range(1, 20)]
    assert result.coverage.tolist() == [0.5] * 19
    assert result.error == pytest.approx(90 / 20 / 19, rel=1e-12)


def test_float32_levels_get_float32_coverage():
    result = regression_calibration(torch.zeros(1, 2), 1.0, torch.zeros(2), torch.tensor([0.5]))
    assert result.coverage.dtype == torch.float32 and result.coverage.tolist() == [1.0]


@pytest.mark.parametrize(
    ("levels", "message"),
    [
        (torch.tensor([0.5, math.nan]), r"^levels must be finite, got 1 NaN or infinite value"),
        (torch.tensor([-0.1]), r"^levels must lie in \[0, 1\] \(nominal coverage probabilities\)$"),
        (torch.zeros(0), r"^levels must have shape \(L,\) with L >= 1, got \(0,\)$"),
    ],
)
def test_bad_levels_are_refused_with_the_reason(levels, message):
    with pytest.raises(ValueError, match=message):
        regression_calibration(torch.zeros(1, 2), 1.0, torch.zeros(2), levels)


# ------------------------------------------------------------------------ error summaries
def test_two_levels_by_hand():
    """Levels 0 and 1 (h = 1), N(0, 1) predictions, y = 0 and 1: coverage 1/2 at level 0 (only
    y = 0 has |2u - 1| <= 0) and 1 at level 1; gaps 1/2 and 0. MACE 1/4, RMSCE sqrt(1/8), and
    the area under |gap| the triangle (1/2 * 1) / 2 = 1/4."""
    errors = calibration_errors(torch.zeros(1, 2, **F64), 1.0, torch.tensor([0.0, 1.0], **F64), 2)
    assert errors.mace == 0.25
    assert errors.rmsce == pytest.approx(math.sqrt(1 / 8), rel=1e-15)
    assert errors.miscalibration_area == 0.25


def test_a_gap_that_changes_sign_counts_two_triangles():
    """Levels 0, 1/2, 1 (h = 1/2); y = 0, 3, 3, 3 under N(0, 1). Coverage 1/4 at level 0 (y = 0
    alone), 1/4 at 1/2 (|y| <= 0.674: y = 0 alone) and 1 at 1: gaps 1/4, -1/4, 0. The gap crosses
    0 halfway between the first two levels: two triangles of base 1/4 and height 1/4, 1/16 in
    all; then a triangle of base 1/2 and height 1/4, 1/16. Area 1/8; MACE 1/6, RMSCE
    sqrt(1/24)."""
    y = torch.tensor([0.0, 3.0, 3.0, 3.0], **F64)
    errors = calibration_errors(torch.zeros(1, 4, **F64), 1.0, y, num_levels=3)
    assert errors.miscalibration_area == pytest.approx(1 / 8, rel=1e-15)
    assert errors.mace == pytest.approx(1 / 6, rel=1e-15)
    assert errors.rmsce == pytest.approx(math.sqrt(1 / 24), rel=1e-15)


@pytest.mark.parametrize("num_levels", [1, 0])
def test_at_least_two_levels_are_needed(num_levels):
    with pytest.raises(ValueError, match=rf"^num_levels must be an int >= 2, got {num_levels}$"):
        calibration_errors(torch.zeros(1, 2), 1.0, torch.zeros(2), num_levels=num_levels)


# ---------------------------------------------------------------------- CDF and quantiles
def test_float32_inputs_get_float32_cdf_and_quantiles():
    """Phi(0) = 1/2 and the median of N(0, 1) is 0, both exact in float32."""
    cdf = gaussian_mixture_cdf(torch.zeros(1, 2), 1.0, torch.zeros(2))
    assert cdf.dtype == torch.float32 and cdf.tolist() == [0.5, 0.5]
    q = gaussian_mixture_quantile(torch.zeros(1, 2), 1.0, [0.5])
    assert q.dtype == torch.float32


def test_the_quantile_is_the_smallest_x_whose_cdf_reaches_the_level():
    """Q(p) = min{x: F(x) >= p}. In float64 the N(0, 1) CDF rounds to exactly 1/2 on a
    plateau a few 1e-16 wide around 0 (from about -7e-17 to 2e-16: erfc(t) rounds to 1 there):
    the median is that plateau's left end, at or below 0, with F = 1/2 there (not its right
    end, the smallest x with F(x) > 1/2)."""
    locs = torch.zeros(1, 1, **F64)
    q = float(gaussian_mixture_quantile(locs, 1.0, [0.5]))
    assert -1e-15 < q <= 0.0
    assert float(gaussian_mixture_cdf(locs, 1.0, torch.tensor([q], **F64))) == 0.5


def test_far_tail_quantiles_of_a_wide_normal_match_scipy():
    """N(1, 3^2) at levels 1e-10 and 1 - 1e-4 (6.4 and 3.7 sd out, inside the 16-sd bracket):
    scipy's 1 + 3 ppf(p), to 1e-9. (The lower tail's CDF has full relative precision; near 1
    the CDF's resolution is an ulp of 1, 1.1e-16, i.e. 1.1e-16 / phi(3.7) = 3e-13 sd.)"""
    levels = [1e-10, 1 - 1e-4]
    q = gaussian_mixture_quantile(torch.ones(1, 1, **F64), 3.0, levels)[:, 0]
    np.testing.assert_allclose(q.numpy(), 1 + 3 * stats.norm.ppf(levels), rtol=0, atol=1e-9)


def test_the_cdf_keeps_its_relative_precision_deep_in_the_lower_tail():
    """Phi(-9) = 1.13e-19 and Phi(-30) = 4.9e-198 (scipy): torch's ndtr would give 0 for both,
    and the level-1e-20 quantile is scipy's -9.26 (ndtr would stop near -8.3)."""
    z = torch.tensor([-9.0, -30.0], **F64)
    cdf = gaussian_mixture_cdf(torch.zeros(1, 2, **F64), 1.0, z)
    np.testing.assert_allclose(cdf.numpy(), stats.norm.cdf(z.numpy()), rtol=1e-12)
    q = gaussian_mixture_quantile(torch.zeros(1, 1, **F64), 1.0, [1e-20])
    assert float(q) == pytest.approx(stats.norm.ppf(1e-20), abs=1e-9)


def test_each_point_gets_its_own_bracket():
    """Three points, N(0, 1), N(1e30, 1) and N(-1e30, 1): the first point's quantiles are still
    found to float64 resolution (a bracket shared with a far point would be 1e30 wide, and 64
    halvings would leave it 5e10 wide)."""
    locs = torch.tensor([[0.0, 1e30, -1e30]], **F64)
    q = gaussian_mixture_quantile(locs, 1.0, [0.5, 0.8])
    np.testing.assert_allclose(q[:, 0].numpy(), stats.norm.ppf([0.5, 0.8]), rtol=0, atol=1e-12)


def test_levels_beyond_sixteen_sds_stop_at_the_bracket_end():
    """The bracket holds each component's loc ± 16 scale (Phi(-16) = 6.4e-58): a level below
    that, 1e-60 (true quantile 16.35 sd out), gives the bracket's end, 1 - 16 * 2 = -31."""
    q = gaussian_mixture_quantile(torch.ones(1, 1, **F64), 2.0, [1e-60])
    assert float(q) == pytest.approx(-31.0, abs=1e-12)


def test_quantile_and_cdf_arguments_are_refused_by_name():
    shape = r"must have shape \(S, N\) or \(S, N, O\), got \(3,\)$"
    with pytest.raises(ValueError, match=rf"^locs {shape}"):
        gaussian_mixture_cdf(torch.zeros(3), 1.0, torch.zeros(3))
    with pytest.raises(ValueError, match=rf"^locs {shape}"):
        gaussian_mixture_quantile(torch.zeros(3), 1.0, [0.5])
    with pytest.raises(ValueError, match=r"^levels must be finite, got 1 NaN or infinite value"):
        gaussian_mixture_quantile(torch.zeros(1, 3), 1.0, [0.5, math.nan])
