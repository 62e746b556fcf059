"""Package faces that import their names on first use (PEP 562 module ``__getattr__``).

``import bnn_pyro`` and the ``bnn-pyro`` command's parser (``--help``, ``--version``, and the
``--method`` names that ``bnn-pyro fit --help`` lists) import neither torch nor Pyro: the package
``__init__`` files hand their names on through :func:`lazy_names`, and the module that holds a
name is imported when the name is first used. Type checkers and editors read the same names
from each face's ``if TYPE_CHECKING:`` imports.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(
    package: str,
    names: Mapping[str, str],
    modules: Iterable[str] = (),
    aliases: Mapping[str, str] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for the module ``package``: ``package.<name>`` imports on
    first use and keeps ``getattr(import_module(names[name]), name)``, the submodule
    ``package.<m>`` for ``m`` in ``modules``, or the module ``aliases[name]`` itself.

    Args:
        package: the module's ``__name__``.
        names: public name -> the module that holds it.
        modules: the package's submodules to give by name.
        aliases: public name -> a module to give under that name (``bp.dist``).

    Returns:
        The module's ``__getattr__`` and ``__dir__``.

    Example:
        >>> getattr_, dir_ = lazy_names("json", {"dumps": "json"}, aliases={"js": "json"})
        >>> getattr_("js").__name__, "dumps" in dir_()
        ('json', True)
        >>> getattr_("nothing")
        Traceback (most recent call last):
          ...
        AttributeError: module 'json' has no attribute 'nothing'
    """
    names, modules, aliases = dict(names), tuple(modules), dict(aliases or {})

    def __getattr__(name: str) -> Any:
        if name in names:
            value = getattr(importlib.import_module(names[name]), name)
        elif name in modules:
            value = importlib.import_module(f"{package}.{name}")
        elif name in aliases:
            value = importlib.import_module(aliases[name])
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(sys.modules[package], name, value)  # kept: the next use is a plain look-up
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *names, *modules, *aliases})

    return __getattr__, __dir__
