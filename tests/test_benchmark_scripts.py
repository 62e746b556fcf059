"""Smoke runs of benchmarks/step_time.py, methods.py and stacked.py --quick (and demo.py --help).

No timing is asserted (tests never do); what is checked is that each script runs, prints its
table, and, for methods.py, that the vectorized side computes the same numbers as the loop.
"""

import os
import re
import subprocess
import sys

BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "benchmarks")


def _run(script: str, *args: str) -> str:
    run = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, script), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_methods_benchmark_vectorized_equals_loop(tmp_path):
    output = tmp_path / "methods.md"
    text = _run("methods.py", "--repeats", "1", "--output", str(output))
    assert output.read_text() == text.rstrip("\n") + "\n"
    diffs = re.findall(r"\| ([0-9.e+-]+) (rel|abs) \|$", text, flags=re.M)
    assert len(diffs) == 4, text
    # float32 sums over 2,000 per-example squared gradients (Laplace) and 5 members (ensemble)
    # in a different order: round-off ~1e-7 relative per term; 1e-4 leaves room, a wrong
    # Fisher or a member mix-up is off by O(1)
    assert all(float(value) < 1e-4 for value, _ in diffs), diffs


def test_step_time_quick_prints_both_tables():
    text = _run("step_time.py", "--quick")
    assert "| 13→50→1 |" in text and "| 784→400→400→10 |" in text
    assert "| Predictive(parallel=False) |" in text


def test_stacked_quick_trains_the_same_ensemble_both_ways():
    text = _run("stacked.py", "--quick")
    diffs = re.findall(r"\| ([0-9.e+-]+) \|$", text, flags=re.M)
    assert len(diffs) == 3, text
    # the members' final losses, stacked and one by one: the same arithmetic batched
    # differently, float32 round-off (~1e-6 relative after a few hundred Adam steps); a member
    # trained on another member's minibatches or seed is off by O(1e-2) or more
    assert all(float(value) < 1e-4 for value in diffs), diffs
    assert "peak RSS" in text


def test_demo_script_runs_as_a_script():
    # the full run is tests/core/test_demo_cli.py's (it compares a fresh demo with the committed
    # benchmarks/results/demo.md); here only that the script starts from the command line
    text = _run("demo.py", "--help")
    assert "--output" in text


def test_uci_projection_quick_projects_every_method_from_two_scaled_runs():
    text = _run(os.path.join("uci", "projection.py"), "--quick")
    # the four shared sets come from the committed run, the quick set from its two runs
    assert (
        len(re.findall(r"^\| (boston|concrete|energy|yacht) \| .* \| measured \|", text, re.M)) == 4
    )
    runs = re.findall(
        r"^\| wine \| (\w+) \| [0-9.]+ s / ([0-9,]+), [0-9.]+ s / ([0-9,]+) \|", text, re.M
    )
    assert sorted(m for m, _, _ in runs) == sorted(
        ["vi", "lrt", "dropout", "ensemble", "swag", "laplace"]
    )
    # the second run trains every configuration (and the final fit) for twice the epochs
    assert all(int(b.replace(",", "")) == 2 * int(a.replace(",", "")) for _, a, b in runs), runs
