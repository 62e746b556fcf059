"""save/load: one file, weights_only, atomic."""

from __future__ import annotations

import os

import pytest
import torch

import bnn_pyro as bp


def _fitted(regression_data, likelihood=None, prior=None) -> bp.VariationalBNN:
    X, y = regression_data
    torch.manual_seed(0)
    bnn = bp.VariationalBNN(
        bp.nn.mlp(3, [5], 1), likelihood or bp.Gaussian(scale="learned"), prior=prior
    )
    bnn.fit(X, y, epochs=5, progress=False, seed=0)
    return bnn


@pytest.mark.parametrize(
    "prior",
    [None, bp.LayerwiseNormalPrior("xavier", exclude="*.bias"), bp.ScaleMixturePrior(0.25)],
)
def test_round_trip_gives_the_same_predictions(tmp_path, regression_data, prior):
    bnn = _fitted(regression_data, prior=prior)
    path = tmp_path / "model.pt"
    bnn.save(path)
    raw = torch.load(path, weights_only=True)  # plain tensors and containers only
    assert raw["format_version"] == 2 and raw["config"]["likelihood"]["scale"] == "learned"
    loaded = bp.VariationalBNN.load(path, net=bp.nn.mlp(3, [5], 1))
    X = regression_data[0]
    assert torch.equal(
        bnn.predict(X, num_samples=5, seed=3)[0], loaded.predict(X, num_samples=5, seed=3)[0]
    )
    assert loaded.dataset_size == bnn.dataset_size and repr(loaded.prior) == repr(bnn.prior)


def test_a_crash_while_saving_leaves_the_old_file_intact(tmp_path, regression_data, monkeypatch):
    bnn = _fitted(regression_data)
    path = tmp_path / "model.pt"
    bnn.save(path)
    before = path.read_bytes()

    def broken_save(obj, handle):
        handle.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        bnn.save(path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["model.pt"]  # no temporary file left behind


def test_load_checks_architecture_and_file(tmp_path, regression_data):
    bnn = _fitted(regression_data)
    path = tmp_path / "model.pt"
    bnn.save(path)
    with pytest.raises(ValueError, match="architecture"):
        bp.VariationalBNN.load(path, net=bp.nn.mlp(3, [7], 1))
    torch.save({"something": 1}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a bnn_pyro checkpoint"):
        bp.VariationalBNN.load(tmp_path / "other.pt", net=bp.nn.mlp(3, [5], 1))


def test_saving_an_unfitted_model_is_refused(tmp_path):
    bnn = bp.VariationalBNN(bp.nn.mlp(3, [5], 1), bp.Gaussian())
    with pytest.raises(ValueError, match="fit"):
        bnn.save(tmp_path / "m.pt")


def test_read_checkpoint_rejects_newer_formats_other_classes_and_foreign_files(tmp_path):
    from bnn_pyro.checkpoint import FORMAT_VERSION, read_checkpoint

    path = tmp_path / "c.pt"
    torch.save({"format_version": FORMAT_VERSION, "class": "HiddenLayerBNN"}, path)
    assert read_checkpoint(path)["class"] == "HiddenLayerBNN"
    with pytest.raises(ValueError, match="holds a HiddenLayerBNN, not a VariationalBNN"):
        bp.VariationalBNN.load(path, net=bp.nn.mlp(3, [5], 1))
    torch.save({"format_version": FORMAT_VERSION, "class": "NoSuchMethod"}, path)
    with pytest.raises(ValueError, match="no bnn_pyro method class named 'NoSuchMethod'"):
        bp.load(path)
    torch.save({"format_version": FORMAT_VERSION + 1, "class": "VariationalBNN"}, path)
    with pytest.raises(ValueError, match="upgrade bnn_pyro"):
        bp.VariationalBNN.load(path, net=bp.nn.mlp(3, [5], 1))
    torch.save({"format_version": FORMAT_VERSION - 1, "class": "VariationalBNN"}, path)
    with pytest.raises(ValueError, match="written by an older bnn_pyro"):
        bp.load(path, net=bp.nn.mlp(3, [5], 1))
    torch.save([1, 2], path)
    with pytest.raises(ValueError, match="not a bnn_pyro checkpoint"):
        read_checkpoint(path)


def test_method_state_refuses_what_is_not_a_method():
    from bnn_pyro.checkpoint import method_state

    with pytest.raises(TypeError, match="method must be a bnn_pyro method"):
        method_state(torch.nn.Linear(2, 1))
