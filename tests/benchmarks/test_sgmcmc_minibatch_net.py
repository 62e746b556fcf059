"""Smoke run of benchmarks/sgmcmc_minibatch_net.py --quick: one row per batch size and seed, with
finite figures. No accuracy is asserted: a quick chain is 30 steps, far from settled."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "sgmcmc_minibatch_net.py"


def test_the_quick_run_prints_a_row_per_batch_size_and_seed():
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--seeds", "1"],
        capture_output=True, text=True, check=True, timeout=300,
    ).stdout  # fmt: skip
    rows = [line.split("|")[1:-1] for line in out.splitlines()[2:]]
    assert [(r[0].strip(), r[1].strip()) for r in rows] == [
        ("all", "measured"),
        ("32", "default"),
        ("32", "measured"),
    ]
    for r in rows:
        error, spread = float(r[4]), float(r[5])
        assert all(math.isfinite(v) and v > 0 for v in (error, spread))
    assert [math.isnan(float(r[6])) for r in rows] == [False, True, False]  # a fixed step: nan


def test_bad_seeds_are_refused():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--seeds", "0"], capture_output=True, text=True
    )
    assert done.returncode == 2 and "--seeds must be >= 1" in done.stderr
