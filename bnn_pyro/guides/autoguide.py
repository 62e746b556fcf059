"""``AutoGuideWrapper``: any Pyro guide (an autoguide, a ``PyroModule``, an ``AutoGuideList``, a
function calling ``pyro.param``) as a guide of this library, its parameters kept with the model
(in the model's own param store, :mod:`bnn_pyro.nn.param_scope`), never in Pyro's global
one."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import pyro
import torch
import torch.nn as nn

from bnn_pyro.nn.param_scope import ParamScope, put_param
from bnn_pyro.poutine.kl_weight import KLWeight

__all__ = ["AutoGuideWrapper"]


def _enter_scope(module: nn.Module, *_: Any) -> None:
    module._bnn_param_scope.__enter__()  # a forward pre-hook: a direct call of the guide


def _leave_scope(module: nn.Module, *_: Any) -> None:
    module._bnn_param_scope.__exit__(None, None, None)


class AutoGuideWrapper(nn.Module):
    """Any guide as a guide of this library: a Pyro autoguide, a ``PyroModule`` with
    ``PyroParam`` attributes, an ``AutoGuideList`` of several, or a plain function calling
    ``pyro.param`` (the tutorials' guide). Its parameters live with the model.

    The model of :class:`~bnn_pyro.VariationalBNN` takes ``dataset_size`` and ``kl_weight``;
    the wrapper applies ``kl_weight`` to the guide's sites (:class:`KLWeight`) and passes only
    ``(x, y)`` on. The guide itself is ``wrapper.autoguide``.

    Every call runs inside the model's own param store (:class:`ParamScope`, shared with the
    model; a direct call of ``wrapper.autoguide`` too, through hooks on it), so Pyro's global
    store is left as it was and two models never share a parameter, whatever names their
    guides give them. A module guide's parameters are its own attributes (``state_dict``, the
    optimizer, checkpoints); the parameters a function creates with ``pyro.param`` are held by
    the wrapper (``wrapper.free_params``) from its first call on.

    Args:
        guide: the guide, a callable taking the model's ``(x, y)``.
        scope: the model's param store (default: one of the wrapper's own).

    Example:
        >>> import pyro
        >>> import pyro.distributions as dist
        >>> from pyro.infer import autoguide
        >>> def model(x, y=None):
        ...     pyro.sample("w", dist.Normal(0.0, 1.0))
        >>> keys = len(pyro.get_param_store())
        >>> guide = AutoGuideWrapper(autoguide.AutoNormal(model))
        >>> sorted(guide(torch.zeros(1), kl_weight=0.1))
        ['w']
        >>> len(pyro.get_param_store()) == keys, sorted(n for n, _ in guide.named_parameters())
        (True, ['autoguide.locs.w_unconstrained', 'autoguide.scales.w_unconstrained'])
        >>> def my_guide(x, y=None):  # a hand-written guide: its pyro.param lives here too
        ...     loc = pyro.param("w_loc", torch.tensor(0.5))
        ...     return pyro.sample("w", dist.Normal(loc, 0.1))
        >>> wrapped = AutoGuideWrapper(my_guide)
        >>> _ = wrapped(torch.zeros(1))
        >>> [n for n, _ in wrapped.named_parameters()], "w_loc" in pyro.get_param_store()
        (['free_params.w_loc'], False)
    """

    def __init__(self, guide: Callable[..., Any], scope: ParamScope | None = None) -> None:
        super().__init__()
        if not callable(guide):
            raise TypeError(f"a guide must be callable, got {type(guide).__name__}")
        self.scope = scope or ParamScope()
        self.free_params = nn.ParameterDict()
        self._free_names: dict[str, tuple[str, Any]] = {}  # key -> (Pyro name, constraint)
        self._seen = 0  # entries of the store at the end of the last call
        self.called = False
        if isinstance(guide, nn.Module):
            guide._bnn_param_scope = self.scope
            guide.register_forward_pre_hook(_enter_scope)
            guide.register_forward_hook(_leave_scope, always_call=True)
            self.autoguide = guide
        else:
            self.__dict__["autoguide"] = guide  # a function: not a submodule

    @property
    def ready(self) -> bool:
        """Whether the guide has its parameters: an autoguide once it has traced the model, any
        other guide once it has run."""
        return self.called or getattr(self.autoguide, "prototype_trace", None) is not None

    def forward(
        self, x: torch.Tensor, y: torch.Tensor | None = None, *, kl_weight: float = 1.0, **_: Any
    ) -> Any:
        with self.scope, KLWeight(kl_weight) if kl_weight != 1.0 else nullcontext():
            if self._free_names and not self.scope.params:
                self._seed_free_params()  # a copy of the model: an empty store to refill
            out = self.autoguide(x, y)
            if len(self.scope.params) != self._seen:
                self._adopt_free_params()
        self.called = True
        return out

    def _seed_free_params(self) -> None:
        for key, (name, constraint) in self._free_names.items():
            put_param(name, self.free_params[key], constraint)

    def _adopt_free_params(self) -> None:
        """Hold every tensor ``pyro.param`` created in the store (not a module's attribute) as a
        parameter of this module, the store keeping the same object under its name."""
        store = pyro.get_param_store()
        for name, value in list(store._params.items()):
            if isinstance(value, nn.Parameter):
                continue  # a module's own (PyroModule attributes, param statements)
            param = nn.Parameter(value.detach(), requires_grad=True)
            key = name.replace(".", "__").replace("$", "_")
            if key in self.free_params:
                raise ValueError(f"two pyro.param names of the guide map to one key {key!r}")
            self.free_params[key] = param
            constraint = store._constraints.get(name)
            self._free_names[key] = (name, constraint)
            put_param(name, param, constraint)
        self._seen = len(store._params)
