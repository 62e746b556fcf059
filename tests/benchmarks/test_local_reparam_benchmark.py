"""Smoke run of benchmarks/local_reparam.py --quick (no timing is asserted)."""

import os
import subprocess
import sys

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "local_reparam.py")


def test_quick_benchmark_writes_its_three_tables(tmp_path):
    output = tmp_path / "local_reparam.md"
    run = subprocess.run(
        [sys.executable, SCRIPT, "--quick", "--output", str(output)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    text = output.read_text()
    for title in ("## HiddenLayer", "## Variance of d(-ELBO)", "## Digits"):
        assert title in text
    assert "| 128, 784 → 400 |" in text and "| 512 |" in text and "| HiddenLayerBNN |" in text
