"""Function-space metrics: coverage of the true function, the sd ratio to a reference, and the
per-point Wasserstein-2 distance, against closed forms."""

from __future__ import annotations

import math
from statistics import NormalDist

import pytest
import torch

from bnn_pyro.metrics import empirical_quantiles, function_coverage, sd_ratio, wasserstein2


def test_coverage_counts_the_points_inside_the_interval_of_the_level():
    """At 68.27% the interval is ``mean ± 1 sd``: of f = 0, 0.5, 0.99, 1.01, 3 around 0 with
    sd 1, three lie inside; at 95% (± 1.96 sd) four."""
    f = torch.tensor([0.0, 0.5, 0.99, 1.01, 3.0])
    mean, sd = torch.zeros(5), torch.ones(5)
    one_sigma = math.erf(1 / math.sqrt(2))
    assert function_coverage(mean, sd, f, level=one_sigma) == pytest.approx(3 / 5)
    assert function_coverage(mean, sd, f) == pytest.approx(4 / 5)
    assert function_coverage(mean[:, None], sd[:, None], f[:, None]) == pytest.approx(4 / 5)


def test_a_calibrated_gaussian_covers_its_level():
    """f drawn from N(mean, sd²) itself: the coverage of 10,000 points is the level within
    three binomial standard errors (sqrt(0.95 x 0.05 / 10,000) = 0.0022)."""
    g = torch.Generator().manual_seed(0)
    mean, sd = torch.randn(10_000, generator=g), 0.1 + torch.rand(10_000, generator=g)
    f = mean + sd * torch.randn(10_000, generator=g)
    assert function_coverage(mean, sd, f) == pytest.approx(0.95, abs=3 * 0.0022)


def test_wasserstein2_of_equal_sized_samples_is_the_sorted_difference():
    """For n samples against n, W2² is the mean squared difference of the sorted samples
    exactly (the quantile functions are steps at multiples of 1/n)."""
    g = torch.Generator().manual_seed(1)
    a = torch.randn(50, 3, generator=g, dtype=torch.float64)
    b = 2 + 3 * torch.randn(50, 3, generator=g, dtype=torch.float64)
    exact = (a.sort(0).values - b.sort(0).values).pow(2).mean(0).sqrt()
    torch.testing.assert_close(wasserstein2(a, b), exact, rtol=1e-12, atol=0)


def test_wasserstein2_between_gaussians_is_the_closed_form():
    """W2(N(m1, s1²), N(m2, s2²)) = sqrt((m1 - m2)² + (s1 - s2)²): here sqrt(1 + 0.25) for
    20,000 and 30,000 draws (unequal counts). The empirical quantiles' error at this size is
    about 0.01 in the bulk; 0.03 is three of it."""
    g = torch.Generator().manual_seed(2)
    a = torch.randn(20_000, 1, generator=g, dtype=torch.float64)
    b = 1 + 1.5 * torch.randn(30_000, 1, generator=g, dtype=torch.float64)
    assert float(wasserstein2(a, b)[0]) == pytest.approx(math.sqrt(1.25), abs=0.03)


def test_sd_ratio_and_bad_input():
    torch.testing.assert_close(sd_ratio(torch.tensor([0.3]), torch.tensor([0.6])),
                               torch.tensor([0.5]))  # fmt: skip
    with pytest.raises(ValueError, match="reference_sd must be > 0"):
        sd_ratio(torch.ones(2), torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match="one shape"):
        function_coverage(torch.zeros(3), torch.ones(3), torch.zeros(4))
    with pytest.raises(ValueError, match="sd must be >= 0"):
        function_coverage(torch.zeros(2), -torch.ones(2), torch.zeros(2))
    with pytest.raises(ValueError, match="level"):
        function_coverage(torch.zeros(2), torch.ones(2), torch.zeros(2), level=1.0)
    with pytest.raises(ValueError, match="same points"):
        wasserstein2(torch.zeros(5, 3), torch.zeros(5, 4))


def test_empirical_quantiles_take_the_order_statistic_of_each_midpoint_exactly():
    # 2,400 samples, 200 levels: u_i S = 12 i + 6, an integer; an index computed in floating
    # point lands below it at some levels and picks the order statistic before
    samples = torch.randperm(2400, generator=torch.Generator().manual_seed(0)).float()[:, None]
    got = empirical_quantiles(samples, 200)[:, 0]
    assert torch.equal(got, 12 * torch.arange(200, dtype=torch.float64) + 6)
    float32_index = ((torch.arange(200) + 0.5) / 200 * 2400).long()
    assert int((float32_index != got.long()).sum()) > 0  # what the float64 index avoids


def test_empirical_quantiles_refuse_bad_input():
    with pytest.raises(ValueError, match="S >= 1"):
        empirical_quantiles(torch.zeros(0, 3), 5)
    with pytest.raises(TypeError):
        empirical_quantiles([1.0, 2.0], 5)
    with pytest.raises((TypeError, ValueError), match="num_levels"):
        empirical_quantiles(torch.zeros(4, 1), 0)


def test_a_zero_sd_covers_exactly_the_points_where_the_mean_is_the_truth():
    """sd = 0 is a legal (degenerate) interval [mean, mean]: f = mean lies inside (ends
    included, |f - mean| = 0 <= z * 0), f = mean + 0.1 does not: coverage 1/2."""
    mean, sd = torch.tensor([1.0, 1.0]), torch.zeros(2)
    assert function_coverage(mean, sd, torch.tensor([1.0, 1.1])) == 0.5


def test_the_interval_ends_count_as_inside():
    """At level 0.9 the interval is mean ± z sd with z the N(0, 1) quantile at (1 + 0.9) / 2;
    f placed exactly on the upper end, z * 0.5 in float64, counts as inside."""
    z = NormalDist().inv_cdf((1.0 + 0.9) / 2)
    sd = torch.tensor([0.5], dtype=torch.float64)
    f = torch.tensor([z * 0.5], dtype=torch.float64)
    assert function_coverage(torch.zeros(1, dtype=torch.float64), sd, f, level=0.9) == 1.0


@pytest.mark.parametrize("level", [0.0, -0.5, 1.0, 1.5])
def test_the_level_must_lie_strictly_between_zero_and_one(level):
    with pytest.raises(
        ValueError, match=rf"^level must be a finite float in \(0.0, 1.0\), got {level}$"
    ):
        function_coverage(torch.zeros(2), torch.ones(2), torch.zeros(2), level=level)


def test_bad_shapes_and_types_are_refused_naming_every_argument():
    with pytest.raises(
        ValueError,
        match=r"^the arguments must have one shape, got mean \(3,\), sd \(3,\), "
        r"f_true \(4,\)$",
    ):
        function_coverage(torch.zeros(3), torch.ones(3), torch.zeros(4))
    with pytest.raises(TypeError, match=r"^sd must be a torch.Tensor, got list"):
        function_coverage(torch.zeros(2), [1.0, 1.0], torch.zeros(2))
    with pytest.raises(ValueError, match=r"^sd must be >= 0 everywhere \(a standard deviation\)$"):
        function_coverage(torch.zeros(2), torch.tensor([1.0, -1e-9]), torch.zeros(2))
    with pytest.raises(
        ValueError, match=r"^reference_sd must be > 0 everywhere \(a ratio to it is taken\)$"
    ):
        sd_ratio(torch.ones(2), torch.tensor([1.0, 0.0]))


def test_the_quantiles_of_a_single_point_come_from_a_1d_sample_vector():
    """Samples (3, 1, 2, 0) of one point, L = 2: levels 1/4 and 3/4 pick the order statistics
    floor(4/4) = 1 and floor(12/4) = 3 (0-based) of (0, 1, 2, 3): values 1 and 3."""
    got = empirical_quantiles(torch.tensor([3.0, 1.0, 2.0, 0.0]), 2)
    assert torch.equal(got, torch.tensor([1.0, 3.0], dtype=torch.float64))


def test_the_top_level_takes_the_largest_sample():
    """S = 3, L = 2: levels 1/4 and 3/4 give indices floor(3/4) = 0 and floor(9/4) = 2, the
    largest of the three; with L = 1 the median index floor(3/2) = 1."""
    samples = torch.tensor([[5.0], [-1.0], [2.0]])
    assert empirical_quantiles(samples, 2)[:, 0].tolist() == [-1.0, 5.0]
    assert empirical_quantiles(samples, 1)[:, 0].tolist() == [2.0]


def test_quantile_and_wasserstein_arguments_are_refused_by_name():
    with pytest.raises(TypeError, match=r"^samples must be a torch.Tensor, got list"):
        empirical_quantiles([1.0, 2.0], 5)
    with pytest.raises(ValueError, match=r"^num_levels must be an int >= 1, got 0$"):
        empirical_quantiles(torch.zeros(4, 1), 0)
    with pytest.raises(TypeError, match=r"^samples must be a torch.Tensor, got list"):
        wasserstein2([[1.0]], torch.zeros(2, 1))
    with pytest.raises(TypeError, match=r"^reference must be a torch.Tensor, got list"):
        wasserstein2(torch.zeros(2, 1), [[1.0]])
    with pytest.raises(ValueError, match=r"^num_levels must be an int >= 1, got 0$"):
        wasserstein2(torch.zeros(2, 1), torch.zeros(2, 1), num_levels=0)
    with pytest.raises(
        ValueError,
        match=r"^samples and reference must be \(S, N\[, O\]\) and \(R, N\[, O\]\) with the "
        r"same points, got \(5, 3\) and \(5, 4\)$",
    ):
        wasserstein2(torch.zeros(5, 3), torch.zeros(5, 4))
