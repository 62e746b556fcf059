"""CV+ intervals: the same as MAPIE's CrossConformalRegressor(method="plus") on the same folds
and the same models, the stacked and the one-by-one training alike, and the guarantee."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn

import bnn_pyro as bp
from bnn_pyro.calibration import CVPlus
from bnn_pyro.exceptions import NotFittedError


class _LeastSquares:
    """Ordinary least squares with an intercept, as a "method": fit, then a Gaussian predictive
    whose mean is scikit-learn's LinearRegression's."""

    def fit(self, X: torch.Tensor, y: torch.Tensor, seed: int | None = None, **_: object):
        design = torch.cat([X.double(), torch.ones(len(X), 1, dtype=torch.float64)], 1)
        self.coef = torch.linalg.lstsq(design, y.double().unsqueeze(-1)).solution
        return self

    def predictive_gaussian(self, x: torch.Tensor, **_: object):
        design = torch.cat([x.double(), torch.ones(len(x), 1, dtype=torch.float64)], 1)
        return (design @ self.coef).unsqueeze(0), torch.tensor(1.0, dtype=torch.float64)


def _data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g, dtype=torch.float64)
    return x, x @ torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64) + torch.randn(
        n, generator=g, dtype=torch.float64
    )


def test_the_intervals_are_mapies_cv_plus():
    """MAPIE's CrossConformalRegressor(LinearRegression(), method="plus", cv=KFold(5)) on the
    same contiguous folds (seed=None) gives the same intervals."""
    pytest.importorskip("mapie")
    from mapie.regression import CrossConformalRegressor
    from sklearn.linear_model import LinearRegression
    from sklearn.model_selection import KFold

    x, y = _data(100, 0)
    x_test, _ = _data(30, 1)
    cv = CVPlus(_LeastSquares, folds=5, seed=None).fit(x, y)
    lower, upper = cv.predict_interval(x_test, alpha=0.1)
    m = CrossConformalRegressor(LinearRegression(), confidence_level=0.9, method="plus",
                                cv=KFold(5))  # fmt: skip
    m.fit_conformalize(x.numpy(), y.numpy())
    _, bounds = m.predict_interval(x_test.numpy())
    np.testing.assert_allclose(lower[:, 0].numpy(), bounds[:, 0, 0], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(upper[:, 0].numpy(), bounds[:, 1, 0], rtol=1e-9, atol=1e-9)


def test_the_guarantee_holds_on_average():
    """Barber et al.: coverage >= 1 - 2 alpha for exchangeable rows. Over 200 redraws of 60
    training and 200 test rows, the mean coverage's sd is under 0.003 (each draw's under
    0.04), so 0.8 - 0.01 is a safe floor; least squares on a linear model is close to 0.9."""
    coverage = []
    for r in range(200):
        x, y = _data(60, 2 * r + 10)
        x_test, y_test = _data(200, 2 * r + 11)
        lower, upper = CVPlus(_LeastSquares, folds=5, seed=r).fit(x, y).predict_interval(x_test)
        coverage.append(bp.metrics.picp(lower, upper, y_test[:, None]))
    assert float(np.mean(coverage)) >= 0.8 - 0.01
    assert float(np.mean(coverage)) == pytest.approx(0.9, abs=0.03)


def test_stacked_and_one_by_one_training_give_the_same_intervals(monkeypatch):
    """MC dropout trains its K fold models as one stacked run, each ending as its own fit
    would up to float rounding (fit_stacked's contract), so the intervals equal those of the
    same folds trained one by one (stacking switched off for the second run)."""
    import bnn_pyro.calibration.cv_plus as cv_plus

    g = torch.Generator().manual_seed(3)
    X = torch.randn(120, 2, generator=g)
    y = X.sum(-1) + 0.2 * torch.randn(120, generator=g)

    def make() -> bp.MCDropout:
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Dropout(0.1), nn.Linear(8, 1))
        return bp.MCDropout(net, likelihood="regression")

    options = dict(epochs=5, progress=False, batch_size=16)
    predict = {"num_samples": 10, "seed": 0}
    stacked = CVPlus(make, folds=4, seed=0, predict_options=predict, **options).fit(X, y)
    monkeypatch.setattr(cv_plus, "why_not_stacked", lambda methods: "switched off")
    alone = CVPlus(make, folds=4, seed=0, predict_options=predict, **options).fit(X, y)
    assert stacked.stacked and not alone.stacked
    for u, v in zip(stacked.predict_interval(X[:10]), alone.predict_interval(X[:10]), strict=True):
        torch.testing.assert_close(u, v, rtol=1e-4, atol=1e-4)


def test_models_that_cannot_stack_are_fitted_one_by_one():
    """A VI net with a point-estimate layer (``LayerNorm``), which ``fit_stacked`` refuses
    before any work, is fitted fold by fold instead of failing: the K models are each their
    own fit (the first fold's model equals a fit of the same rows with the same seed)."""
    g = torch.Generator().manual_seed(4)
    X = torch.randn(40, 2, generator=g)
    y = X.sum(-1) + 0.2 * torch.randn(40, generator=g)

    def make() -> bp.VariationalBNN:
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(2, 4), nn.LayerNorm(4), nn.Linear(4, 1))
        return bp.VariationalBNN(net, bp.Gaussian(0.2))

    with pytest.raises(ValueError, match="point-estimate parameters"):
        bp.fit_stacked([make(), make()], X, y, seeds=[0, 1], epochs=1, progress=False)
    cv = CVPlus(make, folds=2, seed=0, epochs=2, progress=False).fit(X, y)
    assert not cv.stacked and len(cv.methods) == 2
    keep = torch.ones(40, dtype=torch.bool)  # fold 0: the first 20 rows of the seeded order
    keep[torch.randperm(40, generator=torch.Generator().manual_seed(0))[:20]] = False
    own = make()
    own.fit(X[keep], y[keep], seed=0, epochs=2, progress=False)
    first = cv.methods[0].sample_posterior(3, seed=1)["net.0.weight"]
    torch.testing.assert_close(first, own.sample_posterior(3, seed=1)["net.0.weight"])
    lower, upper = cv.predict_interval(X[:5])
    assert bool((lower <= upper).all())


def test_bad_input_is_refused_by_name():
    with pytest.raises(TypeError, match="make_method must be callable"):
        CVPlus(5)
    with pytest.raises(ValueError, match="folds"):
        CVPlus(_LeastSquares, folds=1)
    with pytest.raises(ValueError, match="at least folds=5 rows"):
        CVPlus(_LeastSquares).fit(torch.zeros(3, 1), torch.zeros(3))
    with pytest.raises(NotFittedError, match="fit"):
        CVPlus(_LeastSquares).predict_interval(torch.zeros(2, 1))
