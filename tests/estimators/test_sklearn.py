"""BNNRegressor and BNNClassifier: semantics beyond scikit-learn's generic checks."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import bnn_pyro as bp
from bnn_pyro.estimators import METHODS, BNNClassifier, BNNRegressor, _methods

TINY = dict(hidden_sizes=(16,), epochs=15, batch_size=None, lr=0.05, num_samples=20)


@pytest.fixture(scope="module")
def reg_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, size=(80, 2))
    return X, np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.standard_normal(80)


@pytest.fixture(scope="module")
def clf_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    X = rng.standard_normal((90, 2)) + np.repeat([[0, 0], [3, 0], [0, 3]], 30, axis=0)
    return X, np.repeat(np.array(["cat", "dog", "eel"]), 30)


@pytest.mark.parametrize("method", METHODS)
def test_return_std_includes_the_noise(reg_data, method):
    # a fixed noise of 0.7 (in y units) is a floor of the total predictive std
    X, y = reg_data
    reg = BNNRegressor(method=method, noise=0.7, random_state=0, **TINY).fit(X, y)
    mean, std = reg.predict(X, return_std=True)
    assert mean.shape == std.shape == (80,)
    assert mean.dtype == std.dtype == np.float64
    assert (std >= 0.7 * (1 - 1e-9)).all()
    assert (std > 0.7 + 1e-6).any()  # plus an epistemic part
    np.testing.assert_array_equal(reg.predict(X), mean)


def test_standardisation_is_undone_exactly(reg_data):
    # inside, y and 10 y + 3 are the same standardised problem: the same seed gives the same
    # model, so the predictions are an affine map of each other
    X, y = reg_data
    a = BNNRegressor(random_state=0, **TINY).fit(X, y)
    b = BNNRegressor(random_state=0, **TINY).fit(X, 10 * y + 3)
    mean_a, std_a = a.predict(X, return_std=True)
    mean_b, std_b = b.predict(X, return_std=True)
    np.testing.assert_allclose(mean_b, 10 * mean_a + 3, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(std_b, 10 * std_a, rtol=1e-9)


def test_without_standardisation_the_targets_are_raw(reg_data):
    X, y = reg_data
    reg = BNNRegressor(standardize=False, random_state=0, **TINY).fit(X + 100, y)
    assert reg.model_.x_mean.tolist() == [0.0, 0.0] and reg.model_.y_scale.tolist() == [1.0]


def test_fit_is_reproducible_and_leaves_the_global_rng_alone(reg_data):
    X, y = reg_data
    state = torch.get_rng_state()
    first = BNNRegressor(random_state=3, **TINY).fit(X, y).predict(X)
    assert torch.equal(torch.get_rng_state(), state)
    again = BNNRegressor(random_state=3, **TINY).fit(X, y).predict(X)
    other = BNNRegressor(random_state=4, **TINY).fit(X, y).predict(X)
    np.testing.assert_array_equal(first, again)
    assert not np.allclose(first, other)


def test_multi_output_regression(reg_data):
    X, y = reg_data
    Y = np.c_[y, -2 * y]
    mean, std = BNNRegressor(random_state=0, **TINY).fit(X, Y).predict(X, return_std=True)
    assert mean.shape == std.shape == (80, 2)
    assert np.corrcoef(mean[:, 0], mean[:, 1])[0, 1] < -0.9


def test_the_methods_are_the_registry_s():
    assert METHODS == tuple(bp.METHODS)


@pytest.mark.parametrize("method", METHODS)
def test_the_module_is_the_registry_s_method(reg_data, method):
    X, y = reg_data
    reg = BNNRegressor(method=method, random_state=0, **TINY).fit(X, y)
    assert type(reg.model_.module) is bp.registry.method_class(method)
    assert all(
        t.dtype == torch.float64
        for t in reg.model_.module.state_dict().values()
        if isinstance(t, torch.Tensor) and t.is_floating_point()
    )
    if method == "lrt":
        assert reg.model_.module.local_reparameterization == "local"


def test_classifier_with_string_labels(clf_data):
    X, y = clf_data
    clf = BNNClassifier(random_state=0, **TINY).fit(X, y)
    assert clf.classes_.tolist() == ["cat", "dog", "eel"]
    probs = clf.predict_proba(X)
    assert probs.shape == (90, 3)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-12)
    assert clf.score(X, y) > 0.9
    np.testing.assert_array_equal(clf.predict(X), clf.classes_[probs.argmax(axis=1)])


@pytest.mark.parametrize("cls", [BNNRegressor, BNNClassifier])
def test_predict_before_fit(cls):
    with pytest.raises(NotFittedError):
        cls().predict(np.zeros((2, 2)))


def test_one_class_is_an_error():
    with pytest.raises(ValueError, match="at least 2 classes"):
        BNNClassifier().fit(np.zeros((5, 2)), ["a"] * 5)


@pytest.mark.parametrize(
    ("param", "value", "error", "message"),
    [
        ("method", "mcmc", ValueError, "method must be one of"),
        ("hidden_sizes", "50", TypeError, "hidden_sizes must be a tuple"),
        ("hidden_sizes", (50, 0), ValueError, r"hidden_sizes\[1\] must be an int >= 1"),
        ("activation", "swish", ValueError, "activation must be one of"),
        ("epochs", 0, ValueError, "epochs must be an int >= 1"),
        ("epochs", 2.5, TypeError, "epochs must be an int"),
        ("batch_size", 0, ValueError, "batch_size must be an int >= 1"),
        ("lr", -1.0, ValueError, "lr must be a finite float > 0"),
        ("num_samples", 0, ValueError, "num_samples must be an int >= 1"),
        ("prior_scale", 0.0, ValueError, "prior_scale must be a finite float > 0"),
        ("noise", "fixed", ValueError, "noise must be 'learned' or a float"),
        ("noise", -0.1, ValueError, "noise must be a finite float > 0"),
        ("standardize", "yes", TypeError, "standardize must be a bool"),
        ("dropout_rate", 1.0, ValueError, r"dropout_rate must be a finite float in \(0.0, 1.0\)"),
        ("ensemble_size", 0, ValueError, "ensemble_size must be an int >= 1"),
        ("random_state", "seed", TypeError, "random_state must be None, an int"),
        ("progress", 1, TypeError, "progress must be a bool"),
    ],
)
def test_bad_hyperparameters_fail_in_fit_before_any_work(
    reg_data, monkeypatch, param, value, error, message
):
    reg = BNNRegressor(**{param: value})  # the constructor only stores
    assert reg.get_params()[param] == value

    def no_work(*args, **kwargs):
        raise AssertionError("the model was built before the arguments were checked")

    monkeypatch.setattr(_methods, "build", no_work)
    with pytest.raises(error, match=message):
        reg.fit(*reg_data)


def test_dropout_needs_a_hidden_layer(reg_data):
    with pytest.raises(ValueError, match="method='dropout' needs at least one hidden layer"):
        BNNRegressor(method="dropout", hidden_sizes=()).fit(*reg_data)


@pytest.mark.parametrize("method", METHODS)
def test_float_noise_with_targets_of_different_scales(reg_data, method):
    X, y = reg_data
    reg = BNNRegressor(method=method, noise=0.1, **TINY)
    if _methods.scalar_noise(method):  # one Gaussian scale for all the columns
        with pytest.raises(ValueError, match="noise as a float with several target columns"):
            reg.fit(X, np.c_[y, 100 * y])
    else:  # the methods with a per-column noise take it
        std = reg.fit(X, np.c_[y, 100 * y]).predict(X, return_std=True)[1]
        assert (std >= 0.1 * (1 - 1e-9)).all()  # the noise of each column, in its units


@pytest.mark.parametrize("method", ["vi", "hidden_layer", "vbnn", "laplace"])
def test_pickle_round_trip(clf_data, method):
    X, y = clf_data
    clf = BNNClassifier(method=method, random_state=0, **TINY).fit(X, y)
    loaded = pickle.loads(pickle.dumps(clf))
    np.testing.assert_array_equal(loaded.predict_proba(X), clf.predict_proba(X))


def test_pipeline_cross_val_score_and_grid_search(reg_data, clf_data):
    X, y = reg_data
    pipe = make_pipeline(StandardScaler(), BNNRegressor(random_state=0, **TINY))
    scores = cross_val_score(pipe, X, y, cv=3)
    assert scores.shape == (3,) and scores.mean() > 0.5
    Xc, yc = clf_data
    grid = GridSearchCV(
        BNNClassifier(random_state=0, **TINY), {"method": ["vi", "ensemble"]}, cv=2
    ).fit(Xc, yc)
    assert grid.best_params_["method"] in ("vi", "ensemble")
    assert grid.best_score_ > 0.8
    assert grid.predict(Xc[:3]).tolist() == ["cat"] * 3
