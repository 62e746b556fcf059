"""Resumable runs: a fit interrupted (an exception, or a real ``kill -9`` of a child process) and
continued with ``fit(..., resume=path)`` ends bit-identical to the run never interrupted."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

import bnn_pyro as bp
import bnn_pyro.training.resume as resume_module
from tests.reliability.refusal import assert_refused

EPOCHS = 20
torch.manual_seed(0)
X = torch.randn(48, 3)
Y = X.sum(-1, keepdim=True) + 0.1 * torch.randn(48, 1)
X_TEST = torch.randn(10, 3)

# name -> (factory, predict options); tiny nets, so that 20 epochs take well under a second
METHODS = {
    "VariationalBNN": (
        lambda: bp.VariationalBNN(bp.nn.mlp(3, [8], 1), bp.Gaussian(0.1)),
        {"num_samples": 8, "seed": 0},
    ),
    "MCDropout": (
        lambda: bp.MCDropout(bp.nn.mlp(3, [8], 1, dropout=0.2), likelihood="regression"),
        {"seed": 0},
    ),
    "DeepEnsemble": (
        lambda: bp.DeepEnsemble(lambda: bp.nn.mlp(3, [8], 1), 3, likelihood="regression"),
        {},
    ),
    "SWAG": (lambda: bp.SWAG(bp.nn.mlp(3, [8], 1), likelihood="regression"), {"seed": 0}),
    "VariationalBayesNN": (
        lambda: bp.VariationalBayesNN(3, [8], 1, likelihood="regression"),
        {"seed": 0},
    ),
    "HiddenLayerBNN": (lambda: bp.HiddenLayerBNN(3, [8], 1, bp.Gaussian(0.1)), {"seed": 0}),
    "LaplaceApproximation": (
        lambda: bp.LaplaceApproximation(bp.nn.mlp(3, [8], 1), "regression"),
        {"seed": 0},
    ),
}


class Interrupted(Exception):
    """What the in-process tests raise to stop a fit, as a crash would."""


class EpochCounter:
    """Callback: counts the epochs a fit runs (all ensemble members together); raises
    :class:`Interrupted` at the ``stop_at``-th (1-based) before that epoch is saved."""

    def __init__(self, stop_at: int | None = None) -> None:
        self.calls, self.stop_at = 0, stop_at

    def __call__(self, method, epoch, history) -> None:
        self.calls += 1
        if self.calls == self.stop_at:
            raise Interrupted


@pytest.fixture(autouse=True)
def save_every_epoch(monkeypatch):
    # a file after every epoch, so that the resumed run starts exactly where it was stopped
    monkeypatch.setattr(resume_module, "SAVE_SECONDS", 0.0)


def fitted(name: str, weights_seed: int, callbacks=(), **options):
    """A method built under seed ``weights_seed`` and fitted; also its predictions and history."""
    make, predict_options = METHODS[name]
    torch.manual_seed(weights_seed)
    method = make()
    torch.manual_seed(123)  # the global stream that a fit with seed=None draws from
    kw = {"epochs": EPOCHS, "batch_size": 16, "progress": False, "seed": 0, **options}
    history = method.fit(X, Y, callbacks=list(callbacks), **kw)
    return method, method.predict(X_TEST, **predict_options)[0], history


def interrupted_then_resumed(name: str, path: Path, stop_at: int, **options):
    """Fit with ``resume=path``, stopped at epoch ``stop_at``; then a *new* method (other initial
    weights: a run from scratch would differ) resumed from the file."""
    with pytest.raises(Interrupted):
        fitted(name, 1, [EpochCounter(stop_at)], resume=path, **options)
    counter = EpochCounter()
    _, pred, history = fitted(name, 2, [counter], resume=path, **options)
    return pred, history, counter.calls


CASES = [
    ("VariationalBNN", {}),
    # the global RNG's state is restored too ("constant": with the SVI default, cosine, the
    # loss of the first resumed step differs by one float32 ulp -- that step runs Pyro's own
    # Trace_ELBO, the others the fast path: same gradients, another summation order)
    ("VariationalBNN", {"seed": None, "lr_schedule": "constant"}),
    ("VariationalBNN", {"lr_schedule": "cosine", "average": 0.75}),
    ("VariationalBNN", {"init": "map", "map_epochs": 5}),  # the MAP phase runs only at the start
    ("MCDropout", {}),
    ("MCDropout", {"seed": None}),
    ("MCDropout", {"lr_schedule": "cosine", "average": 0.75}),
    ("MCDropout", {"lr_schedule": functools.partial(torch.optim.lr_scheduler.StepLR, step_size=5)}),
    ("DeepEnsemble", {}),
    ("DeepEnsemble", {"seed": None}),
    ("DeepEnsemble", {"stacked": False}),  # the members one after another
    ("SWAG", {}),
    ("VariationalBayesNN", {}),  # its learned noise is a tensor outside the module state
    ("HiddenLayerBNN", {}),
    ("LaplaceApproximation", {}),  # the MAP phase
]


@pytest.mark.parametrize(("name", "options"), CASES, ids=lambda c: str(c))
def test_interrupted_and_resumed_run_is_bit_identical(name, options, tmp_path):
    _, full, full_history = fitted(name, 1, **options)
    # an ensemble's members train stacked (one pass of epochs for all) unless stacked=False
    members = 3 if name == "DeepEnsemble" and options.get("stacked") is False else 1
    stop_at = 9 + (EPOCHS if members > 1 else 0)  # epoch 8 (of member 1 in an ensemble)
    pred, history, ran = interrupted_then_resumed(name, tmp_path / "run.pt", stop_at, **options)
    assert ran == members * EPOCHS - (stop_at - 1)  # went on from the file: 8 epochs were saved
    assert torch.equal(pred, full)
    assert history["loss"] == full_history["loss"]


@pytest.mark.parametrize("name", ["VariationalBNN", "MCDropout"])
def test_early_stopping_state_is_resumed(name, tmp_path):
    # min_delta=1e9: no epoch improves on the first, so the run stops after epoch 3; a resumed
    # EarlyStopping that forgot its best epoch would run to epoch 5
    stop = lambda: bp.EarlyStopping("loss", patience=3, min_delta=1e9, restore_best=True)  # noqa: E731
    _, full, full_history = fitted(name, 1, [stop()])
    with pytest.raises(Interrupted):
        fitted(name, 1, [EpochCounter(3), stop()], resume=tmp_path / "run.pt")
    _, pred, history = fitted(name, 2, [stop()], resume=tmp_path / "run.pt")
    assert len(history["loss"]) == len(full_history["loss"]) == 4
    assert torch.equal(pred, full)


@pytest.mark.parametrize("name", ["VariationalBNN", "DeepEnsemble"])
def test_finished_file_returns_its_run_without_training(name, tmp_path):
    _, full, full_history = fitted(name, 1, resume=tmp_path / "run.pt")
    counter = EpochCounter()
    _, pred, history = fitted(name, 2, [counter], resume=tmp_path / "run.pt")
    assert counter.calls == 0
    assert history["loss"] == full_history["loss"]
    assert torch.equal(pred, full)


@pytest.mark.parametrize("name", ["VariationalBNN", "MCDropout"])
def test_finished_file_goes_on_to_more_epochs(name, tmp_path):
    # a constant learning rate, one net: 12 epochs, then resumed to 20 == 20 epochs in one go
    # (a schedule over the epochs, the SVI default among them, differs with their number)
    constant = {"lr_schedule": "constant"}
    _, full, full_history = fitted(name, 1, **constant)
    fitted(name, 1, resume=tmp_path / "run.pt", epochs=12, **constant)
    counter = EpochCounter()
    _, pred, history = fitted(name, 2, [counter], resume=tmp_path / "run.pt", **constant)
    assert counter.calls == EPOCHS - 12
    assert history["loss"] == full_history["loss"]
    assert torch.equal(pred, full)


# ---------------------------------------------------------------------- a real kill -9
CHILD = """
import sys, time, torch
torch.set_num_threads(1)
sys.path.insert(0, {root!r})
import bnn_pyro as bp, bnn_pyro.training.resume as resume_module
from tests.reliability.test_resume import METHODS, X, Y

resume_module.SAVE_SECONDS = 0.0
name, path, marker = sys.argv[1:]
make = METHODS[name][0]
calls, armed = [0], [0]

def count(m, epoch, history):
    calls[0] += 1
    if calls[0] == {arm_at}:
        armed[0] = 1

def mid_epoch(module, inputs):  # the 2nd step after arming: write the marker, wait for the kill
    if armed[0]:
        armed[0] += 1
        if armed[0] == 3:
            open(marker, "w").close()
            time.sleep(600)

torch.manual_seed(1)  # the initial weights of the run it is killed in (inside epoch 8)
method = make()
for module in method.modules():
    if isinstance(module, torch.nn.Linear):
        module.register_forward_pre_hook(mid_epoch)
method.fit(X, Y, epochs={epochs}, batch_size=16, progress=False, seed=0, callbacks=[count],
           resume=path)
"""


def _child(script: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("name", ["VariationalBNN", "DeepEnsemble"])
def test_kill_9_mid_epoch_then_resume_is_bit_identical(name, tmp_path):
    root = str(Path(__file__).resolve().parents[2])
    members = 3 if name == "DeepEnsemble" else 1
    arm_at = 8 + (EPOCHS if members > 1 else 0)  # killed inside epoch 8 (of member 1)
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(CHILD).format(root=root, arm_at=arm_at, epochs=EPOCHS))
    path, marker = str(tmp_path / "run.pt"), str(tmp_path / "marker")

    victim = _child(script, name, path, marker)
    deadline = time.monotonic() + 240
    while not os.path.exists(marker):
        if victim.poll() is not None:
            pytest.fail(f"the child ended before the kill: {victim.communicate()[1]}")
        if time.monotonic() > deadline:
            victim.kill()
            victim.communicate()
            pytest.fail("the child never reached epoch 8")
        time.sleep(0.02)
    os.kill(victim.pid, signal.SIGKILL)
    victim.communicate(timeout=60)
    assert victim.returncode == -signal.SIGKILL
    assert os.path.exists(path)

    # resumed here, in another process than the killed one (a third process, as this test ran
    # before, only repeated the imports): other initial weights, so only a resume gives the
    # killed run's numbers; one torch thread here as in the child (the root conftest.py)
    resumed, full = _hooked_run(name, 2, path), _hooked_run(name, 1, None)
    assert full["calls"] == members * EPOCHS
    assert resumed["calls"] == members * EPOCHS - arm_at  # went on from the last saved epoch
    assert torch.equal(resumed["pred"], full["pred"])


def _hooked_run(name: str, init: int, path: str | None) -> dict:
    """The child's fit in this process: a new method (initial weights from ``init``), its
    ``Linear`` layers hooked as the child's are (a hooked net runs its own modules, not a
    batched twin of them, ``bnn_pyro.nn.batched.has_hooks``: float32 sums in another order, and
    a resume mixing the two differed in the last bit), fitted with ``resume=path``."""
    make, predict_options = METHODS[name]
    torch.manual_seed(init)
    method = make()
    for module in method.modules():
        if isinstance(module, torch.nn.Linear):
            module.register_forward_pre_hook(lambda module, inputs: None)
    counter = EpochCounter()
    kw = {"epochs": EPOCHS, "batch_size": 16, "progress": False, "seed": 0}
    method.fit(X, Y, callbacks=[counter], resume=path, **kw)
    return {"pred": method.predict(X_TEST, **predict_options)[0], "calls": counter.calls}


# ---------------------------------------------------------------------- refused up front
def _fresh(name: str):
    torch.manual_seed(1)
    return METHODS[name][0]()


def _fit_call(method, path, **options):
    kw = {"epochs": EPOCHS, "batch_size": 16, "progress": False, "seed": 0, **options}
    return lambda: method.fit(X, Y, resume=path, **kw)


def _written(tmp_path: Path, name: str, **options) -> Path:
    path = tmp_path / f"{name}.pt"
    fitted(name, 1, resume=path, **options)
    return path


def _other_width_dropout():
    return bp.MCDropout(bp.nn.mlp(3, [16], 1, dropout=0.2), likelihood="regression")


REFUSALS = {
    # name: (method, path from tmp_path, extra fit options, exception, words named)
    "folder missing": (
        "VariationalBNN",
        lambda tmp: tmp / "no" / "such" / "run.pt",
        {},
        FileNotFoundError,
        ("resume", "does not exist"),
    ),
    "not a path": ("MCDropout", lambda tmp: 42, {}, TypeError, ("resume", "file path")),
    "a folder": ("MCDropout", lambda tmp: tmp, {}, IsADirectoryError, ("resume", "folder")),
    "another method's file": (
        "VariationalBNN",
        lambda tmp: _written(tmp, "MCDropout"),
        {},
        ValueError,
        ("resume", "MCDropout"),
    ),
    "a model checkpoint": (
        "MCDropout",
        lambda tmp: (_fresh("MCDropout").save(tmp / "m.pt"), tmp / "m.pt")[1],
        {},
        ValueError,
        ("resume", "not a resume file"),
    ),
    "garbage bytes": (
        "VariationalBNN",
        lambda tmp: (tmp.joinpath("g.pt").write_bytes(b"\x00garbage" * 9), tmp / "g.pt")[1],
        {},
        ValueError,
        ("resume", "cannot be read"),
    ),
    "other lr": (
        "VariationalBNN",
        lambda tmp: _written(tmp, "VariationalBNN"),
        {"lr": 0.5},
        ValueError,
        ("resume", "lr"),
    ),
    "other epochs, ensemble": (
        "DeepEnsemble",
        lambda tmp: _written(tmp, "DeepEnsemble"),
        {"epochs": EPOCHS + 5},
        ValueError,
        ("resume", "epochs"),
    ),
    "fewer epochs than done": (
        "MCDropout",
        lambda tmp: _written(tmp, "MCDropout"),
        {"epochs": EPOCHS - 5},
        ValueError,
        ("resume", "epochs"),
    ),
    "other epochs, cosine schedule": (
        "MCDropout",
        lambda tmp: _written(tmp, "MCDropout", lr_schedule="cosine"),
        {"epochs": EPOCHS + 5, "lr_schedule": "cosine"},
        ValueError,
        ("resume", "epochs"),
    ),
    "other architecture": (
        "other width",
        lambda tmp: _written(tmp, "MCDropout"),
        {},
        ValueError,
        ("resume", "architecture", "shape"),
    ),
    "callbacks dropped": (
        "MCDropout",
        lambda tmp: _written(tmp, "MCDropout", callbacks=[bp.EarlyStopping(patience=50)]),
        {},
        ValueError,
        ("resume", "callback"),
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_bad_resume_is_refused_and_the_method_unchanged(case, tmp_path):
    name, make_path, options, exc, words = REFUSALS[case]
    path = make_path(tmp_path)
    method = _other_width_dropout() if name == "other width" else _fresh(name)
    assert_refused(_fit_call(method, path, **options), exc, *words, obj=method)
