"""Conformalized quantile regression from a method's predictive quantiles: the formula of
Romano et al. (2019) computed independently, the coverage guarantee, and argument checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

import bnn_pyro as bp
from bnn_pyro.calibration import QuantileConformal
from bnn_pyro.exceptions import NotFittedError


class _OneGaussian:
    """Predictive N(0.5 x, 0.1²): a biased mean and a tenth of the truth's noise."""

    def predictive_gaussian(self, x: torch.Tensor, **_: object):
        return (0.5 * x[:, :1]).unsqueeze(0), torch.tensor(0.1, dtype=x.dtype)


class _Skewed:
    """A two-component mixture at x and x + 2|x| + 0.5 (weights 1/2 each), sd 0.3: its band
    leans to the right of the mean."""

    def predictive_gaussian(self, x: torch.Tensor, **_: object):
        x = x[:, :1]
        return torch.stack([x, x + 2 * x.abs() + 0.5]), torch.tensor(0.3, dtype=x.dtype)


def _data(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(n, 1, generator=g, dtype=torch.float64)
    noise = torch.distributions.Exponential(1.0).sample((n,)).double()  # skewed noise
    return x, x[:, 0] + (0.2 + x[:, 0].abs()) * noise


def test_the_interval_is_romanos_formula_by_hand():
    """One Gaussian per point: the band is μ ± z σ (scipy's ppf), the scores
    max(lo - y, y - hi), Q their ⌈(n+1)(1-α)⌉-th smallest, the interval [lo - Q, hi + Q]."""
    g = torch.Generator().manual_seed(3)
    x_cal, y_cal = _data(60, g)
    x_test, _ = _data(7, g)
    alpha = 0.2
    cqr = QuantileConformal(_OneGaussian(), alpha=alpha).calibrate(x_cal, y_cal)
    z = stats.norm.ppf(1 - alpha / 2)
    mu, y = 0.5 * x_cal[:, 0].numpy(), y_cal.numpy()
    scores = np.maximum(mu - 0.1 * z - y, y - mu - 0.1 * z)
    q = np.sort(scores)[math.ceil(61 * (1 - alpha)) - 1]
    lower, upper = cqr.predict_interval(x_test)
    mu_test = 0.5 * x_test[:, 0].numpy()
    np.testing.assert_allclose(cqr.scores[:, 0].numpy(), scores, atol=1e-9)
    np.testing.assert_allclose(lower[:, 0].numpy(), mu_test - 0.1 * z - q, atol=1e-9)
    np.testing.assert_allclose(upper[:, 0].numpy(), mu_test + 0.1 * z + q, atol=1e-9)


@pytest.mark.parametrize("model", [_OneGaussian(), _Skewed()], ids=["gaussian", "skewed"])
def test_the_coverage_guarantee_holds_for_wrong_models(model):
    """Over repeated draws of calibration and test rows, the mean coverage lies in
    [1 - alpha, 1 - alpha + 1/(n + 1)]. Each draw's coverage has sd about
    sqrt(a(1-a)/n_test + a(1-a)/(n + 2)) ≈ 0.036 at a = 0.1, n = 99, n_test = 200, so the
    mean of 200 draws has sd ≈ 0.0026: a margin of 0.01 is almost 4 sd."""
    g = torch.Generator().manual_seed(0)
    alpha, n = 0.1, 99
    covered = []
    for _ in range(200):
        x_cal, y_cal = _data(n, g)
        x_test, y_test = _data(200, g)
        lower, upper = (
            QuantileConformal(model, alpha).calibrate(x_cal, y_cal).predict_interval(x_test)
        )
        covered.append(bp.metrics.picp(lower, upper, y_test[:, None]))
    assert 1 - alpha - 0.01 <= float(np.mean(covered)) <= 1 - alpha + 1 / (n + 1) + 0.01


def test_a_skewed_predictive_gives_a_lopsided_interval():
    """The mixture's own quantiles, not μ ± q σ: for _Skewed at x = 1 (components at 1 and
    3.5) the band reaches further above the mean (2.25) than below it."""
    cqr = QuantileConformal(_Skewed(), alpha=0.1)
    cqr.correction = torch.zeros(1, dtype=torch.float64)  # the raw band
    lower, upper = cqr.predict_interval(torch.ones(1, 1, dtype=torch.float64))
    mean = 2.25
    assert float(upper - mean) > 1.0 and float(mean - lower) > 1.0  # both humps inside
    band = bp.metrics.gaussian_mixture_quantile(
        torch.tensor([[1.0], [3.5]], dtype=torch.float64), 0.3, [0.05, 0.95]
    )
    np.testing.assert_allclose([float(lower), float(upper)], band[:, 0].numpy(), atol=1e-9)


def test_bad_input_is_refused_by_name():
    g = torch.Generator().manual_seed(1)
    x, y = _data(20, g)
    for alpha in (0.0, 1.0, -0.1, math.nan):
        with pytest.raises(ValueError, match="alpha"):
            QuantileConformal(_OneGaussian(), alpha=alpha)
    with pytest.raises(NotFittedError, match="calibrate"):
        QuantileConformal(_OneGaussian()).predict_interval(x)
    with pytest.raises(ValueError, match="y_cal must have shape"):
        QuantileConformal(_OneGaussian()).calibrate(x, y[:5])
    with pytest.raises(ValueError, match="20 calibration rows are too few for alpha=0.01"):
        QuantileConformal(_OneGaussian(), alpha=0.01).calibrate(x, y)
    with pytest.raises(TypeError, match="method must be"):
        QuantileConformal(object())
