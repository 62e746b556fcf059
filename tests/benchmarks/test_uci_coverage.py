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


def test_the_interval_s_ends_are_inside():
    """One N(0, 1) component, level L = 1 - 2 Φ(-0.01): in float64 Φ(-0.01) is exactly the
    tail (1 - L) / 2 and Φ(0.01) exactly 1 minus it, so the targets -0.01 and 0.01 sit on the
    interval's two ends, which belong to it; a hair beyond each lies outside."""
    p = float(torch.special.ndtr(torch.tensor(-0.01, dtype=torch.float64)))
    level = 1 - 2 * p
    assert (1 - level) / 2 == p  # the premise: the end is representable exactly
    y = torch.tensor([-0.01, 0.01, -0.0100001, 0.0100001], dtype=torch.float64)
    inside = inside_central_interval(torch.zeros(1, 4, dtype=torch.float64), 1.0, y, level)
    assert inside.tolist() == [True, True, False, False]


def test_a_float32_mixture_is_decided_by_its_float64_cdf_near_the_ends():
    """1,000 float32 components N(0, 1) and the 401 float32 targets nearest each end of the
    95% interval (±1.959964): every decision equals the float64 CDF's (ends included), even
    where the float32 CDF falls on the other side (on this build one target, at -1.95996404,
    reads 0.025000004 in float32 and 0.024999997 in float64)."""
    tails = []
    for end in (-1.959963984540054, 1.959963984540054):
        y = torch.tensor(end, dtype=torch.float32)
        down, up = [y], [y]
        for _ in range(200):
            down.append(torch.nextafter(down[-1], torch.tensor(-10.0)))
            up.append(torch.nextafter(up[-1], torch.tensor(10.0)))
        tails += [*down, *up[1:]]
    y = torch.stack(tails)
    inside = inside_central_interval(torch.zeros(1000, len(y)), 1.0, y, 0.95)
    exact = torch.special.ndtr(y.double())
    assert inside.tolist() == ((exact >= 0.025) & (exact <= 0.975)).tolist()


def test_the_level_is_passed_on_and_checked_and_bad_input_is_named():
    """Targets 0 and 1 under N(0, 1): the 50% interval is ±0.674, holding 1 of 2; the 95%
    one holds both. A level of 0 or 1 is refused, as is a locs that is not (S, N, O)."""
    locs, y = torch.zeros(1, 2, 1), torch.tensor([[0.0], [1.0]])
    assert central_coverage(locs, 1.0, y, 0.5) == 0.5
    assert central_coverage(locs, 1.0, y) == 1.0
    for bad in (0.0, 1.0):
        with pytest.raises(ValueError, match=rf"^level must be a float in \(0, 1\), got {bad}$"):
            central_coverage(locs, 1.0, y, bad)
    with pytest.raises(
        ValueError, match=r"^locs must have shape \(S, N\) or \(S, N, O\), got \(2,\)$"
    ):
        inside_central_interval(torch.zeros(2), 1.0, torch.zeros(2))
    with pytest.raises(ValueError, match=r"^locs must be a \(S, N, O\) tensor, got \(2, 1\)$"):
        score(torch.zeros(2, 1), 1.0, torch.zeros(1, 1), y_std=1.0)
    with pytest.raises(ValueError, match=r"^locs must be a \(S, N, O\) tensor, got list$"):
        score([[[0.0]]], 1.0, torch.zeros(1, 1), y_std=1.0)
