"""The package's shape: files under 400 lines, no import cycle, the core free of ``methods/``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "bnn_pyro"
MAX_LINES = 400
# The core: what every method builds on. It may not import the classic methods.
CORE = ("base", "registry", "checkpoint", "bnn", "svi_model", "hidden_layer_bnn", "training")


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _runtime_imports(path: Path, known: set[str]) -> set[str]:
    """Modules of this package imported at module level (not under ``if TYPE_CHECKING``, not
    inside functions: those run later and cannot form an import cycle)."""
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found |= {n for n in names if n in known}
    return found


MODULES = _modules()
GRAPH = {m: _runtime_imports(p, set(MODULES)) - {m} for m, p in MODULES.items()}


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
            if nxt.startswith(node + "."):
                continue  # a package importing its own submodules is not a cycle
            if nxt == start:
                return [*path, nxt]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def test_no_import_cycle():
    cycles = [c for m in sorted(GRAPH) if (c := _cycle_from(m))]
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_core_does_not_import_the_classic_methods():
    for module, imports in GRAPH.items():
        short = module.removeprefix("bnn_pyro.")
        if short.split(".")[0] in CORE:
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
