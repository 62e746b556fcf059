"""Save and load any method as one file: the one checkpoint module of bnn_pyro.

A checkpoint is a dict of tensors, numbers, strings, lists and dicts, so it loads with
``torch.load(weights_only=True)`` (no pickled code runs). It holds:

- ``format_version``: :data:`FORMAT_VERSION`;
- ``class``: the method's class name, looked up among the
  :class:`~bnn_pyro.BaseBayesianMethod` subclasses (a user's own subclass too, once defined);
- ``config``: the constructor settings from the method's ``_config()`` (priors and likelihoods
  as their ``config()`` dicts, which name their classes in the same way);
- ``state``: ``method.state_dict()`` on the CPU (device-neutral);
- ``fitted``: the method's ``_fitted_state()`` (e.g. the training set size).

It is written to a temporary name in the same folder and renamed, so a crash never leaves a
half-written checkpoint behind.
"""

from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING, Any

import pyro.poutine as poutine
import torch
import torch.nn as nn

from bnn_pyro.base import BaseBayesianMethod

if TYPE_CHECKING:
    from bnn_pyro.svi_model import SVIModel

__all__ = [
    "FORMAT_VERSION",
    "atomic_save",
    "check_format",
    "create_guide_parameters",
    "load_method",
    "method_state",
    "read_checkpoint",
    "save_method",
]

#: Version 2: one layout for every method. (Version 1 held only ``VariationalBNN`` and
#: ``HiddenLayerBNN``, each in a layout of its own.)
FORMAT_VERSION = 2


def atomic_save(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save(obj, path)`` through a temporary file in the same folder and a rename.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "x.pt")
        >>> atomic_save({"a": torch.ones(2)}, path)
        >>> torch.load(path, weights_only=True)["a"].tolist()
        [1.0, 1.0]
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"the folder of {path!r} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".pt", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(obj, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _plain(value: Any) -> Any:
    return value.detach().cpu() if isinstance(value, torch.Tensor) else value


def method_state(method: BaseBayesianMethod) -> dict[str, Any]:
    """The checkpoint dict of ``method``: what :func:`save_method` writes (see the module
    docstring), for a caller that keeps it inside a file of its own.

    Example:
        >>> import bnn_pyro as bp
        >>> m = bp.MCDropout(bp.nn.mlp(2, [8], 1, dropout=0.1), likelihood=bp.Gaussian(0.3))
        >>> sorted(method_state(m))
        ['class', 'config', 'fitted', 'format_version', 'state']
    """
    if not isinstance(method, BaseBayesianMethod):
        raise TypeError(f"method must be a BaseBayesianMethod, got {type(method).__name__}")
    return {
        "format_version": FORMAT_VERSION,
        "class": type(method).__name__,
        "config": method._config(),
        "fitted": method._fitted_state(),
        "state": {k: _plain(v) for k, v in method.state_dict().items()},
    }


def save_method(method: BaseBayesianMethod, path: str | os.PathLike) -> None:
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
        ValueError: not a bnn_pyro checkpoint, or another format version.

    Example:
        >>> check_format({"format_version": FORMAT_VERSION, "a": 1}, "the dict")["a"]
        1
        >>> check_format({"a": 1}, "the dict")
        Traceback (most recent call last):
          ...
        ValueError: the dict is not a bnn_pyro checkpoint
    """
    if not isinstance(state, dict) or "format_version" not in state:
        raise ValueError(f"{source} is not a bnn_pyro checkpoint")
    version = state["format_version"]
    if version > FORMAT_VERSION:
        raise ValueError(
            f"{source} has format version {version}; this bnn_pyro reads {FORMAT_VERSION}: "
            "upgrade bnn_pyro"
        )
    if version < FORMAT_VERSION:
        raise ValueError(
            f"{source} has format version {version}, written by an older bnn_pyro (this one "
            f"reads {FORMAT_VERSION}): save the model again with the version that wrote it "
            "installed, or retrain"
        )
    return state


def read_checkpoint(path: str | os.PathLike, map_location: Any = None) -> dict[str, Any]:
    """The checkpoint dict at ``path`` (``torch.load(weights_only=True)``), checked to be a
    bnn_pyro checkpoint of the format this version reads.

    Raises:
        ValueError: not a bnn_pyro checkpoint, or another format version.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "x.pt"); atomic_save({"a": 1}, path)
        >>> read_checkpoint(path)
        Traceback (most recent call last):
          ...
        ValueError: ... is not a bnn_pyro checkpoint
    """
    state = torch.load(path, map_location=map_location, weights_only=True)
    return check_format(state, repr(os.fspath(path)))


def load_method(
    path: str | os.PathLike,
    net: nn.Module | None = None,
    map_location: Any = None,
    expected: type[BaseBayesianMethod] | None = None,
) -> BaseBayesianMethod:
    """Rebuild the method saved at ``path`` around ``net``.

    Args:
        path: a file written by :func:`save_method`.
        net: a fresh instance of the saved architecture (``None`` for methods that build their
            own layers).
        map_location: as in ``torch.load``.
        expected: if given, the saved class must be this class or a subclass.

    Returns:
        The method with its saved parameters and fitted state.

    Example:
        >>> import os, tempfile, bnn_pyro as bp
        >>> m = bp.MCDropout(bp.nn.mlp(2, [8], 1, dropout=0.1), likelihood=bp.Gaussian(0.3))
        >>> path = os.path.join(tempfile.mkdtemp(), "m.pt"); m.save(path)
        >>> load_method(path, bp.nn.mlp(2, [8], 1, dropout=0.1)).likelihood
        Gaussian(scale=0.3)
    """
    state = read_checkpoint(path, map_location)
    cls = BaseBayesianMethod.subclass(state["class"])
    if expected is not None and not issubclass(cls, expected):
        raise ValueError(f"{os.fspath(path)!r} holds a {state['class']}, not a {expected.__name__}")
    if net is not None and not isinstance(net, nn.Module):
        raise TypeError(f"net must be a torch.nn.Module or None, got {type(net).__name__}")
    method = cls._from_config(net, state["config"])
    method._restore_fitted_state(state["fitted"])
    try:
        method.load_state_dict(state["state"])
    except RuntimeError as err:
        raise ValueError(f"net does not match the saved architecture: {err}") from None
    return method


def create_guide_parameters(bnn: SVIModel) -> None:
    """Create a rebuilt SVI model's guide parameters (to be overwritten by a saved state) from
    one dummy row of ``bnn.input_shape`` and a ``y`` drawn from the model."""
    x = torch.zeros((1, *(bnn.input_shape or ())), dtype=bnn.dtype, device=bnn.device)
    with torch.no_grad():
        y = poutine.trace(bnn.model).get_trace(x).nodes[bnn.likelihood.name]["value"]
        bnn._setup_guide(x, y)
