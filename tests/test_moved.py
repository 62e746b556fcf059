"""The module paths and names that moved into ``methods/<name>/`` and ``elbos/`` still import,
as the same objects, with a ``DeprecationWarning`` naming the new path; the library itself
imports none of them."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import bnn_pyro  # noqa: F401  (installs the earlier paths)
from bnn_pyro._moved import MOVED_MODULES, MOVED_NAMES

PACKAGE = Path(__file__).resolve().parents[1] / "bnn_pyro"


@pytest.mark.parametrize("old", sorted(MOVED_MODULES))
def test_an_earlier_module_path_imports_the_moved_module_with_a_warning(old):
    if old.endswith("lightning"):
        pytest.importorskip("lightning")
    new = MOVED_MODULES[old]
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}: import it from there"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


@pytest.mark.parametrize(
    "package, name", sorted((p, n) for p, names in MOVED_NAMES.items() for n in names)
)
def test_an_earlier_name_imports_the_moved_object_with_a_warning(package, name):
    new = MOVED_NAMES[package][name]
    with pytest.warns(DeprecationWarning, match=f"{package}.{name} moved to {new}.{name}"):
        got = getattr(importlib.import_module(package), name)
    assert got is getattr(importlib.import_module(new), name)


def test_an_unknown_name_still_raises_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        bnn_pyro.training.no_such_name  # noqa: B018


def test_the_old_paths_point_at_modules_that_exist():
    for new in {*MOVED_MODULES.values(), *(m for n in MOVED_NAMES.values() for m in n.values())}:
        assert importlib.util.find_spec(new) is not None, new


def test_no_module_of_the_library_imports_an_earlier_path():
    old = set(MOVED_MODULES)
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert node.module not in old, f"{path} imports {node.module}"
                if node.module in MOVED_NAMES:
                    moved = {a.name for a in node.names} & set(MOVED_NAMES[node.module])
                    assert not moved, f"{path} imports {moved} from {node.module}"
            elif isinstance(node, ast.Import):
                assert not {a.name for a in node.names} & old, path


def test_importing_the_library_warns_nothing():
    """A fresh interpreter, DeprecationWarnings as errors: ``import bnn_pyro`` and its
    ``methods`` and ``elbos`` raise none (so no module reaches an earlier path)."""
    code = "import bnn_pyro, bnn_pyro.methods.vi, bnn_pyro.elbos, bnn_pyro.estimators"
    run = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", code],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
