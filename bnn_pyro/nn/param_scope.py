"""``ParamScope``: a model's own Pyro param store, so that two models never share a parameter and
Pyro's global store is left as it was.

Pyro code reaches parameters by name through one global store (``pyro.param``, an autoguide's
or any ``PyroModule``'s attributes): two models whose guides use the same names (two
autoguides of one class, two ``AutoGuideList`` objects whose parts were named when appended,
two hand-written guides calling ``pyro.param("loc", ...)``) would read and train the same tensors.
Renaming cannot cover every way a guide names its parameters; a store of its own per model can.

A :class:`ParamScope` holds the three tables of a Pyro ``ParamStoreDict`` (values, names,
constraints). Entering it swaps them into the global store (three attribute assignments, no
copy); leaving swaps the previous ones back. Everything a model or its guide runs inside sees
its own parameters under their usual names, ``pyro.param`` and ``PyroModule`` work unchanged,
and nothing is written to the store the user sees. Entering a scope that is already the
store's is free, so a whole ``fit`` runs inside one entry and its steps' entries cost nothing.

Pyro's JIT (``JitTrace_ELBO`` and the other ``Jit*`` ELBOs) reads parameters from the global
store by name *between* calls of the model and the guide; a user's own loop with it runs inside
``with scope:`` (:meth:`~bnn_pyro.methods.vi.svi_model.SVIModel.param_scope`), and a loop that
does not is refused at its first step, before any work, with that fix (:func:`refuse_bare_jit`).
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any

import pyro
import torch
from pyro.params.param_store import ParamStoreDict

__all__ = ["ParamScope", "put_param", "refuse_bare_jit", "register_param"]


class _ScopedTable(dict):
    """A scope's table of values: a plain dict whose type says "a model's own store"."""


class ParamScope:
    """A private Pyro param store, entered as a context manager (re-entrant; see the module
    docstring).

    Example:
        >>> import pyro
        >>> a, b = ParamScope(), ParamScope()
        >>> with a:
        ...     _ = pyro.param("loc", torch.zeros(2))
        >>> with b:
        ...     _ = pyro.param("loc", torch.ones(2))
        >>> with a:
        ...     pyro.param("loc").tolist()
        [0.0, 0.0]
        >>> "loc" in pyro.get_param_store(), sorted(a.names())
        (False, ['loc'])
    """

    def __init__(self) -> None:
        self.params: dict[str, torch.Tensor] = _ScopedTable()
        self.param_to_name: dict[torch.Tensor, str] = {}
        self.constraints: dict[str, Any] = {}
        self._saved: list[tuple[Any, Any, Any] | None] = []

    def names(self) -> list[str]:
        """The names of the parameters in this store."""
        return list(self.params)

    def clear(self) -> None:
        """Forget every entry (the tensors themselves live on where modules hold them)."""
        self.params.clear()
        self.param_to_name.clear()
        self.constraints.clear()

    def is_active(self) -> bool:
        """Whether the global store is this scope now."""
        return pyro.get_param_store()._params is self.params

    def __enter__(self) -> ParamScope:
        store = pyro.get_param_store()
        if store._params is self.params:
            self._saved.append(None)  # already ours: nothing to swap
        else:
            self._saved.append((store._params, store._param_to_name, store._constraints))
            _swap(store, self.params, self.param_to_name, self.constraints)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        saved = self._saved.pop()
        if saved is not None:
            _swap(pyro.get_param_store(), *saved)

    # a copy (deepcopy, pickle) of a model starts with an empty store of its own: the modules
    # it copies hold the tensors, and put them back on their first call
    def __deepcopy__(self, memo: dict) -> ParamScope:
        return ParamScope()

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self.__init__()


def _swap(store: ParamStoreDict, params: Any, names: Any, constraints: Any) -> None:
    store._params, store._param_to_name, store._constraints = params, names, constraints


def register_param(name: str, value: torch.Tensor) -> None:
    """Put the module-held tensor ``value`` under ``name`` in the store when the store is a
    model's own (:class:`ParamScope` entered), so that a lookup by name (Pyro's JIT) finds it;
    outside a scope nothing is written. ``value`` is unconstrained (constraint ``real``).

    Example:
        >>> scope, w = ParamScope(), torch.nn.Parameter(torch.zeros(2))
        >>> register_param("w", w)  # no scope: the global store is left alone
        >>> with scope:
        ...     register_param("w", w)
        ...     pyro.param("w") is w
        True
    """
    store = pyro.get_param_store()
    params = store._params
    if type(params) is not _ScopedTable or params.get(name) is value:
        return
    put_param(name, value, torch.distributions.constraints.real)


def put_param(name: str, value: torch.Tensor, constraint: Any) -> None:
    """Write ``value`` (unconstrained) under ``name`` with ``constraint`` into the three tables
    of the store in use now, replacing whatever tensor the name held (the reverse entry of that
    one too), as ``pyro.param`` would have created it.

    Example:
        >>> scope, w = ParamScope(), torch.nn.Parameter(torch.zeros(2))
        >>> with scope:
        ...     put_param("w", w, torch.distributions.constraints.real)
        ...     pyro.get_param_store().param_name(w)
        'w'
    """
    store = pyro.get_param_store()
    old = store._params.get(name)
    if old is not None and old is not value:
        store._param_to_name.pop(old, None)
    store._params[name] = value
    store._param_to_name[value] = name
    store._constraints[name] = constraint


def refuse_bare_jit(scope: ParamScope) -> None:
    """Raise when a ``pyro.ops.jit`` compiled function (``JitTrace_ELBO`` and its kin) is
    running this model outside its :class:`ParamScope`: Pyro's JIT looks each parameter up by
    name in the global store between calls, where a model with a store of its own keeps none,
    and would fail with a ``KeyError`` deep inside Pyro after the first trace. Inside another
    model's scope, the message names the cause that puts it there: one JIT ELBO given to two
    models' ``SVI`` runs the first model it compiled for.

    Example:
        >>> refuse_bare_jit(ParamScope())  # not under Pyro's JIT: nothing to refuse
    """
    if scope.is_active():
        return
    frame = sys._getframe(1)
    for _ in range(64):
        if frame is None:
            return
        if frame.f_code.co_name == "__call__" and frame.f_globals.get("__name__") == "pyro.ops.jit":
            if type(pyro.get_param_store()._params) is _ScopedTable:  # another model's scope
                raise RuntimeError(
                    "Pyro's JIT is running this model inside another model's param scope: a JIT "
                    "ELBO keeps the model and guide of its first call, whatever SVI it is then "
                    "given to; give each model its own ELBO instance"
                )
            raise RuntimeError(
                "Pyro's JIT ELBOs look parameters up by name in the global param store between "
                "steps, and this model keeps its own: run the loop inside "
                "`with bnn.param_scope():`, or train with bnn.fit(X, y, elbo=JitTrace_ELBO())"
            )
        frame = frame.f_back
