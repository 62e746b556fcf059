"""Package faces that import their names on first use (PEP 562 module ``__getattr__``).

``import bnn_pyro`` and the ``bnn-pyro`` command's parser (``--help``, ``--version``, and the
``--method`` names that ``bnn-pyro fit --help`` lists) import neither torch nor Pyro: a package
``__init__`` writes where each of its names lives once, as an import under ``if TYPE_CHECKING:``
(which type checkers and editors read), beside its literal ``__all__`` (which documentation tools
read), and :func:`lazy_face` reads those imports back from the file to give the package its
``__getattr__`` and ``__dir__``, and refuses an ``__all__`` that names what the face does not
give: the module that holds a name is imported when the name is first used.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["face_names", "lazy_face"]


def face_names(
    package: str, source: str
) -> tuple[dict[str, tuple[str, str]], list[str], dict[str, str], set[str], list[str]]:
    """The names a package face's source writes: ``(lazy, modules, aliases, defined, public)``.

    Under ``if TYPE_CHECKING:``, ``from M import a`` gives ``a`` lazily from ``M``
    (``lazy[a] = (M, a)``, or ``lazy[b] = (M, a)`` for ``import a as b``), ``from package import
    m`` the submodule ``m``, and ``import M as b`` the module ``M`` as ``b``. ``defined``: the
    names the face binds itself (its own imports and assignments); ``public``: its literal
    ``__all__`` (which documentation tools and type checkers read as written).

    Example:
        >>> source = '''
        ... from json.decoder import JSONDecodeError
        ... if TYPE_CHECKING:
        ...     import json.encoder as enc
        ...     from json import decoder
        ...     from json.scanner import make_scanner as scanner
        ... __all__ = ["JSONDecodeError", "enc", "scanner"]
        ... '''
        >>> lazy, modules, aliases, defined, public = face_names("json", source)
        >>> lazy, modules, aliases
        ({'scanner': ('json.scanner', 'make_scanner')}, ['decoder'], {'enc': 'json.encoder'})
        >>> sorted(defined), public
        (['JSONDecodeError', '__all__'], ['JSONDecodeError', 'enc', 'scanner'])
    """
    lazy: dict[str, tuple[str, str]] = {}
    modules: list[str] = []
    aliases: dict[str, str] = {}
    defined: set[str] = set()
    public: list[str] = []
    for stmt in ast.parse(source).body:
        if isinstance(stmt, ast.If) and ast.unparse(stmt.test) == "TYPE_CHECKING":
            for inner in stmt.body:
                if isinstance(inner, ast.Import):
                    aliases.update({a.asname or a.name: a.name for a in inner.names})
                elif isinstance(inner, ast.ImportFrom) and inner.module == package:
                    modules += [a.asname or a.name for a in inner.names]
                elif isinstance(inner, ast.ImportFrom):
                    lazy.update({a.asname or a.name: (inner.module, a.name) for a in inner.names})
            continue
        for node in ast.walk(stmt):  # what the face binds itself (try/except included)
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                defined.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
        if isinstance(stmt, ast.Assign) and [ast.unparse(t) for t in stmt.targets] == ["__all__"]:
            public = list(ast.literal_eval(stmt.value))
    return lazy, modules, aliases, defined, public


def lazy_face(
    package: str, source_file: str
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for the package face ``package`` whose source is
    ``source_file`` (its ``__file__``), from the names it writes (:func:`face_names`); a name
    of its ``__all__`` that it neither binds nor imports under ``TYPE_CHECKING`` is an
    ``ImportError`` at once (the two lists cannot drift apart).

    Args:
        package: the face's ``__name__``.
        source_file: the face's ``__file__``.

    Returns:
        The module's ``__getattr__`` and ``__dir__``.

    Example:
        >>> import json, os, tempfile
        >>> def face(text):
        ...     with tempfile.TemporaryDirectory() as tmp:
        ...         path = os.path.join(tmp, "face.py")
        ...         with open(path, "w") as handle:
        ...             _ = handle.write(text)
        ...         return lazy_face("json", path)
        >>> getattr_, dir_ = face("if TYPE_CHECKING:\\n    from json.encoder import JSONEncoder\\n")
        >>> getattr_("JSONEncoder") is json.JSONEncoder, "JSONEncoder" in dir_()
        (True, True)
        >>> getattr_("nothing")
        Traceback (most recent call last):
          ...
        AttributeError: module 'json' has no attribute 'nothing'
        >>> face("from json.encoder import JSONEncoder\\n__all__ = ['JSONEncoder', 'Encoder']\\n")
        Traceback (most recent call last):
          ...
        ImportError: json's __all__ names what it does not give: ['Encoder']
    """
    source = Path(source_file).read_text("utf-8")
    lazy, modules, aliases, defined, public = face_names(package, source)
    missing = [n for n in public if n not in {*lazy, *modules, *aliases, *defined}]
    if missing:
        raise ImportError(f"{package}'s __all__ names what it does not give: {missing}")

    def __getattr__(name: str) -> Any:
        if name in lazy:
            module, attribute = lazy[name]
            value = getattr(importlib.import_module(module), attribute)
        elif name in modules:
            value = importlib.import_module(f"{package}.{name}")
        elif name in aliases:
            value = importlib.import_module(aliases[name])
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(sys.modules[package], name, value)  # kept: the next use is a plain look-up
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *lazy, *modules, *aliases})

    return __getattr__, __dir__
