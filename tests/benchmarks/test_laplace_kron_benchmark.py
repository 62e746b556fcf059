"""Smoke run of benchmarks/laplace_kron.py --quick: the table, its agreement with laplace-torch
where that is installed, and no file written. No timing is asserted."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
RESULTS = BENCHMARKS / "results" / "laplace_kron.md"


def test_quick_run_prints_the_table_and_writes_nothing(monkeypatch, capsys, tmp_path):
    before = RESULTS.stat().st_mtime_ns if RESULTS.exists() else None
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("laplace_kron", BENCHMARKS / "laplace_kron.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--quick"]) == 0
    text = capsys.readouterr().out
    row = re.search(r"\| bnn_pyro \| ([0-9.]+) ms \| ([0-9.]+) ms \| (-?[0-9.]+) \|", text)
    assert row and all(float(v) > 0 for v in row.groups()[:2]), text
    if importlib.util.find_spec("laplace") is not None:  # side by side: the same posterior
        gaps = re.search(r"\| bnn_pyro \|[^\n]*\| ([0-9.e+-]+) \| ([0-9.e+-]+) \|\n", text)
        assert float(gaps.group(1)) <= module.EVIDENCE_TOL, text
        assert float(gaps.group(2)) <= module.VARIANCE_TOL, text
        assert text.count("| laplace-torch (") == 2
    else:
        assert "laplace-torch is not installed" in text
    assert (RESULTS.stat().st_mtime_ns if RESULTS.exists() else None) == before
    assert not any(tmp_path.iterdir())


def test_without_laplace_torch_it_runs_bnn_pyro_alone(monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "laplace", None)  # import laplace -> ImportError
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("laplace_kron", BENCHMARKS / "laplace_kron.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text, met = module.report("quick", ["--quick"])
    assert "laplace-torch is not installed" in text and "| laplace-torch (" not in text
    assert not met  # nothing to agree with: the target is not claimed
