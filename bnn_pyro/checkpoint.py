"""Save and load any method as one file: the one checkpoint module of bnn_pyro.

A checkpoint is a dict of tensors, numbers, strings, lists and dicts, so it loads with
``torch.load(weights_only=True)`` (no pickled code runs). It holds:

- ``format_version``: :data:`FORMAT_VERSION`;
- ``class``: the method's class name, looked up among the classes registered with
  :func:`register_class` (every :class:`~bnn_pyro.BaseBayesianMethod` subclass registers itself
  when it is defined, a user's own too);
- ``config``: the constructor settings from the method's ``checkpoint_config()`` (priors and
  likelihoods as their ``config()`` dicts, which name their classes in the same way);
- ``state``: ``method.state_dict()`` on the CPU (device-neutral);
- ``fitted``: the method's ``fitted_state()`` (e.g. the training set size).

What a saved class provides is the :class:`Checkpointable` protocol; this module knows no method
class, so every method (and the contract's ``save``/``load``) builds on it.

An object that wraps a fitted method (a calibrator of :mod:`bnn_pyro.calibration`) is saved with
it: its file holds its own ``class`` and ``config`` and the method's whole checkpoint dict under
``method``; :func:`load_method` rebuilds the method first and hands it to the wrapper's
``from_checkpoint_config(method, config)``.

The file itself is written by :func:`atomic_save` and read by :func:`load_file` (both from
:mod:`bnn_pyro._checkpoint_file`, re-exported here): atomic writes that leave the old file intact
on failure, stale temporary files of crashed saves removed, and the archive's CRC-32 checked on
every load, so a damaged file raises :class:`~bnn_pyro.exceptions.CheckpointError` naming it.
"""

from __future__ import annotations

import os
import re
from typing import Any, Protocol, TypeVar, runtime_checkable

import torch
import torch.nn as nn

from bnn_pyro._checkpoint_file import (
    atomic_save,
    check_path,
    load_file,
    remove_stale_temporaries,
)
from bnn_pyro.exceptions import CheckpointError
from bnn_pyro.spec import discover_specs

__all__ = [
    "FORMAT_VERSION",
    "RESUME_KIND",
    "atomic_save",
    "Checkpointable",
    "check_format",
    "class_named",
    "load_file",
    "load_method",
    "method_state",
    "plain_state",
    "read_checkpoint",
    "register_class",
    "remove_stale_temporaries",
    "restore_method",
    "save_method",
]

#: Version 2: one layout for every method. (Version 1 held only ``VariationalBNN`` and
#: ``HiddenLayerBNN``, each in a layout of its own.)
FORMAT_VERSION = 2

#: The ``kind`` entry of a resume file (:mod:`bnn_pyro.training.resume`), which holds a run in
#: progress, not a method to load.
RESUME_KIND = "bnn_pyro.resume"

_CLASSES: dict[str, type] = {}
_C = TypeVar("_C", bound=type)


@runtime_checkable
class Checkpointable(Protocol):
    """What a class provides to be saved by :func:`save_method` and rebuilt by
    :func:`load_method` (every :class:`~bnn_pyro.BaseBayesianMethod` does).

    - ``checkpoint_config()``: the constructor settings as plain data, without the net;
    - ``from_checkpoint_config(net, config)`` (a classmethod): a fresh, unfitted instance;
    - ``fitted_state()`` / ``restore_fitted_state(fitted)``: what a fitted instance holds beyond
      ``state_dict()``, put back before ``load_state_dict``;
    - ``state_dict()`` / ``load_state_dict(state)``: as a ``torch.nn.Module``'s.
    """

    def checkpoint_config(self) -> dict[str, Any]: ...

    @classmethod
    def from_checkpoint_config(cls, net: nn.Module | None, config: dict[str, Any]) -> Any: ...

    def fitted_state(self) -> dict[str, Any]: ...

    def restore_fitted_state(self, fitted: dict[str, Any]) -> None: ...

    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any) -> Any: ...


def register_class(cls: _C) -> _C:
    """Register ``cls`` under its name, so a checkpoint that names it finds it (returns ``cls``:
    usable as a decorator). A later class of the same name replaces the earlier one.

    Example:
        >>> @register_class
        ... class Mine: ...
        >>> class_named("Mine") is Mine
        True
    """
    if not isinstance(cls, type):
        raise TypeError(f"register_class takes a class, got {type(cls).__name__}")
    _CLASSES[cls.__name__] = cls
    return cls


def class_named(name: str) -> type:
    """The registered class called ``name`` (raises ``ValueError`` if unknown). A built-in
    method's class not imported yet (the package imports its names on first use) is imported
    from its folder's spec.

    Example:
        >>> import bnn_pyro as bp
        >>> class_named("SWAG") is bp.SWAG
        True
    """
    if name not in _CLASSES:
        for spec in discover_specs():
            if isinstance(spec.cls, str) and spec.cls.rsplit(":", 1)[-1] == name:
                spec.load_class()  # defining the class registers it
                break
    try:
        return _CLASSES[name]
    except KeyError:
        raise ValueError(
            f"no bnn_pyro method class named {name!r} is defined (known: {sorted(_CLASSES)}); "
            "import the module that defines it before loading"
        ) from None


def plain_state(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with every tensor detached and on the CPU (a checkpoint is device-neutral),
    the other values as they are.

    Example:
        >>> plain_state({"w": torch.ones(2, requires_grad=True), "n": 3})
        {'w': tensor([1., 1.]), 'n': 3}
    """
    return {k: v.detach().cpu() if isinstance(v, torch.Tensor) else v for k, v in state.items()}


def method_state(method: Checkpointable) -> dict[str, Any]:
    """The checkpoint dict of ``method``: what :func:`save_method` writes (see the module
    docstring), for a caller that keeps it inside a file of its own.

    Example:
        >>> import bnn_pyro as bp
        >>> m = bp.MCDropout(bp.nn.mlp(2, [8], 1, dropout=0.1), likelihood=bp.Gaussian(0.3))
        >>> sorted(method_state(m))
        ['class', 'config', 'fitted', 'format_version', 'state']
    """
    if not isinstance(method, Checkpointable):
        raise TypeError(
            f"method must be a bnn_pyro method (a BaseBayesianMethod), got {type(method).__name__}"
        )
    return {
        "format_version": FORMAT_VERSION,
        "class": type(method).__name__,
        "config": method.checkpoint_config(),
        "fitted": method.fitted_state(),
        "state": plain_state(method.state_dict()),
    }


def save_method(method: Checkpointable, path: str | os.PathLike) -> None:
    """Write ``method`` to ``path`` (see the module docstring for the contents).

    Args:
        method: a fitted method.
        path: the file to write; its folder must exist.

    Example:
        >>> import os, tempfile, bnn_pyro as bp
        >>> m = bp.MCDropout(bp.nn.mlp(2, [8], 1, dropout=0.1), likelihood=bp.Gaussian(0.3))
        >>> path = os.path.join(tempfile.mkdtemp(), "m.pt"); save_method(m, path)
        >>> read_checkpoint(path)["class"]
        'MCDropout'
    """
    atomic_save(method_state(method), path)


def check_format(state: Any, source: str) -> dict[str, Any]:
    """``state`` itself, checked to be a bnn_pyro checkpoint dict of the format this version
    reads (:data:`FORMAT_VERSION`); ``source`` names it in the errors (e.g. a quoted path).

    Raises:
        CheckpointError: not a bnn_pyro checkpoint, or another format version.

    Example:
        >>> check_format({"format_version": FORMAT_VERSION, "a": 1}, "the dict")["a"]
        1
        >>> check_format({"a": 1}, "the dict")
        Traceback (most recent call last):
          ...
        bnn_pyro.exceptions.CheckpointError: the dict is not a bnn_pyro checkpoint ...
    """
    if not isinstance(state, dict) or "format_version" not in state:
        what = f"a {type(state).__name__}" if not isinstance(state, dict) else "a dict"
        raise CheckpointError(
            f"{source} is not a bnn_pyro checkpoint ({what} without a 'format_version' entry)"
        )
    version = state["format_version"]
    if not isinstance(version, int) or isinstance(version, bool):
        raise CheckpointError(
            f"{source} is not a bnn_pyro checkpoint (its format_version is {version!r})"
        )
    if version > FORMAT_VERSION:
        raise CheckpointError(
            f"{source} has format version {version}; this bnn_pyro reads {FORMAT_VERSION}: "
            "upgrade bnn_pyro"
        )
    if version < FORMAT_VERSION:
        raise CheckpointError(
            f"{source} has format version {version}, written by an older bnn_pyro (this one "
            f"reads {FORMAT_VERSION}): save the model again with the version that wrote it "
            "installed, or retrain"
        )
    return state


def read_checkpoint(path: str | os.PathLike, map_location: Any = None) -> dict[str, Any]:
    """The checkpoint dict at ``path`` (:func:`load_file`: integrity checked, then
    ``torch.load(weights_only=True)``), checked to be a bnn_pyro checkpoint of the format this
    version reads.

    Raises:
        FileNotFoundError: no file at ``path``.
        CheckpointError: a damaged file, not a bnn_pyro checkpoint, or another format version.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "x.pt"); atomic_save({"a": 1}, path)
        >>> read_checkpoint(path)
        Traceback (most recent call last):
          ...
        bnn_pyro.exceptions.CheckpointError: ... is not a bnn_pyro checkpoint ...
    """
    state = load_file(path, map_location)
    return check_format(state, repr(os.fspath(path)))


def _shape(shape: Any) -> str:
    return "(" + ", ".join(str(int(n)) for n in shape) + ("," if len(shape) == 1 else "") + ")"


def _mismatch(name: str, saved: Any, given: Any) -> CheckpointError:
    return CheckpointError(
        f"net does not match the saved architecture: {name} has shape {_shape(saved)} in the "
        f"file and {_shape(given)} in net"
    )


def _check_net_shapes(net: nn.Module, saved: dict[str, Any]) -> None:
    """Compare each parameter and buffer of ``net`` with the saved tensors whose key ends in its
    name (methods prefix it, e.g. ``model.0.weight``, or ``guide.locs.net__0__weight``)."""
    shapes = {k.replace("__", "."): tuple(v.shape) for k, v in saved.items() if torch.is_tensor(v)}
    for name, tensor in [*net.named_parameters(), *net.named_buffers()]:
        found = [s for k, s in shapes.items() if k == name or k.endswith("." + name)]
        if found and tuple(tensor.shape) not in found:
            raise _mismatch(name, found[0], tensor.shape)


_SIZE_MISMATCH = re.compile(
    r"size mismatch for (\S+): copying a param with shape torch\.Size\(\[([^\]]*)\]\) from "
    r"checkpoint, the shape in current model is torch\.Size\(\[([^\]]*)\]\)"
)


def load_method(
    path: str | os.PathLike,
    net: nn.Module | None = None,
    map_location: Any = None,
    expected: type | None = None,
) -> Any:
    """Rebuild the method saved at ``path`` around ``net``.

    Args:
        path: a file written by :func:`save_method`.
        net: a fresh instance of the saved architecture (``None`` for methods that build their
            own layers).
        map_location: as in ``torch.load``.
        expected: if given, the saved class must be this class or a subclass.

    Returns:
        The method with its saved parameters and fitted state.

    Raises:
        FileNotFoundError: no file at ``path``.
        CheckpointError: a damaged file, not a checkpoint of ``expected``, or a ``net`` whose
            layers differ from the saved ones (the message names the layer and both shapes;
            ``net`` is left unchanged).

    Example:
        >>> import os, tempfile, bnn_pyro as bp
        >>> m = bp.MCDropout(bp.nn.mlp(2, [8], 1, dropout=0.1), likelihood=bp.Gaussian(0.3))
        >>> path = os.path.join(tempfile.mkdtemp(), "m.pt"); m.save(path)
        >>> load_method(path, bp.nn.mlp(2, [8], 1, dropout=0.1)).likelihood
        Gaussian(scale=0.3)
        >>> load_method(path, bp.nn.mlp(2, [5], 1, dropout=0.1))
        Traceback (most recent call last):
          ...
        bnn_pyro.exceptions.CheckpointError: ... has shape (8, 2) in the file and (5, 2) in net
    """
    source = repr(check_path(path))
    if net is not None and not isinstance(net, nn.Module):
        raise TypeError(f"net must be a torch.nn.Module or None, got {type(net).__name__}")
    state = read_checkpoint(path, map_location)
    if state.get("kind") == RESUME_KIND:
        raise CheckpointError(
            f"{source} is a resume file (fit(..., resume=path) writes it), not a saved method: "
            "fit with resume=path to continue or finish the run, then method.save(path)"
        )
    cls = class_named(state["class"])
    if expected is not None and not issubclass(cls, expected):
        raise CheckpointError(f"{source} holds a {state['class']}, not a {expected.__name__}")
    if "method" in state:  # an object saved with the method it wraps (a calibrator)
        inner = check_format(state["method"], source)
        method = restore_method(inner, class_named(inner.get("class", "")), net, source)
        return cls.from_checkpoint_config(method, state.get("config", {}))
    return restore_method(state, cls, net, source)


def restore_method(state: dict[str, Any], cls: type, net: nn.Module | None, source: str) -> Any:
    """The method of class ``cls`` rebuilt from its checkpoint dict ``state`` (what
    :func:`method_state` made) around ``net``; ``source`` names the file in errors.

    Raises:
        CheckpointError: a checkpoint without its entries, or a ``net`` whose layers differ
            from the saved ones.

    Example:
        >>> import bnn_pyro as bp
        >>> m = bp.MCDropout(bp.nn.mlp(2, [8], 1, dropout=0.1), likelihood=bp.Gaussian(0.3))
        >>> net = bp.nn.mlp(2, [8], 1, dropout=0.1)
        >>> restore_method(method_state(m), bp.MCDropout, net, "m").likelihood
        Gaussian(scale=0.3)
    """
    missing = [k for k in ("config", "fitted", "state") if not isinstance(state.get(k), dict)]
    if missing:
        raise CheckpointError(f"{source} is not a whole checkpoint: no {missing[0]!r} entry")
    if net is not None:
        _check_net_shapes(net, state["state"])
    try:
        method = cls.from_checkpoint_config(net, state["config"])
        method.restore_fitted_state(state["fitted"])
        method.load_state_dict(state["state"])
    except RuntimeError as err:
        sizes = _SIZE_MISMATCH.search(str(err))
        if sizes:
            saved, given = (
                tuple(int(n) for n in g.split(",") if n.strip()) for g in sizes.groups()[1:]
            )
            raise _mismatch(sizes[1], saved, given) from None
        text = str(err).strip().splitlines()
        raise CheckpointError(
            f"net does not match the saved architecture of {source}: "
            + (text[0] if text else type(err).__name__)
        ) from None
    return method
