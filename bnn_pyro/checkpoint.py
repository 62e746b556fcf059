"""Save and load a :class:`~bnn_pyro.VariationalBNN` as one file.

The file holds the net state (point-estimate parameters and buffers), the guide state, the
prior and likelihood settings, the training data shape and a format version. It contains only
tensors, numbers, strings, lists and dicts, so it loads with ``torch.load(weights_only=True)``.
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

from bnn_pyro.likelihoods import likelihood_from_config
from bnn_pyro.priors import prior_from_config

if TYPE_CHECKING:
    from bnn_pyro.bnn import VariationalBNN
    from bnn_pyro.svi_model import SVIModel

__all__ = ["FORMAT_VERSION", "atomic_save", "load_bnn", "read_checkpoint", "save_bnn"]

FORMAT_VERSION = 1


def atomic_save(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save(obj, path)`` through a temporary file in the same folder and a rename."""
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


def save_bnn(bnn: VariationalBNN, path: str | os.PathLike) -> None:
    """Write ``bnn`` to ``path`` (see the module docstring for the contents)."""
    from bnn_pyro.bnn import _guide_ready

    if not isinstance(bnn.guide_spec, str):
        raise ValueError("only models built with a named guide (e.g. 'meanfield') can be saved")
    if not _guide_ready(bnn.guide):
        raise ValueError("fit the model before saving it: its guide has no parameters yet")
    state = {
        "format_version": FORMAT_VERSION,
        "class": type(bnn).__name__,
        "net_state": {k: v.detach().cpu() for k, v in bnn.net.state_dict().items()},
        "guide_state": {k: v.detach().cpu() for k, v in bnn.guide.state_dict().items()},
        "guide": bnn.guide_spec,
        "init_scale": bnn.init_scale,
        "prior": bnn.prior.config(),
        "likelihood": bnn.likelihood.config(),
        "dataset_size": bnn.dataset_size,
        "input_shape": list(bnn.input_shape or ()),
        "dtype": str(bnn.dtype).removeprefix("torch."),
        "extra": bnn._checkpoint_extra(),
    }
    atomic_save(state, path)


def read_checkpoint(
    path: str | os.PathLike, class_name: str, map_location: Any = None
) -> dict[str, Any]:
    """The checkpoint dict at ``path`` (``torch.load(weights_only=True)``), checked to be a
    bnn_pyro checkpoint of a readable format version holding a ``class_name``.

    Raises:
        ValueError: not a bnn_pyro checkpoint, a newer format, or another model class.
    """
    state = torch.load(path, map_location=map_location, weights_only=True)
    if not isinstance(state, dict) or "format_version" not in state:
        raise ValueError(f"{path!r} is not a bnn_pyro checkpoint")
    if state["format_version"] > FORMAT_VERSION:
        raise ValueError(
            f"{path!r} has format version {state['format_version']}; this bnn_pyro reads up to "
            f"{FORMAT_VERSION}: upgrade bnn_pyro"
        )
    if state["class"] != class_name:
        raise ValueError(f"{path!r} holds a {state['class']}, not a {class_name}")
    return state


def create_guide_parameters(bnn: SVIModel) -> None:
    """Create a rebuilt model's guide parameters (to be overwritten by a saved state) from one
    dummy row of ``bnn.input_shape`` and a ``y`` drawn from the model."""
    x = torch.zeros((1, *(bnn.input_shape or ())), dtype=bnn.dtype, device=bnn.device)
    with torch.no_grad():
        y = poutine.trace(bnn.model).get_trace(x).nodes[bnn.likelihood.name]["value"]
        bnn._setup_guide(x, y)


def load_bnn(
    cls: type[VariationalBNN], path: str | os.PathLike, net: nn.Module, map_location: Any = None
) -> VariationalBNN:
    """Rebuild a saved model around ``net`` (a fresh instance of the saved architecture)."""
    state = read_checkpoint(path, cls.__name__, map_location)
    net = net.to(getattr(torch, state["dtype"]))
    bnn = cls._from_checkpoint(net, state)
    try:
        bnn.net.load_state_dict(state["net_state"])
    except RuntimeError as err:
        raise ValueError(f"net does not match the saved architecture: {err}") from None
    bnn.input_shape = tuple(state["input_shape"]) or None
    bnn.dataset_size = state["dataset_size"]
    create_guide_parameters(bnn)
    try:
        bnn.guide.load_state_dict(state["guide_state"])
    except RuntimeError as err:
        raise ValueError(f"net does not match the saved architecture: {err}") from None
    return bnn


def rebuild_kwargs(state: dict[str, Any]) -> dict[str, Any]:
    """Constructor arguments shared by every saved model class."""
    return {
        "likelihood": likelihood_from_config(state["likelihood"]),
        "prior": prior_from_config(state["prior"]),
        "guide": state["guide"],
        "init_scale": state["init_scale"],
    }
