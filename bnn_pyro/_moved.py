"""The module paths and names that moved when every method got a folder of its own.

An import of an earlier path (``import bnn_pyro.bnn``, ``from bnn_pyro.training import
make_elbo``) still works and gives the same objects, with a ``DeprecationWarning`` that names the
new path. This is the one place that knows the old names: ``bnn_pyro/__init__.py`` installs its
finder of the old module paths, and a package that lost names (``bnn_pyro.training``) hands an
unknown name to :func:`moved_name` from its own ``__getattr__``, so that ``import bnn_pyro``
imports no package it does not need. Nothing in the library imports an old path (a test checks
that importing the library warns nothing).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType
from typing import Any

__all__ = ["MOVED_MODULES", "MOVED_NAMES", "install", "moved_name"]

_P = "bnn_pyro."
#: An earlier module path -> where that module is now.
MOVED_MODULES: dict[str, str] = {
    _P + old: _P + new
    for old, new in {
        "bnn": "methods.vi.model",
        "svi_model": "methods.vi.svi_model",
        "hidden_layer_bnn": "methods.vi.hidden_layer",
        "map_init": "methods.vi.map_init",
        "posterior": "methods.vi.posterior",
        "direct_elbo": "methods.vi.fast_loss",
        "lightning": "methods.vi.lightning",
        "training.svi": "methods.vi.svi",
        "training.diagnostics": "methods.vi.diagnostics",
        "training.stacked_vi": "methods.vi.stacked",
        "training.stacked_alpha": "methods.vi.stacked_alpha",
        "training.stacked_lrt": "methods.vi.stacked_lrt",
        "training.stacked_likelihoods": "methods.vi.stacked_likelihoods",
        "training.stacked_support": "methods.vi.stacked_support",
        "methods.variational": "methods.vi.bayes_nn",
        "elbo": "elbos.trace",
        "stl_elbo": "elbos.stl",
        "alpha_elbo": "elbos.alpha",
        "nn.functional": "nn.bayesian_mlp",
    }.items()
}

#: A package that still stands -> {a name it no longer holds: the module that holds it now}.
MOVED_NAMES: dict[str, dict[str, str]] = {
    _P + "training": {
        "GuardedSVI": _P + "methods.vi.svi",
        "SVIStep": _P + "methods.vi.svi",
        "as_pyro_optim": _P + "methods.vi.svi",
        "make_elbo": _P + "methods.vi.svi",
        "run_svi": _P + "methods.vi.svi",
        "LayerDiagnostics": _P + "methods.vi.diagnostics",
    },
}


def _warn(message: str) -> None:
    """A ``DeprecationWarning`` pointed at the first frame outside the import machinery and this
    module (the user's ``import`` line)."""
    frame = sys._getframe(1)
    while frame is not None and (
        frame.f_code.co_filename.startswith("<frozen importlib")
        or frame.f_code.co_filename == __file__
        or "/importlib/" in frame.f_code.co_filename
    ):
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        warnings.warn(message, DeprecationWarning, stacklevel=2)
        return
    warnings.warn_explicit(
        message,
        DeprecationWarning,
        frame.f_code.co_filename,
        frame.f_lineno,
        module=frame.f_globals.get("__name__", "<unknown>"),
        registry=frame.f_globals.setdefault("__warningregistry__", {}),
    )


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an earlier module path and loads it as the module at its new path."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in MOVED_MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = MOVED_MODULES[spec.name]
        _warn(f"{spec.name} moved to {new}: import it from there")
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """The module is the one at its new path, already executed."""


def moved_name(package: str, name: str) -> Any:
    """``package.name`` where ``name`` moved out of ``package`` (with a ``DeprecationWarning``
    naming the new place); ``AttributeError`` for a name that never was there. Each package of
    :data:`MOVED_NAMES` calls it from its module ``__getattr__``.

    Example:
        >>> moved_name("bnn_pyro.training", "no_such_name")
        Traceback (most recent call last):
          ...
        AttributeError: module 'bnn_pyro.training' has no attribute 'no_such_name'
    """
    moved = MOVED_NAMES.get(package, {})
    if name not in moved:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    _warn(f"{package}.{name} moved to {moved[name]}.{name}: import it from there")
    return getattr(importlib.import_module(moved[name]), name)


def install() -> None:
    """Make the earlier module paths importable (idempotent)."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
