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


# ------------------------------------------------------------------ the checkpoint's own errors
def test_what_is_not_a_checkpoint_of_this_format_is_refused_word_for_word():
    from bnn_pyro.checkpoint import FORMAT_VERSION, check_format
    from bnn_pyro.exceptions import CheckpointError

    cases = [
        ([1, 2], "'f' is not a bnn_pyro checkpoint (a list without a 'format_version' entry)"),
        ({"a": 1}, "'f' is not a bnn_pyro checkpoint (a dict without a 'format_version' entry)"),
        (
            {"format_version": FORMAT_VERSION + 1},
            f"'f' has format version {FORMAT_VERSION + 1}; this bnn_pyro reads {FORMAT_VERSION}: "
            "upgrade bnn_pyro",
        ),
        (
            {"format_version": FORMAT_VERSION - 1},
            f"'f' has format version {FORMAT_VERSION - 1}, written by an older bnn_pyro (this "
            f"one reads {FORMAT_VERSION}): save the model again with the version that wrote it "
            "installed, or retrain",
        ),
    ]
    for state, message in cases:
        with pytest.raises(CheckpointError) as info:
            check_format(state, "'f'")
        assert str(info.value) == message


def test_a_built_in_class_not_yet_imported_is_found_by_its_name():
    """In a fresh interpreter the package has imported no method yet: ``class_named`` finds
    each built-in one through its folder's spec, and names what it cannot find."""
    import subprocess
    import sys

    script = (
        "from bnn_pyro import checkpoint as c\n"
        "assert 'SWAG' not in c._CLASSES and 'LaplaceApproximation' not in c._CLASSES\n"
        "print(c.class_named('SWAG').__name__, c.class_named('LaplaceApproximation').__name__)\n"
        "try:\n"
        "    c.class_named('Nope')\n"
        "except ValueError as err:\n"
        '    print(str(err).endswith("; import the module that defines it before loading"))\n'
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.split() == ["SWAG", "LaplaceApproximation", "True"]


def test_saved_tensors_of_other_shapes_are_named_with_both_shapes(tmp_path):
    """A file whose tensors do not fit the model its config builds: a size mismatch names the
    tensor and both shapes (1-D shapes with their comma); another load error names the file."""
    from bnn_pyro.checkpoint import method_state, restore_method
    from bnn_pyro.exceptions import CheckpointError

    model = bp.HiddenLayerBNN(3, [4], 1, bp.Gaussian(0.1))
    X = torch.randn(16, 3)
    model.fit(X, X.sum(-1), epochs=1, progress=False, seed=0)
    state = method_state(model)
    key = next(k for k, v in state["state"].items() if torch.is_tensor(v) and v.dim() == 2)
    bad = {**state, "state": {**state["state"], key: torch.zeros(5, 4)}}
    with pytest.raises(CheckpointError) as info:
        restore_method(bad, bp.HiddenLayerBNN, None, "'m.pt'")
    shape = tuple(state["state"][key].shape)
    assert str(info.value) == (
        f"net does not match the saved architecture: {key} has shape (5, 4) in the file and "
        f"{shape} in net"
    )
    bad = {**state, "state": {**state["state"], key: torch.zeros(7)}}  # a 1-D shape: "(7,)"
    with pytest.raises(CheckpointError) as info:
        restore_method(bad, bp.HiddenLayerBNN, None, "'m.pt'")
    assert str(info.value).endswith(f"{key} has shape (7,) in the file and {shape} in net")
    missing = {**state, "state": {k: v for k, v in state["state"].items() if k != key}}
    with pytest.raises(CheckpointError) as info:
        restore_method(missing, bp.HiddenLayerBNN, None, "'m.pt'")
    assert str(info.value) == (
        "net does not match the saved architecture of 'm.pt': Error(s) in loading state_dict "
        "for HiddenLayerBNN:"
    )


def test_what_is_not_a_method_or_a_class_is_refused_naming_its_type(tmp_path):
    from bnn_pyro.checkpoint import load_method, register_class, save_method

    with pytest.raises(TypeError, match=r"^register_class takes a class, got int$"):
        register_class(3)
    with pytest.raises(TypeError, match=r", got object$"):
        save_method(object(), tmp_path / "m.pt")
    with pytest.raises(TypeError, match=r"^net must be a torch.nn.Module or None, got str$"):
        load_method(tmp_path / "m.pt", net="net")


def test_a_class_not_yet_defined_is_loaded_from_the_one_spec_that_names_it(monkeypatch):
    """``class_named`` loads only the spec whose ``"module:Class"`` names the class (not the
    others, not a second one after it), returns what that registered, and names what no spec
    defines."""
    from bnn_pyro import checkpoint

    loaded = []

    class Spec:
        def __init__(self, cls, name=None):
            self.cls, self.name = cls, name

        def load_class(self):
            loaded.append(self.cls)
            if self.name:
                checkpoint.register_class(type(self.name, (), {}))

    specs = [
        Spec(object),  # a spec holding a class, not a "module:Class" string
        Spec("pkg.other:Other", "Other"),
        Spec("pkg.fresh:Fresh", "Fresh"),
        Spec("pkg.again:Fresh", "Fresh"),
    ]
    monkeypatch.setattr(checkpoint, "discover_specs", lambda: specs)
    monkeypatch.setattr(checkpoint, "_CLASSES", {})
    assert checkpoint.class_named("Fresh").__name__ == "Fresh"
    assert loaded == ["pkg.fresh:Fresh"]
    assert checkpoint.class_named("Fresh").__name__ == "Fresh" and len(loaded) == 1  # known now
    with pytest.raises(ValueError) as info:
        checkpoint.class_named("Nope")
    assert str(info.value) == (
        "no bnn_pyro method class named 'Nope' is defined (known: ['Fresh']); import the module "
        "that defines it before loading"
    )


def test_a_wrapper_file_rebuilds_its_method_first_and_names_the_file_in_its_errors(
    tmp_path, monkeypatch
):
    """A file of an object that wraps a method (a calibrator): the method's own checkpoint
    under ``method``, rebuilt and handed with the wrapper's ``config`` (``{}`` when the file
    has none) to ``from_checkpoint_config``; a broken inner checkpoint is named by the file."""
    from bnn_pyro import checkpoint
    from bnn_pyro.checkpoint import FORMAT_VERSION, load_method, method_state
    from bnn_pyro.exceptions import CheckpointError

    class Wrapper:
        @classmethod
        def from_checkpoint_config(cls, method, config):
            return method, config

    monkeypatch.setitem(checkpoint._CLASSES, "Wrapper", Wrapper)
    inner = method_state(bp.MCDropout(bp.nn.mlp(2, [8], 1, dropout=0.1), likelihood="regression"))
    path = tmp_path / "w.pt"
    source = repr(str(path))

    def load(method, **outer):
        torch.save({"format_version": FORMAT_VERSION, "class": "Wrapper", **outer,
                    "method": method}, path)  # fmt: skip
        return load_method(path, bp.nn.mlp(2, [8], 1, dropout=0.1))

    method, config = load(inner, config={"alpha": 0.1})
    assert type(method).__name__ == "MCDropout" and config == {"alpha": 0.1}
    assert load(inner)[1] == {}
    with pytest.raises(CheckpointError) as info:
        load({"a": 1})
    assert str(info.value).startswith(f"{source} is not a bnn_pyro checkpoint")
    with pytest.raises(CheckpointError) as info:
        load({k: v for k, v in inner.items() if k != "config"})
    assert str(info.value) == f"{source} is not a whole checkpoint: no 'config' entry"
    with pytest.raises(ValueError, match=r"^no bnn_pyro method class named '' is defined"):
        load({k: v for k, v in inner.items() if k != "class"})


def test_a_load_error_without_words_is_named_by_its_type():
    from bnn_pyro.checkpoint import restore_method
    from bnn_pyro.exceptions import CheckpointError

    class Silent:
        @classmethod
        def from_checkpoint_config(cls, net, config):
            return cls()

        def restore_fitted_state(self, fitted):
            pass

        def load_state_dict(self, state):
            raise RuntimeError()

    with pytest.raises(CheckpointError) as info:
        restore_method({"config": {}, "fitted": {}, "state": {}}, Silent, None, "'m.pt'")
    assert str(info.value) == "net does not match the saved architecture of 'm.pt': RuntimeError"


def test_a_resume_file_given_to_load_is_named_as_one(tmp_path):
    from bnn_pyro.exceptions import CheckpointError

    path = tmp_path / "run.pt"
    method = bp.MCDropout(bp.nn.mlp(2, [4], 1, dropout=0.1), likelihood="regression")
    x = torch.randn(16, 2)
    method.fit(x, x.sum(-1, keepdim=True), epochs=2, progress=False, resume=path)
    with pytest.raises(CheckpointError) as info:
        bp.load(path, bp.nn.mlp(2, [4], 1, dropout=0.1))
    assert str(info.value) == (
        f"{str(path)!r} is a resume file (fit(..., resume=path) writes it), not a saved method: "
        "fit with resume=path to continue or finish the run, then method.save(path)"
    )
