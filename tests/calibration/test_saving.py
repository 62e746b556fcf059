"""A calibrator is saved with its model in one file and comes back whole: the same intervals
from bnn_pyro.load and from the class's own load, a file torch.load reads with
weights_only=True, and clear errors for the wrong class or the wrong net."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import bnn_pyro as bp
from bnn_pyro.calibration import (
    IsotonicRecalibration,
    QuantileConformal,
    ScaleRecalibration,
    SplitConformal,
)
from bnn_pyro.exceptions import CheckpointError


@pytest.fixture(scope="module")
def fitted():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(300, 2, generator=g)
    y = X[:, 0] - X[:, 1] + 0.5 * torch.randn(300, generator=g)
    net = bp.nn.mlp(2, [16], 1, dropout=0.1)
    method = bp.make("dropout", net, bp.Gaussian(0.2))  # over-confident: noise sd 0.5
    method.fit(X[:150], y[:150], epochs=30, progress=False)
    return method, X, y


def _interval(calibrator, X):
    if isinstance(calibrator, ScaleRecalibration):
        mean, sd = calibrator.predict_moments(X)
        return mean - 1.645 * sd, mean + 1.645 * sd
    if isinstance(calibrator, QuantileConformal):
        return calibrator.predict_interval(X)
    return calibrator.predict_interval(X, alpha=0.1)


CALIBRATORS = {
    "scale": lambda m, X, y: ScaleRecalibration(m, seed=1, num_samples=20).fit(X, y),
    "isotonic": lambda m, X, y: IsotonicRecalibration(m, seed=1, num_samples=20).fit(X, y),
    "split": lambda m, X, y: SplitConformal(m, "absolute", seed=1, num_samples=20).calibrate(X, y),
    "cqr": lambda m, X, y: QuantileConformal(m, 0.2, seed=1, num_samples=20).calibrate(X, y),
}


@pytest.mark.parametrize("kind", sorted(CALIBRATORS))
def test_a_saved_calibrator_gives_the_same_intervals(fitted, kind, tmp_path):
    method, X, y = fitted
    calibrator = CALIBRATORS[kind](method, X[150:250], y[150:250])
    path = tmp_path / f"{kind}.pt"
    calibrator.save(path)
    raw = torch.load(path, weights_only=True)  # plain data only: no pickled code runs
    assert raw["class"] == type(calibrator).__name__ and raw["method"]["class"] == "MCDropout"
    for loaded in (
        bp.load(path, net=bp.nn.mlp(2, [16], 1, dropout=0.1)),
        type(calibrator).load(path, net=bp.nn.mlp(2, [16], 1, dropout=0.1)),
    ):
        assert type(loaded) is type(calibrator)
        assert loaded.predict_options == {"seed": 1, "num_samples": 20}
        pairs = zip(_interval(calibrator, X[250:]), _interval(loaded, X[250:]), strict=True)
        for ours, theirs in pairs:
            torch.testing.assert_close(ours, theirs, rtol=0, atol=0)


def test_the_wrong_class_or_net_is_refused(fitted, tmp_path):
    method, X, y = fitted
    path = tmp_path / "split.pt"
    CALIBRATORS["split"](method, X[150:250], y[150:250]).save(path)
    with pytest.raises(CheckpointError, match="holds a SplitConformal, not a ScaleRecalibration"):
        ScaleRecalibration.load(path, net=bp.nn.mlp(2, [16], 1, dropout=0.1))
    with pytest.raises(CheckpointError, match=r"has shape \(16, 2\) in the file and \(8, 2\)"):
        bp.load(path, net=bp.nn.mlp(2, [8], 1, dropout=0.1))


def test_an_unfitted_calibrator_saves_and_still_refuses_to_predict(fitted, tmp_path):
    method, X, _ = fitted
    path = tmp_path / "unfitted.pt"
    ScaleRecalibration(method).save(path)
    loaded = bp.load(path, net=bp.nn.mlp(2, [16], 1, dropout=0.1))
    with pytest.raises(bp.exceptions.NotFittedError, match="call fit"):
        loaded.predict_moments(X[:3])
    with pytest.raises(TypeError, match="net must be a torch.nn.Module"):
        bp.load(path, net=nn.Linear)
