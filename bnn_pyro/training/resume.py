"""Resumable runs: ``fit(..., resume=path)`` continues a killed run bit for bit.

A run with ``resume=path`` writes a resume file at the end of its epochs (atomically, through
:func:`bnn_pyro.checkpoint.atomic_save`; at most one write per epoch and one every
:data:`SAVE_SECONDS`, the last epoch always). It holds everything the rest of the run depends
on: the method's tensors (its ``state_dict``), the optimizer, the learning rate scheduler and
the iterate average, the history so far, the epoch, the random streams
(torch's global CPU and CUDA generators, which Pyro draws from, the minibatch order's own
generator, Python's ``random`` and NumPy's), the state of the :class:`EarlyStopping` callbacks
(or of any callback with ``state_dict``/``load_state_dict``) and the method's own extra tensors
(``VariationalBayesNN``'s learned noise).

``fit(..., resume=path)`` then means:

- ``path`` does not exist: train from scratch, writing the file as it goes;
- it holds an unfinished run: restore all of it and go on from its last saved epoch, to the
  same numbers as the run that was never interrupted (same data, same seed, same settings);
- it holds a finished run (all epochs done, or stopped by a callback): restore its final state
  and return its history without training. Where only the number of epochs differs and the run
  allows it (one net, a constant learning rate, no iterate averaging), ``epochs`` may be larger
  than the file's: training goes on to the new count, as a run of that many epochs would have.

A file from another method, architecture or training settings raises a ``ValueError`` naming
``resume``: continuing it could not give the run that was asked for. Ensembles train their
members one after another; their file also holds the finished members' histories, and a resumed
fit picks up at the member and epoch where the run stopped.
"""

from __future__ import annotations

import functools
import os
import random
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

from bnn_pyro.checkpoint import (
    FORMAT_VERSION,
    RESUME_KIND,
    atomic_save,
    plain_state,
    read_checkpoint,
)
from bnn_pyro.training.callbacks import EarlyStopping, History

__all__ = ["SAVE_SECONDS", "SVI_SETTINGS", "Resume", "ResumePath", "describe", "open_resume"]

ResumePath = str | os.PathLike | None

#: The least time between two writes of a resume file (the last epoch is always written).
SAVE_SECONDS = 1.0

#: The ``SVIModel.fit`` arguments that fix a run's trajectory (compared on resume).
SVI_SETTINGS = (
    "epochs", "batch_size", "lr", "optimizer", "elbo", "num_particles", "kl_weight", "shuffle",
    "seed", "lr_schedule", "average", "init", "map_epochs",
)  # fmt: skip

_EARLY_STOPPING = ("best", "best_epoch", "_best_state")


def describe(value: Any) -> Any:
    """A setting as plain data, for comparing a run's settings with a resume file's.

    Example:
        >>> describe(torch.optim.SGD), describe(0.1), describe("cosine")
        ('torch.optim.sgd.SGD', 0.1, 'cosine')
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, torch.device):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [describe(v) for v in value]
    if isinstance(value, functools.partial):
        return [describe(value.func), describe(value.args), sorted(value.keywords.items())]
    name = getattr(value, "__qualname__", None)
    if name is not None:
        return f"{getattr(value, '__module__', '')}.{name}"
    return type(value).__qualname__


def _rng_state(device: torch.device, generator: torch.Generator | None) -> dict[str, Any]:
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    if generator is not None:
        state["batches"] = generator.get_state()
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy comes with torch
        return state
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    state["numpy"] = [name, torch.from_numpy(keys.astype("int64")), pos, has_gauss, gauss]
    return state


def _set_rng_state(state: dict[str, Any], device: torch.device, generator: Any) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)
    if "batches" in state and generator is not None:
        generator.set_state(state["batches"])
    if "numpy" in state:
        import numpy as np

        name, keys, pos, has_gauss, gauss = state["numpy"]
        np.random.set_state((name, keys.numpy(), pos, has_gauss, gauss))


def _device(module: torch.nn.Module) -> torch.device:
    for tensor in (*module.parameters(), *module.buffers()):
        return tensor.device
    return torch.device("cpu")


def _checked_path(path: Any) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"resume must be a file path (str or os.PathLike), got {path!r}")
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(
            f"resume: the folder of {path!r} does not exist; create it first (the resume file "
            "is written there at the end of each epoch)"
        )
    if os.path.isdir(path):
        raise IsADirectoryError(f"resume must be a file path, got the folder {path!r}")
    return path


class Resume:
    """The resume file of one ``fit`` (see the module docstring); the one loop,
    :func:`bnn_pyro.training.train`, calls :meth:`begin` before its first epoch and
    :meth:`end_epoch` after each.

    Args:
        path: the resume file (its folder must exist).
        owner: the method being fitted (its whole state is saved: every ensemble member).
        settings: the settings that fix the run's trajectory, compared with the file's.
        callbacks: the user's callbacks (their state is saved).
        extendable: the run may go on to more epochs than the file's (see the module docstring).

    Example:
        >>> import os, tempfile, bnn_pyro as bp
        >>> path = os.path.join(tempfile.mkdtemp(), "run.pt")
        >>> X = torch.randn(16, 2); y = X.sum(-1)
        >>> bnn = bp.VariationalBNN(bp.nn.mlp(2, [], 1), bp.Gaussian(0.1))
        >>> h = bnn.fit(X, y, epochs=3, progress=False, seed=0, resume=path)
        >>> again = bnn.fit(X, y, epochs=3, progress=False, seed=0, resume=path)  # finished
        >>> again["loss"] == h["loss"]
        True
    """

    def __init__(
        self,
        path: str | os.PathLike,
        owner: torch.nn.Module,
        settings: Mapping[str, Any],
        callbacks: Iterable[Any] = (),
        extendable: bool = False,
    ) -> None:
        self.path = _checked_path(path)
        self.owner, self.callbacks = owner, list(callbacks)
        self.settings = {k: describe(v) for k, v in settings.items()}
        self.extendable = extendable
        self.extra: dict[str, torch.Tensor] = {}  # tensors trained besides owner's state
        self.stage = -1  # the index of the train() call under way (ensemble members)
        self.done: list[dict[str, list]] = []  # the finished stages' histories
        self.saved = self._read() if os.path.exists(self.path) else None
        self._live: dict[str, Any] = {}
        self._last_save = -float("inf")

    # ------------------------------------------------------------------ reading
    def _read(self) -> dict[str, Any]:
        try:
            saved = read_checkpoint(self.path)
        except Exception as err:  # noqa: BLE001 - any unreadable file is the same user error
            raise ValueError(
                f"resume: {self.path!r} cannot be read as a resume file ({err}); delete it to "
                "start the run over"
            ) from None
        if saved.get("kind") != RESUME_KIND:
            raise ValueError(
                f"resume: {self.path!r} is a bnn_pyro checkpoint, not a resume file; pass a new "
                "path to start a resumable run"
            )
        cls = type(self.owner).__name__
        if saved["class"] != cls:
            raise ValueError(
                f"resume: {self.path!r} holds a {saved['class']} run, not a {cls} run; pass "
                "another path to start over"
            )
        theirs, ours = dict(saved["settings"]), dict(self.settings)
        if self.extendable and saved["extendable"]:  # only the number of epochs may differ
            theirs.pop("epochs", None)
            epochs = ours.pop("epochs", 0)
            if not saved["stopped"] and saved["epoch"] > epochs:
                raise ValueError(
                    f"resume: {self.path!r} has {saved['epoch']} epochs done, more than the "
                    f"epochs={epochs} of this fit"
                )
        for key in sorted(set(theirs) | set(ours)):
            if theirs.get(key) != ours.get(key):
                raise ValueError(
                    f"resume: {self.path!r} was written by a run with {key}="
                    f"{theirs.get(key)!r}, this fit has {key}={ours.get(key)!r}; continuing "
                    "it would not give the run asked for: pass the same settings, or another "
                    "path to start over"
                )
        return saved

    # ------------------------------------------------------------------ the loop's hooks
    def begin(
        self,
        module: torch.nn.Module,
        step: Any,
        batches: Callable[[], Any],
        set_epoch: Any,
        averager: Any,
        epochs: int,
    ) -> tuple[int, History, bool]:
        """Before a ``train`` call's first epoch: ``(first epoch, history, skip)``. ``skip``:
        a stage the file has finished (an earlier ensemble member): return its history."""
        if self.stage >= 0:
            self.done.append({k: list(v) for k, v in self._live["history"].items()})
        self.stage += 1
        history = History()
        generator = getattr(batches, "generator", None)
        self._live = dict(
            module=module, step=step, scheduler=getattr(set_epoch, "scheduler", None),
            averager=averager, generator=generator, history=history, epochs=epochs,
        )  # fmt: skip
        saved = self.saved
        if saved is None or self.stage > saved["stage"]:
            return 0, history, False
        if self.stage < saved["stage"]:
            history.update({k: list(v) for k, v in saved["done"][self.stage].items()})
            return epochs, history, True
        self._restore(saved, history)
        return (epochs if saved["stopped"] else saved["epoch"]), history, False

    def _restore(self, saved: dict[str, Any], history: History) -> None:
        live = self._live
        _check_architecture(self.path, saved["method"]["state"], self.owner.state_dict())
        stateful = [cb for cb in self.callbacks if _callback_state(cb) is not None]
        if len(stateful) != len(saved["callbacks"]) or set(self.extra) != set(saved["extra"]):
            raise ValueError(
                f"resume: {self.path!r} holds the state of {len(saved['callbacks'])} callback(s) "
                f"(EarlyStopping, ...) and of {sorted(saved['extra'])}, this fit has "
                f"{len(stateful)} and {sorted(self.extra)}: pass the same callbacks and settings"
            )
        self.owner.load_state_dict(saved["method"]["state"])
        with torch.no_grad():
            for name, tensor in self.extra.items():
                tensor.copy_(saved["extra"][name])
        live["step"].load_state_dict(saved["step"])
        if live["scheduler"] is not None:
            live["scheduler"].load_state_dict(saved["scheduler"])
        if live["averager"] is not None and saved["average"] is not None:
            live["averager"].count = saved["average"]["count"]
            means = saved["average"]["means"]
            device = _device(live["module"])
            live["averager"].means = None if means is None else [m.to(device) for m in means]
        for cb, state in zip(stateful, saved["callbacks"], strict=True):
            _load_callback(cb, state)
        history.update({k: list(v) for k, v in saved["history"].items()})
        self.done = [dict(h) for h in saved["done"]]
        _set_rng_state(saved["rng"], _device(self.owner), live["generator"])

    def end_epoch(self, epoch: int, stopped: bool) -> None:
        """After epoch ``epoch`` (0-based) and its callbacks: write the file if it is due."""
        live = self._live
        final = stopped or epoch + 1 >= live["epochs"]
        if not final and time.perf_counter() - self._last_save < SAVE_SECONDS:
            return
        averager = live["averager"]
        state = {
            "format_version": FORMAT_VERSION,
            "kind": RESUME_KIND,
            "class": type(self.owner).__name__,
            "settings": self.settings,
            "extendable": self.extendable,
            "stage": self.stage,
            "epoch": epoch + 1,
            "stopped": stopped,
            "done": self.done,
            "history": {k: list(v) for k, v in live["history"].items()},
            "method": {"state": plain_state(self.owner.state_dict())},
            "extra": {k: v.detach().cpu().clone() for k, v in self.extra.items()},
            "step": live["step"].state_dict(),
            "scheduler": None if live["scheduler"] is None else live["scheduler"].state_dict(),
            "average": None
            if averager is None
            else {"count": averager.count, "means": averager.means},
            "callbacks": [s for s in map(_callback_state, self.callbacks) if s is not None],
            "rng": _rng_state(_device(self.owner), live["generator"]),
        }
        atomic_save(state, self.path)
        self._last_save = time.perf_counter()


def _check_architecture(path: str, theirs: Mapping[str, Any], ours: Mapping[str, Any]) -> None:
    """Refuse a saved state of other tensors than ``ours`` before anything is copied."""
    for key in sorted(set(theirs) | set(ours)):
        a, b = theirs.get(key), ours.get(key)
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape:
            continue
        if key.endswith("_extra_state") and key in theirs and key in ours:
            continue
        raise ValueError(
            f"resume: {path!r} was written for another architecture: {key!r} is "
            f"{_shape(a)} there and {_shape(b)} here; pass the same net, or another path"
        )


def _shape(value: Any) -> str:
    if value is None:
        return "absent"
    return f"of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else "a value"


def _callback_state(cb: Any) -> Any:
    if callable(getattr(cb, "state_dict", None)):
        return cb.state_dict()
    if isinstance(cb, EarlyStopping):
        return {k: getattr(cb, k) for k in _EARLY_STOPPING}
    return None


def _load_callback(cb: Any, state: Any) -> None:
    if callable(getattr(cb, "load_state_dict", None)):
        cb.load_state_dict(state)
    elif isinstance(cb, EarlyStopping):
        for key in _EARLY_STOPPING:
            setattr(cb, key, state[key])


def open_resume(
    path: ResumePath,
    owner: torch.nn.Module,
    callbacks: Iterable[Any],
    settings: Mapping[str, Any],
    keys: Iterable[str] | None = None,
    extendable: bool | None = None,
) -> Resume | None:
    """The :class:`Resume` of a ``fit`` (``None`` when ``path`` is ``None``), checked against
    the file before any work.

    Args:
        path: ``fit``'s ``resume`` argument.
        owner: the method being fitted.
        callbacks: the user's callbacks.
        settings: the run's settings (``keys`` picks the ones that fix its trajectory).
        keys: the names to keep from ``settings`` (default: all).
        extendable: may the run go on to more epochs? Default: with a constant learning rate
            and no iterate averaging.

    Example:
        >>> open_resume(None, torch.nn.Linear(1, 1), [], {}) is None
        True
        >>> open_resume("/no/such/folder/run.pt", torch.nn.Linear(1, 1), [], {})
        Traceback (most recent call last):
          ...
        FileNotFoundError: resume: the folder of '/no/such/folder/run.pt' does not exist; ...
    """
    if path is None:
        return None
    chosen = {k: settings[k] for k in keys} if keys is not None else dict(settings)
    if extendable is None:
        extendable = chosen.get("lr_schedule") in (None, "constant") and (
            chosen.get("average") is None
        )
    return Resume(path, owner, chosen, callbacks, extendable)
