"""The UCI protocol's 95% coverage from the mixture's CDF equals the one from its quantiles.

``benchmarks.uci.protocol.score`` once found the mixture's 2.5% and 97.5% quantiles by bisection
(:func:`bnn_pyro.metrics.gaussian_mixture_quantile`) and counted the targets between them; it
now reads the CDF at the targets (``a <= F(y) <= 1 - a``, :func:`inside_central_interval`). The
two must agree point by point, except for a target within the bisection's own tolerance of a
bound: the bisection runs 64 halvings in float64, so its quantile is within a few float64 ulps
of the exact one (relative ~1e-15); ``TOL`` allows 1e-9 of the largest scale, a million times
that, and still far below the distance of any random target from a bound.
"""

from __future__ import annotations

import pytest
import torch

from benchmarks.uci.protocol import central_coverage, inside_central_interval, score
from bnn_pyro.metrics import gaussian_mixture_quantile, picp

TOL = 1e-9


def _mixture(seed: int, samples: int, rows: int, outputs: int, scale_shape: str, dtype):
    """Random mixtures of every kind the protocol sees: wide or narrow epistemic spread,
    homoscedastic or heteroscedastic noise, one or two outputs, targets in and beyond the
    tails."""
    g = torch.Generator().manual_seed(seed)
    center = 3 * torch.randn(rows, outputs, generator=g, dtype=torch.float64)
    spread = torch.rand(1, rows, outputs, generator=g, dtype=torch.float64) * 2
    locs = center + spread * torch.randn(samples, rows, outputs, generator=g, dtype=torch.float64)
    shapes = {"float": (), "per_sample": (samples, 1, 1), "full": (samples, rows, outputs)}
    scales = 0.05 + torch.rand(shapes[scale_shape], generator=g, dtype=torch.float64)
    width = (spread**2 + 0.3).sqrt().squeeze(0)
    y = center + 2.2 * width * torch.randn(rows, outputs, generator=g, dtype=torch.float64)
    if scale_shape == "float":
        scales = float(scales)
    else:
        scales = scales.to(dtype)
    return locs.to(dtype), scales, y.to(dtype)


def _by_bisection(locs, scales, y):
    """Inside by the quantiles of the float64 mixture (the inputs as given, upcast exactly)."""
    scales64 = scales if isinstance(scales, float) else scales.double()
    lower, upper = gaussian_mixture_quantile(locs.double(), scales64, [0.025, 0.975])
    y64 = y.double()
    return (y64 >= lower) & (y64 <= upper), lower, upper


def _max_scale(scales) -> float:
    return scales if isinstance(scales, float) else float(scales.max())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    ("samples", "outputs", "scale_shape"),
    [(1, 1, "float"), (7, 1, "per_sample"), (100, 1, "per_sample"), (30, 2, "full")],
)
def test_cdf_coverage_is_the_bisection_coverage(dtype, samples, outputs, scale_shape):
    locs, scales, y = _mixture(samples * 10 + outputs, samples, 3000, outputs, scale_shape, dtype)
    ours = inside_central_interval(locs, scales, y)
    theirs, lower, upper = _by_bisection(locs, scales, y)
    assert ours.shape == y.shape and ours.dtype == torch.bool
    differ = ours != theirs
    near = ((y.double() - lower).abs() <= TOL * _max_scale(scales)) | (
        (y.double() - upper).abs() <= TOL * _max_scale(scales)
    )
    assert not bool((differ & ~near).any()), int(differ.sum())
    # a real test: both sides of both bounds are well represented
    assert 0.2 < float(theirs.double().mean()) < 0.98
    assert bool((y.double() < lower).any()) and bool((y.double() > upper).any())
    if not bool(near.any()):  # then the shares are equal too, as picp counts them
        assert central_coverage(locs, scales, y) == picp(lower, upper, y.double())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_targets_a_hair_from_a_bound_are_decided_by_the_exact_cdf(dtype):
    """Targets placed 1e-6 of a scale inside and outside each bound: their CDF is within ~1e-7
    of ``a`` or ``1 - a``, about the error of a float32 CDF, so only the float64 CDF decides
    them right. Each target is rounded to ``dtype`` first and its expected side read from the
    rounded value against the float64 quantiles."""
    locs, scales, _ = _mixture(5, 50, 400, 1, "per_sample", dtype)
    lower, upper = gaussian_mixture_quantile(locs.double(), scales.double(), [0.025, 0.975])
    delta = 1e-6 * float(scales.min())
    y = torch.cat([lower - delta, lower + delta, upper - delta, upper + delta]).to(dtype)
    locs4, scales4 = locs.repeat(1, 4, 1), scales
    lower4, upper4 = lower.repeat(4, 1), upper.repeat(4, 1)
    y64 = y.double()
    expected = (y64 >= lower4) & (y64 <= upper4)
    clear = ((y64 - lower4).abs() > TOL * float(scales.max())) & (
        (y64 - upper4).abs() > TOL * float(scales.max())
    )
    assert float(clear.double().mean()) > 0.9  # the rounding left most targets off the bound
    ours = inside_central_interval(locs4, scales4, y)
    assert torch.equal(ours[clear], expected[clear])
    assert 0.3 < float(expected.double().mean()) < 0.7  # both sides present


def test_score_reports_the_same_coverage_and_leaves_it_out_on_request():
    locs, scales, y = _mixture(11, 40, 2000, 1, "per_sample", torch.float32)
    theirs, lower, upper = _by_bisection(locs, scales, y)
    out = score(locs, scales, y, y_std=3.0)
    assert out["coverage_95"] == float(theirs.double().mean())
    assert out["coverage_95"] == central_coverage(locs, scales, y)
    assert set(score(locs, scales, y, y_std=3.0, coverage=False)) == {"test_ll", "rmse"}


def test_bad_level_is_refused():
    with pytest.raises(ValueError, match="level"):
        inside_central_interval(torch.zeros(2, 3), 1.0, torch.zeros(3), level=1.0)
