"""The package's shape: files under 400 lines, no import cycle, the core free of ``methods/``,
no module using another module's underscored names, and ``tests/`` a mirror of the package.

Every import counts: at module level, inside functions and under ``if TYPE_CHECKING`` alike (a
function-level import is still a dependency, and only hides a cycle from the interpreter).
``from package import module`` is an import of that module, not of the package's face."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "bnn_pyro"
TESTS = Path(__file__).resolve().parent
MAX_LINES = 400
# The core: what every method builds on. It may not import a method.
CORE = (
    "base",
    "registry",
    "checkpoint",
    "training",
    "elbos",
    "poutine",
    "nn",
    "guides",
    "priors",
    "likelihoods",
    "metrics",
)


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(path: Path, known: set[str]) -> set[str]:
    """Modules of this package that ``path`` imports anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                for a in node.names
            ]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found |= {n for n in names if n in known}
    return found


MODULES = _modules()
GRAPH = {m: _imports(p, set(MODULES)) - {m} for m, p in MODULES.items()}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_file_is_under_400_lines(module):
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{MODULES[module]} has {lines} lines: it holds two concepts"


def _cycle_from(start: str) -> list[str] | None:
    stack = [(start, [start])]
    seen = set()
    while stack:
        node, path = stack.pop()
        for nxt in GRAPH[node]:
            if nxt == start:
                return [*path, nxt]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def test_no_import_cycle():
    cycles = [c for m in sorted(GRAPH) if (c := _cycle_from(m))]
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_core_does_not_import_a_method():
    for module, imports in GRAPH.items():
        short = module.removeprefix("bnn_pyro.")
        if short.split(".")[0] in CORE:
            bad = sorted(i for i in imports if i.startswith("bnn_pyro.methods"))
            assert not bad, f"{module} imports {bad}"


def test_training_imports_no_method():
    """``training/`` is the method-agnostic engine: no file of it imports ``methods/``."""
    for module, imports in GRAPH.items():
        if module.startswith("bnn_pyro.training"):
            bad = sorted(i for i in imports if i.startswith("bnn_pyro.methods"))
            assert not bad, f"{module} imports {bad}"


def test_the_checker_sees_a_cycle():
    """The cycle search finds one when there is one (so a pass above means something)."""
    GRAPH["bnn_pyro.base"].add("bnn_pyro.registry")
    GRAPH["bnn_pyro.registry"].add("bnn_pyro.base")
    try:
        assert _cycle_from("bnn_pyro.base") is not None
    finally:
        GRAPH["bnn_pyro.base"].discard("bnn_pyro.registry")
        GRAPH["bnn_pyro.registry"].discard("bnn_pyro.base")


def test_the_checker_counts_imports_inside_functions(tmp_path):
    """An import inside a function body, or under TYPE_CHECKING, is an edge too."""
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from bnn_pyro import base\n"
        "def f():\n    from bnn_pyro.training import loop\n"
    )
    known = {"bnn_pyro", "bnn_pyro.base", "bnn_pyro.training", "bnn_pyro.training.loop"}
    assert _imports(source, known) == {"bnn_pyro.base", "bnn_pyro.training.loop"}


def _private_names_defined(tree: ast.AST) -> set[str]:
    """Underscored names a module defines: functions, classes, methods, assignments at module or
    class level, and ``self.``/``cls.`` attributes. (A ``_name`` that only a third party
    defines, such as ``nn.Module._parameters``, is that library's business, not this
    test's.)"""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            found.add(node.attr)
    return {n for n in found if n.startswith("_") and not n.startswith("__")}


def _foreign_private_uses(
    path: Path, defined_elsewhere: dict[str, str], known: set[str]
) -> list[str]:
    """Where ``path`` imports an underscored name from a module of this package, or reads
    ``obj._name`` (``obj`` not ``self``, ``cls`` or ``super()``) for a ``_name`` that another
    module of the package defines and ``path`` does not. Private *modules* (``_checks``) are
    the package's own utilities; a private *name* in a module belongs to that module alone."""
    tree = ast.parse(path.read_text())
    own = _private_names_defined(tree)
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bnn_pyro"):
            for a in node.names:
                private = a.name.startswith("_") and not a.name.startswith("__")
                if private and f"{node.module}.{a.name}" not in known:
                    bad.append(f"line {node.lineno}: imports {a.name} from {node.module}")
        elif isinstance(node, ast.Attribute) and node.attr in defined_elsewhere:
            base = node.value
            if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            if isinstance(base, ast.Call) and ast.unparse(base.func) == "super":
                continue
            if node.attr not in own:
                where = defined_elsewhere[node.attr]
                bad.append(f"line {node.lineno}: {ast.unparse(node)} (defined in {where})")
    return bad


def _private_definitions() -> dict[str, str]:
    out: dict[str, str] = {}
    for module, path in sorted(MODULES.items()):
        for name in _private_names_defined(ast.parse(path.read_text())):
            out.setdefault(name, module)
    return out


def test_no_module_uses_another_modules_private_names():
    """The issue's "private names serve as the real interface": what one module needs of
    another is a public name (a hook without ``_``), so that a rename inside one module cannot
    break another silently."""
    defined = _private_definitions()
    known = set(MODULES)
    bad = {
        module: uses
        for module, path in sorted(MODULES.items())
        if (uses := _foreign_private_uses(path, defined, known))
    }
    assert not bad, "\n".join(f"{m}: {u}" for m, uses in bad.items() for u in uses)


def test_the_checker_sees_a_foreign_private_name(tmp_path):
    """An import of ``_x`` from another module, and ``other._y`` for a ``_y`` another module
    defines, are caught; ``self._y``, private modules and names the module defines are not."""
    source = tmp_path / "m.py"
    source.write_text(
        "from bnn_pyro.priors.base import _helper\n"
        "from bnn_pyro import _checks\n"
        "def f(method):\n    return method._fit_data\n"
        "class A:\n    def g(self):\n        return self._fit_data, self._mine\n"
        "    def _mine(self, other):\n        return other._mine\n"
    )
    known = {"bnn_pyro", "bnn_pyro._checks", "bnn_pyro.priors.base"}
    uses = _foreign_private_uses(source, {"_fit_data": "x", "_mine": "y"}, known)
    assert uses == [
        "line 1: imports _helper from bnn_pyro.priors.base",
        "line 4: method._fit_data (defined in x)",
    ]


#: Test folders organised by concern rather than by module: the benchmark scripts and the UCI
#: harness, the devices, the 2-process runs, the test data, Pyro's idioms, bad input and
#: recovery. Their tests cut across the package; any other folder of tests/ mirrors one of it.
BY_CONCERN = ("benchmarks", "devices", "distributed", "fixtures", "pyro_idioms", "reliability")
#: The top-level tests of the whole package (``test_<name>.py``), not of one module.
WHOLE_PACKAGE = (
    "contract",
    "docs",
    "layout",
    "new_method",
    "notebooks",
    "packaging",
    "public_api",
    "readme",
    "user_pages",
    "wheel",
)


def _misplaced_tests(tests: Path, package: Path) -> list[str]:
    """Where ``tests`` stops mirroring ``package``: a folder holding files that is neither the
    twin of a package folder (``tests/methods/vi`` of ``bnn_pyro/methods/vi``) nor inside a
    folder by concern, and a top-level ``test_<name>.py`` that is neither of a top-level module
    (``test_losses.py`` of ``losses.py``) nor of the whole package. A folder that a move left
    with no file of its own (a ``__pycache__`` at most) holds no test and is passed over."""
    bad = []
    for folder in sorted(p for p in tests.rglob("*") if p.is_dir()):
        parts = folder.relative_to(tests).parts
        if "__pycache__" in parts or parts[0].startswith(".") or parts[0] in BY_CONCERN:
            continue
        if any(f.is_file() for f in folder.iterdir()) and not package.joinpath(*parts).is_dir():
            where = "/".join(parts)
            bad.append(f"{tests.name}/{where}/ mirrors no {package.name}/{where}/")
    for path in sorted(tests.glob("test_*.py")):
        name = path.stem.removeprefix("test_")
        if name not in WHOLE_PACKAGE and not (package / f"{name}.py").is_file():
            bad.append(f"{tests.name}/{path.name} tests no module {package.name}/{name}.py")
    return bad


def test_the_tests_mirror_the_package():
    """A test of ``bnn_pyro/<folder>/<module>.py`` lives in ``tests/<folder>/``, one of a
    top-level module in ``tests/test_<module>.py``: whoever changes a module finds its tests
    where the module is. A new folder of tests by concern goes into ``BY_CONCERN``."""
    bad = _misplaced_tests(TESTS, PACKAGE)
    assert not bad, "\n".join(bad)


def test_the_checker_sees_a_test_out_of_place(tmp_path):
    """A folder with no package twin and a top-level test of no top-level module are caught; a
    twin, a folder by concern (and what is under it), a top-level module's test, one of the
    whole package's and a folder holding only a ``__pycache__`` are not."""
    package = tmp_path / "bnn_pyro"
    (package / "methods" / "vi").mkdir(parents=True)
    (package / "losses.py").touch()
    tests = tmp_path / "tests"
    for name in (
        "methods/vi/test_model.py",
        "core/test_model.py",
        "reliability/deep/test_x.py",
        "old/__pycache__/test_y.pyc",
        "test_losses.py",
        "test_docs.py",
        "test_metrics_ood.py",
    ):
        (tests / name).parent.mkdir(parents=True, exist_ok=True)
        (tests / name).touch()
    assert _misplaced_tests(tests, package) == [
        "tests/core/ mirrors no bnn_pyro/core/",
        "tests/test_metrics_ood.py tests no module bnn_pyro/metrics_ood.py",
    ]
