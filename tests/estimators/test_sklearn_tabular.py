"""TabularBNN, the engine of the estimators and the CLI: files that load back exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bnn_pyro.estimators import METHODS, TabularBNN
from bnn_pyro.exceptions import NotFittedError
from tests.method_tasks import takes

TINY = dict(hidden_sizes=(8,), epochs=5, batch_size=16, num_samples=6, ensemble_size=2)


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(5.0, 3.0, size=(40, 3))
    return X, X @ [1.0, -2.0, 0.5] + rng.standard_normal(40), (X[:, 0] > 5).astype(int)


@pytest.mark.parametrize(
    ("method", "task"),
    [(m, t) for m in METHODS for t in ("regression", "classification") if takes(m, t)],
)
def test_save_and_load_give_the_same_predictions(tmp_path, data, method, task):
    X, y_reg, y_clf = data
    model = TabularBNN(task, method, **TINY)
    model.metadata = {"feature_names": ["a", "b", "c"], "classes": ["no", "yes"]}
    model.fit(X, y_reg if task == "regression" else y_clf, seed=1)
    path = tmp_path / "model.pt"
    model.save(path)
    state = torch.load(path, weights_only=True)  # plain tensors and settings only
    assert state["params"]["method"] == method
    assert state["module"]["class"] == type(model.module).__name__  # a method checkpoint
    loaded = TabularBNN.load(path)
    assert loaded.metadata == model.metadata and loaded.task == task
    for a, b in zip(model.predict(X), loaded.predict(X), strict=True):
        np.testing.assert_array_equal(a, b)


def test_predict_shapes_and_std(data):
    X, y_reg, y_clf = data
    mean, std = TabularBNN("regression", **TINY).fit(X, y_reg).predict(X[:5])
    assert mean.shape == std.shape == (5, 1) and (std > 0).all()
    probs, spread = TabularBNN("classification", **TINY).fit(X, y_clf, n_classes=3).predict(X)
    assert probs.shape == spread.shape == (40, 3)
    np.testing.assert_allclose(probs.sum(1), 1.0)


def test_errors(tmp_path, data):
    X, y_reg, y_clf = data
    model = TabularBNN(**TINY)
    with pytest.raises(NotFittedError):
        model.predict(X)
    with pytest.raises(NotFittedError):
        model.save(tmp_path / "m.pt")
    with pytest.raises(ValueError, match="y must have 40 rows"):
        model.fit(X, y_reg[:-1])
    with pytest.raises(ValueError, match="X contains 1 NaN/inf"):
        model.fit(np.where(X == X[0, 0], np.nan, X), y_reg)
    with pytest.raises(TypeError, match="X must hold numbers"):
        model.fit(X.astype(str), y_reg)
    clf = TabularBNN("classification", **TINY)
    with pytest.raises(ValueError, match="class labels 0, 1, ..., C-1"):
        clf.fit(X, y_clf - 1)
    with pytest.raises(ValueError, match="C >= 2 classes, got 1"):
        clf.fit(X, np.zeros(40))
    model.fit(X, y_reg)
    with pytest.raises(ValueError, match="X must have 3 column"):
        model.predict(X[:, :2])
    (tmp_path / "junk.pt").write_text("not a model")
    with pytest.raises(ValueError, match="is not a bnn_pyro model file"):
        TabularBNN.load(tmp_path / "junk.pt")
    torch.save({"a": torch.zeros(1)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a saved bnn_pyro TabularBNN"):
        TabularBNN.load(tmp_path / "other.pt")
    state = model.state_dict()
    torch.save(dict(state, format_version=state["format_version"] - 1), tmp_path / "old.pt")
    with pytest.raises(ValueError, match="old.pt' has format version .* older bnn_pyro"):
        TabularBNN.load(tmp_path / "old.pt")
    with pytest.raises(ValueError, match="the saved TabularBNN has format version .* upgrade"):
        TabularBNN.from_state_dict(dict(state, format_version=state["format_version"] + 1))
    with pytest.raises(FileNotFoundError):
        TabularBNN.load(tmp_path / "missing.pt")
