"""Bad input to the metrics and the scikit-learn estimators: refused with the argument named,
and a failed ``fit`` leaves the estimator as it was (issue 13)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import bnn_pyro.metrics as M
from bnn_pyro.estimators import BNNClassifier, BNNRegressor
from bnn_pyro.exceptions import TrainingDivergedError
from tests.reliability.refusal import assert_refused

NAN = float("nan")
g = torch.Generator().manual_seed(0)
Y = torch.randn(10, generator=g)
MU = torch.randn(10, generator=g)
SD = torch.rand(10, generator=g) + 0.1
P = torch.softmax(torch.randn(10, 3, generator=g), -1)
LAB = torch.randint(0, 3, (10,), generator=g)
PS = torch.softmax(torch.randn(5, 10, 3, generator=g), -1)  # (S, N, C) probability samples


def _with_nan(t: torch.Tensor) -> torch.Tensor:
    t = t.clone()
    t.view(-1)[0] = NAN
    return t


METRIC_CASES = [
    # (id, call, exception, the argument the message must name)
    ("rmse-shape", lambda: M.rmse(MU[:5], Y), ValueError, "y"),
    ("rmse-nan", lambda: M.rmse(_with_nan(MU), Y), ValueError, "mean"),
    ("rmse-list", lambda: M.rmse([1.0, 2.0], Y[:2]), TypeError, "mean"),
    ("nll-gauss-neg-scale", lambda: M.gaussian_nll(MU[None], -SD[None], Y), ValueError, "scales"),
    ("nll-gauss-nan-y", lambda: M.gaussian_nll(MU[None], SD[None], _with_nan(Y)), ValueError, "y"),
    (
        "ll-reduction",
        lambda: M.gaussian_log_likelihood(MU[None], SD[None], Y, reduction="avg"),
        ValueError,
        "reduction",
    ),
    ("accuracy-rows", lambda: M.accuracy(P, LAB[:4]), ValueError, "labels"),
    ("accuracy-float-labels", lambda: M.accuracy(P, LAB.float()), TypeError, "labels"),
    ("brier-not-probs", lambda: M.brier_score(P * 3, LAB), ValueError, "probs"),
    ("nll-label-range", lambda: M.nll(P, LAB + 3), ValueError, "labels"),
    ("ece-bins", lambda: M.expected_calibration_error(P, LAB, n_bins=0), ValueError, "n_bins"),
    ("reliability-1d", lambda: M.reliability_curve(P[:, 0], LAB), ValueError, "probs"),
    ("entropy-2d", lambda: M.predictive_entropy(P), ValueError, "probs_samples"),
    ("mi-nan", lambda: M.mutual_information(_with_nan(PS)), ValueError, "probs_samples"),
    ("crps-samples-rows", lambda: M.crps_from_samples(torch.randn(7, 4), Y), ValueError, "y"),
    (
        "crps-mix-chunk",
        lambda: M.crps_gaussian_mixture(MU[None], SD[None], Y, chunk_size=0),
        ValueError,
        "chunk_size",
    ),
    (
        "calibration-levels",
        lambda: M.regression_calibration(MU, SD, Y, levels=torch.tensor([1.5])),
        ValueError,
        "levels",
    ),
    ("cdf-neg-scale", lambda: M.gaussian_mixture_cdf(MU[None], -SD[None], Y), ValueError, "scales"),
]


@pytest.mark.parametrize(
    ("call", "exc", "name"), [c[1:] for c in METRIC_CASES], ids=[c[0] for c in METRIC_CASES]
)
def test_metric_refuses_bad_input(call, exc, name):
    assert_refused(call, exc, name)


X_NP = np.random.default_rng(0).normal(size=(40, 3))
Y_NP = X_NP.sum(1)

ESTIMATOR_CASES = [
    ("lr-negative", BNNRegressor, {"lr": -1.0}, ValueError, "lr"),
    ("epochs-zero", BNNRegressor, {"epochs": 0}, ValueError, "epochs"),
    ("method-unknown", BNNRegressor, {"method": "magic"}, ValueError, "method"),
    ("hidden-sizes", BNNRegressor, {"hidden_sizes": (0,)}, ValueError, "hidden_sizes"),
    ("noise-bad", BNNRegressor, {"noise": -0.5}, ValueError, "noise"),
    ("samples-bool", BNNClassifier, {"num_samples": True}, TypeError, "num_samples"),
]


@pytest.mark.parametrize(
    ("cls", "params", "exc", "name"),
    [c[1:] for c in ESTIMATOR_CASES],
    ids=[c[0] for c in ESTIMATOR_CASES],
)
def test_estimator_refuses_bad_hyperparameter(cls, params, exc, name):
    est = cls(epochs=2, progress=False).set_params(**params)
    y = (Y_NP > 0).astype(int) if cls is BNNClassifier else Y_NP
    assert_refused(lambda: est.fit(X_NP, y), exc, name, obj=est)


def test_estimator_refuses_bad_data_unchanged():
    est = BNNRegressor(epochs=2, progress=False)
    bad = X_NP.copy()
    bad[3, 1] = np.nan
    assert_refused(lambda: est.fit(bad, Y_NP), ValueError, "NaN", obj=est)
    clf = BNNClassifier(epochs=2, progress=False)
    assert_refused(lambda: clf.fit(X_NP, np.zeros(40)), ValueError, "2 classes", obj=clf)


def test_diverged_estimator_fit_leaves_no_half_model():
    # before: a diverged fit left n_features_in_ set but no model_
    est = BNNRegressor(epochs=3, lr=1e3, standardize=False, progress=False, random_state=0)
    with pytest.raises(TrainingDivergedError):
        est.fit(X_NP, Y_NP * 1e30)
    assert not hasattr(est, "n_features_in_") and not hasattr(est, "model_")


def test_diverged_refit_keeps_the_earlier_model():
    est = BNNRegressor(epochs=3, progress=False, random_state=0).fit(X_NP, Y_NP)
    before = est.predict(X_NP[:5])
    model = est.model_
    est.set_params(lr=1e3, standardize=False)
    with pytest.raises(TrainingDivergedError):
        est.fit(X_NP, Y_NP * 1e30)
    assert est.model_ is model and est.get_params()["lr"] == 1e3
    np.testing.assert_array_equal(est.predict(X_NP[:5]), before)
