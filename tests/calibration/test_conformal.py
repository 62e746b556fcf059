"""Split conformal intervals: the coverage guarantee, the same intervals as MAPIE, and the
library's estimators inside MAPIE."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn as nn

import bnn_pyro as bp
from bnn_pyro.calibration import SplitConformal, predictive_moments
from bnn_pyro.exceptions import NotFittedError


class _Wrong:
    """A regression "method" that is wrong on purpose: its mean is biased (0.5 x for x) and its
    noise scale a tenth of the truth's, so its own Gaussian intervals badly under-cover."""

    def predictive_gaussian(self, x: torch.Tensor, **_: object):
        return (0.5 * x[:, :1]).unsqueeze(0), torch.tensor(0.1)


def _data(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(n, 1, generator=g, dtype=torch.float64)
    return x, x[:, 0] + torch.randn(n, generator=g, dtype=torch.float64)  # noise sd 1


@pytest.mark.parametrize("score", ["absolute", "normalized"])
def test_the_coverage_guarantee_holds_for_a_wrong_model(score):
    """Over repeated draws of calibration and test rows, the mean coverage lies in
    [1 - alpha, 1 - alpha + 1/(n + 1)] (exchangeable data, continuous scores). Each draw's
    coverage has sd about sqrt(a(1-a)/n_test + a(1-a)/(n + 2)) ≈ 0.036 at a = 0.1, n = 99,
    n_test = 200, so the mean of 300 draws has sd ≈ 0.0021: a margin of 0.01 is over 4 sd."""
    g = torch.Generator().manual_seed(0)
    alpha, n, reps = 0.1, 99, 300
    covered, raw = [], []
    for _ in range(reps):
        x_cal, y_cal = _data(n, g)
        x_test, y_test = _data(200, g)
        c = SplitConformal(_Wrong(), score=score).calibrate(x_cal, y_cal)
        lower, upper = c.predict_interval(x_test, alpha=alpha)
        covered.append(bp.metrics.picp(lower, upper, y_test[:, None]))
        mean, sd = predictive_moments(_Wrong(), x_test)
        z = 1.6448536269514722  # the model's own 90% Gaussian interval
        raw.append(bp.metrics.picp(mean - z * sd, mean + z * sd, y_test[:, None]))
    mean_coverage = float(np.mean(covered))
    assert 1 - alpha - 0.01 <= mean_coverage <= 1 - alpha + 1 / (n + 1) + 0.01, mean_coverage
    assert float(np.mean(raw)) < 0.3  # what the wrapper fixed: the model's own intervals


def test_the_intervals_are_mapies():
    """The same (mean, sd) through MAPIE's SplitConformalRegressor (a prefit estimator) gives
    the same intervals. With AbsoluteConformityScore, MAPIE takes the textbook order statistic
    (its quantile level ``⌈(n + 1)(1 - alpha)⌉ / n`` with numpy's ``method="lower"``), as this
    library does: the same intervals to float rounding. With StdConformityScore, MAPIE 1.6's
    half-width was measured one order statistic below the textbook's (the (k-1)-th smallest of
    the normalised scores, not the k-th), a slightly narrower interval than the guarantee
    needs; the test pins that it is within one order statistic, so a change either way shows."""
    pytest.importorskip("mapie")
    from mapie.conformity_scores import AbsoluteConformityScore, StdConformityScore
    from mapie.regression import SplitConformalRegressor
    from sklearn.base import BaseEstimator, RegressorMixin

    g = torch.Generator().manual_seed(1)
    n, alpha = 150, 0.1
    x_cal, y_cal = _data(n, g)
    x_test, _ = _data(50, g)
    wrong = _Wrong()

    class Prefit(RegressorMixin, BaseEstimator):
        def fit(self, X, y):  # noqa: ANN001, ANN201 - scikit-learn's protocol
            self.is_fitted = True
            return self

        def predict(self, X, return_std=False):  # noqa: ANN001, ANN201
            mean, sd = predictive_moments(wrong, torch.as_tensor(X))
            mean, sd = mean[:, 0].numpy(), sd[:, 0].numpy()
            return (mean, sd) if return_std else mean

    est = Prefit().fit(x_cal.numpy(), y_cal.numpy())
    k = math.ceil((n + 1) * (1 - alpha))
    mean, sd = predictive_moments(wrong, x_test)
    for ours, theirs, ranks in (("absolute", AbsoluteConformityScore(), (k,)),
                                ("normalized", StdConformityScore(), (k - 1, k))):  # fmt: skip
        m = SplitConformalRegressor(est, confidence_level=0.9, conformity_score=theirs, prefit=True)
        m.conformalize(x_cal.numpy(), y_cal.numpy())
        _, bounds = m.predict_interval(x_test.numpy())
        c = SplitConformal(wrong, score=ours).calibrate(x_cal, y_cal)
        scores = c.scores[:, 0].sort().values
        assert float(c.quantile(alpha)[0]) == float(scores[k - 1])  # the textbook's k-th
        unit = sd[:, 0] if ours == "normalized" else torch.ones(len(x_test), dtype=sd.dtype)
        theirs_half = torch.as_tensor(mean[:, 0].numpy() - bounds[:, 0, 0]) / unit
        matched = [r for r in ranks if torch.allclose(theirs_half, scores[r - 1].expand(50))]
        assert matched, (ours, float(theirs_half[0]), scores[k - 3 : k + 1].tolist())
        if ours == "absolute":
            lower, upper = c.predict_interval(x_test, alpha=alpha)
            np.testing.assert_allclose(lower[:, 0].numpy(), bounds[:, 0, 0], rtol=1e-9)
            np.testing.assert_allclose(upper[:, 0].numpy(), bounds[:, 1, 0], rtol=1e-9)


def test_a_bnn_regressor_works_inside_mapie():
    """BNNRegressor.predict(X, return_std=True) is what MAPIE's StdConformityScore reads: the
    conformalised intervals cover about 90% of fresh rows (250 test rows: sd of the coverage
    about 0.02 from the test rows, 0.03 from the 100 calibration rows)."""
    pytest.importorskip("mapie")
    from mapie.conformity_scores import StdConformityScore
    from mapie.regression import SplitConformalRegressor

    rng = np.random.default_rng(0)
    X = rng.normal(size=(550, 2))
    y = X[:, 0] - X[:, 1] ** 2 + 0.3 * rng.normal(size=550)
    reg = bp.BNNRegressor(hidden_sizes=(16,), epochs=60, num_samples=20, random_state=0)
    reg.fit(X[:200], y[:200])
    m = SplitConformalRegressor(reg, confidence_level=0.9, conformity_score=StdConformityScore())
    m.conformalize(X[200:300], y[200:300])
    _, bounds = m.predict_interval(X[300:])
    coverage = bp.metrics.picp(bounds[:, 0, 0], bounds[:, 1, 0], y[300:])
    assert 0.78 <= coverage <= 1.0, coverage


def test_too_few_rows_are_refused_by_name():
    """⌈(n + 1)(1 - alpha)⌉ > n rows would give the whole line: refused, naming alpha."""
    c = SplitConformal(_Wrong()).calibrate(torch.zeros(5, 1), torch.ones(5))
    with pytest.raises(ValueError, match="5 calibration rows are too few for alpha=0.1"):
        c.predict_interval(torch.zeros(2, 1), alpha=0.1)
    assert math.isfinite(float(c.quantile(0.2)[0]))  # ⌈6 × 0.8⌉ = 5 <= 5 rows


def test_a_bad_predictive_or_a_classifier_is_refused_by_name():
    class NaNs(_Wrong):
        def predictive_gaussian(self, x, **_):
            return torch.full((1, len(x), 1), float("nan")), torch.tensor(1.0)

    class ZeroNoise(_Wrong):
        def predictive_gaussian(self, x, **_):
            return torch.zeros(1, len(x), 1), torch.tensor(0.0)

    for bad in (NaNs(), ZeroNoise()):
        with pytest.raises(ValueError, match="positive, finite standard deviation"):
            SplitConformal(bad).calibrate(torch.zeros(5, 1), torch.ones(5))
    classifier = bp.MCDropout(nn.Sequential(nn.Linear(2, 4), nn.Dropout(0.1), nn.Linear(4, 3)))
    with pytest.raises(TypeError, match="must be a regression method: this MCDropout classifies"):
        SplitConformal(classifier)


def test_bad_input_is_refused_by_name():
    with pytest.raises(TypeError, match="predictive_gaussian"):
        SplitConformal(nn.Linear(1, 1))
    with pytest.raises(ValueError, match="score must be one of"):
        SplitConformal(_Wrong(), score="cqr")
    with pytest.raises(NotFittedError, match="calibrate"):
        SplitConformal(_Wrong()).predict_interval(torch.zeros(2, 1))
    c = SplitConformal(_Wrong()).calibrate(torch.zeros(5, 1), torch.ones(5))
    with pytest.raises(ValueError, match="alpha"):
        c.predict_interval(torch.zeros(2, 1), alpha=1.5)
    with pytest.raises(ValueError, match="y_cal must have shape"):
        SplitConformal(_Wrong()).calibrate(torch.zeros(5, 1), torch.ones(4))


def test_conformal_quantile_refuses_what_is_not_a_score_matrix():
    from bnn_pyro.calibration import conformal_quantile

    with pytest.raises(ValueError, match=r"scores must have shape \(n, O\)"):
        conformal_quantile(torch.arange(1.0, 20.0), 0.1)  # (n,): a column is needed
    with pytest.raises(TypeError, match="scores"):
        conformal_quantile([[1.0], [2.0]], 0.1)
    with pytest.raises(ValueError, match="alpha"):
        conformal_quantile(torch.ones(19, 1), 1.5)
