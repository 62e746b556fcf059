"""The scale recalibration: its closed form, and what it fixes."""

from __future__ import annotations

import math

import pytest
import torch

import bnn_pyro as bp
from bnn_pyro.calibration import ScaleRecalibration
from bnn_pyro.exceptions import NotFittedError


class _Wrong:
    """Mean 0.5 x for y = x + N(0, 1) and a noise scale of 0.1 (see test_conformal.py)."""

    def predictive_gaussian(self, x: torch.Tensor, **_: object):
        return (0.5 * x[:, :1]).unsqueeze(0), torch.tensor(0.1)


def _data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 1, generator=g, dtype=torch.float64)
    return x, x[:, 0] + torch.randn(n, generator=g, dtype=torch.float64)


def test_the_factor_is_the_closed_form_and_fixes_the_likelihood():
    """y - μ = 0.5 x + ε with x, ε ~ N(0, 1): E[(y - μ)²] = 1.25, so s² = 1.25 / 0.1² = 125.
    With 200,000 rows the sampled mean of z² has a relative sd of sqrt(2 / n) ≈ 0.3%, so 1% on
    s² is over 3 sd. The recalibrated Gaussian then scores the test log-likelihood of
    N(μ, 1.25), about -1.53 per point, against about -58 before."""
    x, y = _data(200_000, 0)
    recal = ScaleRecalibration(_Wrong()).fit(x, y)
    assert float(recal.factor[0]) ** 2 == pytest.approx(125.0, rel=0.01)
    x_test, y_test = _data(50_000, 1)
    mean, sd = recal.predict_moments(x_test)
    before = bp.metrics.gaussian_log_likelihood(mean.unsqueeze(0), 0.1, y_test[:, None])
    after = bp.metrics.gaussian_log_likelihood(mean.unsqueeze(0), sd.unsqueeze(0), y_test[:, None])
    exact = -0.5 * math.log(2 * math.pi * 1.25) - 0.5
    assert after == pytest.approx(exact, abs=0.02) and before < -50


def test_bad_input_is_refused_by_name():
    with pytest.raises(TypeError, match="predictive_gaussian"):
        ScaleRecalibration(object())
    with pytest.raises(NotFittedError, match="fit"):
        ScaleRecalibration(_Wrong()).predict_moments(torch.zeros(2, 1))
    with pytest.raises(ValueError, match="y_cal must have shape"):
        ScaleRecalibration(_Wrong()).fit(torch.zeros(3, 1), torch.zeros(2))


def test_the_monotone_fit_is_scikit_learns():
    """The pool-adjacent-violators fit equals scikit-learn's IsotonicRegression."""
    isotonic = pytest.importorskip("sklearn.isotonic")
    from bnn_pyro.calibration.recalibration import _isotonic

    g = torch.Generator().manual_seed(0)
    x = torch.rand(500, generator=g, dtype=torch.float64)
    y = x + 0.3 * torch.randn(500, generator=g, dtype=torch.float64)
    xs, fitted = _isotonic(x, y)
    theirs = isotonic.IsotonicRegression().fit(x.numpy(), y.numpy()).predict(xs.numpy())
    assert torch.allclose(fitted, torch.as_tensor(theirs), atol=1e-12)
    assert bool((fitted[1:] >= fitted[:-1]).all())


@pytest.mark.parametrize("alpha", [0.1, 0.3, 0.5])
def test_isotonic_recalibration_restores_the_coverage(alpha):
    """The wrong model's own intervals hold far less than 1 - alpha; the recalibrated ones hold
    1 - alpha of fresh rows to sampling error: the map's levels come from 5,000 calibration
    rows (sd of a level about sqrt(p(1-p)/5000) <= 0.007) and coverage is counted on 20,000
    (sd <= 0.0035), so 0.025 is over 3 sd of both together."""
    from bnn_pyro.calibration import IsotonicRecalibration

    x_cal, y_cal = _data(5_000, 2)
    x_test, y_test = _data(20_000, 3)
    recal = IsotonicRecalibration(_Wrong()).fit(x_cal, y_cal)
    lower, upper = recal.predict_interval(x_test, alpha=alpha)
    coverage = bp.metrics.picp(lower, upper, y_test[:, None])
    assert coverage == pytest.approx(1 - alpha, abs=0.025)
    z = float(torch.special.ndtri(torch.tensor(1 - alpha / 2, dtype=torch.float64)))
    mean = 0.5 * x_test
    raw = bp.metrics.picp(mean - 0.1 * z, mean + 0.1 * z, y_test[:, None])
    assert raw < 0.5 * (1 - alpha)


class _Recording:
    """A predictive N(x, 1) that records the options each call gets, in the input's dtype."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def predictive_gaussian(self, x: torch.Tensor, **options: object):
        self.calls.append(options)
        return x[:, :1].unsqueeze(0), torch.ones((), dtype=x.dtype)


def test_the_predict_options_reach_every_prediction_and_the_sd_keeps_its_dtype():
    """``num_samples`` and ``seed`` given to the calibrator go to the method on fit and on
    predict; a factor fitted on float64 rows scales a float32 predictive in float32."""
    method = _Recording()
    x, y = _data(50, 4)
    recal = ScaleRecalibration(method, num_samples=7, seed=3).fit(x, y)
    mean, sd = recal.predict_moments(x[:5].float())
    assert method.calls == [{"num_samples": 7, "seed": 3}] * 2
    assert recal.factor.dtype == torch.float64 and sd.dtype == mean.dtype == torch.float32
    assert torch.allclose(sd, recal.factor.float().expand(5, 1))


def test_an_unfitted_scale_says_so_in_full():
    with pytest.raises(
        NotFittedError, match=r"^ScaleRecalibration is not fitted: call fit\(\) first$"
    ):
        ScaleRecalibration(_Wrong()).predict_moments(torch.zeros(2, 1))
