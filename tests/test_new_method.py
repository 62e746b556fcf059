"""A new method is one new folder: ``tests/fixtures/new_method/toy/`` (a class and its
``spec.py``), put on ``bnn_pyro.methods``' path with no edit anywhere else, gets ``make``, the
command line's ``--method``, the scikit-learn estimators, ``save``/``load``, a clear refusal
from ``fit_stacked`` and a row in the UCI harness."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import bnn_pyro as bp
import bnn_pyro.methods

FOLDER = Path(__file__).resolve().parent / "fixtures" / "new_method"


@pytest.fixture
def toy(monkeypatch):
    """The toy folder on the methods' path for one test; its modules forgotten after."""
    monkeypatch.setattr(bnn_pyro.methods, "__path__", [*bnn_pyro.methods.__path__, str(FOLDER)])
    yield
    for name in [m for m in sys.modules if m.startswith("bnn_pyro.methods.toy")]:
        del sys.modules[name]


def _data(n=64):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(n, 2, generator=g)
    return X, (X[:, :1] - 0.5 * X[:, 1:]) + 0.1 * torch.randn(n, 1, generator=g)


def test_the_registry_and_make_know_it_and_it_round_trips(toy, tmp_path):
    assert "toy" in bp.METHODS and list(bp.METHODS)[-1] == "toy"  # after the built-in ones
    X, y = _data()
    torch.manual_seed(0)
    model = bp.make("toy", bp.nn.mlp(2, [16], 1), bp.Gaussian(scale="learned"), sigma=0.02)
    model.fit(X, y, epochs=30, lr=1e-2, progress=False, seed=0)
    mean, var = model.predict(X, seed=1)
    assert mean.shape == (64, 1) and bool((var > 0).all())  # noisy weights: a spread
    assert float((mean - y).pow(2).mean()) < float(y.var())  # it learned something
    path = tmp_path / "toy.pt"
    model.save(path)
    loaded = bp.load(path, net=bp.nn.mlp(2, [16], 1))
    assert type(loaded).__name__ == "WeightNoise" and loaded.sigma == 0.02
    assert torch.equal(loaded.predict(X, seed=1)[0], mean)


def test_the_estimators_and_the_command_line_offer_it(toy, tmp_path):
    from bnn_pyro.cli import main
    from bnn_pyro.estimators import BNNRegressor

    X, y = (t.numpy() for t in _data())
    est = BNNRegressor(method="toy", hidden_sizes=(8,), epochs=5, num_samples=4, random_state=0)
    assert est.fit(X, y.ravel()).predict(X).shape == (64,)
    data = tmp_path / "d.csv"
    np.savetxt(data, np.c_[X, y], delimiter=",", header="a,b,y", comments="")
    out = tmp_path / "run"
    argv = ["fit", "--data", str(data), "--target", "y", "--out", str(out), "--method", "toy"]
    assert main([*argv, "--epochs", "3", "--hidden", "8", "--quiet"]) == 0
    assert json.loads((out / "metrics.json").read_text())["method"] == "toy"


def test_fit_stacked_refuses_it_by_name(toy):
    X, y = _data()
    models = [bp.make("toy", bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1)) for _ in range(2)]
    from bnn_pyro.registry import method_spec

    # no reason of its own (a spec's `unstacked`): the methods that do stack, by name
    stacking = sorted(name for name in bp.METHODS if method_spec(name).stacked_fit is not None)
    assert {"vi", "dropout", "vbll"} <= set(stacking) and "dkl" not in stacking
    message = "fit_stacked does not train WeightNoise models (the class itself); the methods "
    with pytest.raises(ValueError, match=re.escape(f"{message}that train stacked: {stacking}")):
        bp.fit_stacked(models, X, y, seeds=[0, 1], epochs=1, progress=False)


def test_the_uci_harness_runs_it_as_an_untuned_row(toy):
    from benchmarks.uci import registry
    from benchmarks.uci.method import DatasetInfo

    spec = registry.get_method("toy")
    assert "toy" in registry.runnable_methods() and spec.label == "toy (untuned)"
    X, y = _data(40)
    (config,) = spec.grid(DatasetInfo("synthetic", 40, 2), True)
    reported = []
    spec.train(
        config, X, y, y_std=1.0, hidden=8, seed=0, checkpoints=[config["epochs"]],
        report=lambda epoch, predictor: reported.append(predictor(X)), num_samples=5,
    )  # fmt: skip
    locs, scales = reported[0]
    assert locs.shape == (5, 40, 1) and bool(torch.isfinite(scales).all())
    registry._UNTUNED.pop("toy")  # the toy folder leaves with this test


def test_the_new_public_helpers_refuse_bad_input_by_name():
    from bnn_pyro.checkpoint import class_named, register_class
    from bnn_pyro.spec import MethodSpec, load_object

    with pytest.raises(ValueError, match="a method name must be an identifier"):
        MethodSpec("two words", "bnn_pyro.methods.swag.swag:SWAG", "")
    with pytest.raises(TypeError, match="cls must be a class or 'module:Class'"):
        MethodSpec("toy", 3, "")
    with pytest.raises(ValueError, match="expected 'module:name'"):
        load_object("bnn_pyro.methods.swag.swag.SWAG")
    with pytest.raises(TypeError, match="register_class takes a class"):
        register_class("SWAG")
    with pytest.raises(ValueError, match="no bnn_pyro method class named 'Nope'"):
        class_named("Nope")
    with pytest.raises(ValueError, match="method must be one of"):
        bp.make("nope", bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1))
