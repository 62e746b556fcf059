"""The package's shape: files under 400 lines, no import cycle, the core free of ``methods/``.

Every import counts: at module level, inside functions and under ``if TYPE_CHECKING`` alike (a
function-level import is still a dependency, and only hides a cycle from the interpreter).
``from package import module`` is an import of that module, not of the package's face."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "bnn_pyro"
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
