"""Smoke run of benchmarks/gpu.py --device cpu --quick: its four tables, no file written.

No timing is asserted (tests never do), only that every contender ran and gave a number.
"""

from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path

import torch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
RESULTS = BENCHMARKS / "results" / "gpu.md"


def _gpu_benchmark(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the script imports _report from its folder
    spec = importlib.util.spec_from_file_location("gpu_benchmark", BENCHMARKS / "gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _stamp(path: Path) -> int | None:
    return path.stat().st_mtime_ns if path.exists() else None


def test_quick_cpu_run_prints_four_tables_of_positive_numbers(tmp_path, monkeypatch, capsys):
    before = _stamp(RESULTS)
    monkeypatch.chdir(tmp_path)
    gpu = _gpu_benchmark(monkeypatch)
    with torch.random.fork_rng():
        code = gpu.main(["--device", "cpu", "--quick"])
    text = capsys.readouterr().out
    assert code == 0, text
    first = text.splitlines()[0]
    assert first.startswith(f"torch {torch.__version__}, pyro ") and "device cpu" in first
    assert "UTC" in first and "command: python benchmarks/gpu.py --device cpu --quick" in first
    for title in ("## Training step", "## Compiled step", "## Stacked", "## Predict"):
        assert title in text
    assert "error" not in text.lower()
    # two training rows of 3 step times, two compiled rows of 3, the stacked row's 3, predict's 2
    times = [float(v) for v in re.findall(r"\| ([0-9.]+) m?s ", text)]
    # two ratios per training and per compiled row, the stacked speed-up, predict / bare loop
    ratios = [float(v) for v in re.findall(r"\| ([0-9.]+)× \|", text)]
    assert len(times) == 17 and len(ratios) == 10, text
    assert all(math.isfinite(v) and v > 0 for v in times + ratios), text
    assert len(re.findall(r"\| (?:met|\*\*no\*\*) \|", text)) == 6, text
    assert text.count(" n/a ") == 4  # no GPU memory on a CPU
    # only a full CUDA run writes the results file
    assert _stamp(RESULTS) == before
    assert not any(tmp_path.iterdir())
