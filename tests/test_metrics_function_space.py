"""Function-space metrics: coverage of the true function, the sd ratio to a reference, and the
per-point Wasserstein-2 distance, against closed forms."""

from __future__ import annotations

import math

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
