"""SavedWithMethod's own contract, on a minimal calibrator: subclasses register themselves, a
config with parts missing rebuilds with empty ones, and ``load`` passes ``map_location`` on."""

from __future__ import annotations

from typing import Any

import torch

import bnn_pyro as bp
from bnn_pyro.calibration.saving import SavedWithMethod
from bnn_pyro.checkpoint import class_named


def _echo_class(name: str) -> type:
    """A fresh minimal calibrator class named ``name`` (defined at call time, so the class
    statement itself runs inside the test)."""

    def __init__(self, method: Any, **predict_options: Any) -> None:
        self.method = method
        self.predict_options = predict_options
        self.numbers = {"w": torch.tensor([1.5, -2.0]), "label": "echo"}

    def calibrator_state(self) -> dict[str, Any]:
        return dict(self.numbers)

    def restore_calibrator_state(self, state: dict[str, Any]) -> None:
        self.numbers = state

    body = {
        "__init__": __init__,
        "calibrator_state": calibrator_state,
        "restore_calibrator_state": restore_calibrator_state,
    }
    return type(name, (SavedWithMethod,), body)


def _method():
    return bp.MCDropout(bp.nn.mlp(1, [3], 1, dropout=0.1), likelihood=bp.Gaussian(0.3))


def test_defining_a_subclass_registers_it_under_its_name():
    """A checkpoint names its class; the name must find the class just defined."""
    cls = _echo_class("SavingChecksRegistered")
    assert class_named("SavingChecksRegistered") is cls


def test_a_config_without_options_or_state_rebuilds_with_empty_ones():
    """Missing ``predict_options`` and ``state`` read as empty dicts, not as an error."""
    cls = _echo_class("SavingChecksEmpty")
    method = _method()
    calibrator = cls.from_checkpoint_config(method, {})
    assert calibrator.method is method
    assert calibrator.predict_options == {}
    assert calibrator.numbers == {}


def test_a_saved_calibrator_comes_back_with_its_options_and_numbers(tmp_path):
    """The file holds the class name, the options and the state; load restores them."""
    cls = _echo_class("SavingChecksRoundTrip")
    path = tmp_path / "echo.pt"
    cls(_method(), seed=3, num_samples=7).save(path)
    raw = torch.load(path, weights_only=True)
    assert raw["class"] == "SavingChecksRoundTrip"
    assert raw["config"]["predict_options"] == {"seed": 3, "num_samples": 7}
    loaded = cls.load(path, net=bp.nn.mlp(1, [3], 1, dropout=0.1))
    assert type(loaded) is cls and loaded.predict_options == {"seed": 3, "num_samples": 7}
    assert loaded.numbers["label"] == "echo"
    assert torch.equal(loaded.numbers["w"], torch.tensor([1.5, -2.0]))


def test_load_passes_map_location_on_to_torch_load(tmp_path):
    """A callable ``map_location`` is called by torch.load for each stored tensor."""
    cls = _echo_class("SavingChecksMapLocation")
    path = tmp_path / "echo.pt"
    cls(_method()).save(path)
    seen: list[str] = []

    def keep_on_cpu(storage, location):
        seen.append(location)
        return storage

    loaded = cls.load(path, net=bp.nn.mlp(1, [3], 1, dropout=0.1), map_location=keep_on_cpu)
    assert seen and set(seen) == {"cpu"}
    assert torch.equal(loaded.numbers["w"], torch.tensor([1.5, -2.0]))
