"""Smoke runs of benchmarks/step_time.py, methods.py, stacked.py and stacked_chains.py --quick
(and demo.py --help).

No timing is asserted (tests never do); what is checked is that each script runs, prints its
table, and, for methods.py, that the vectorized side computes the same numbers as the loop.

The scripts that neither compile nor measure a process of their own run in this process, as
``python benchmarks/<script>`` runs them (``__main__``, their folder first on ``sys.path``, the
arguments in ``sys.argv``): a fresh interpreter's start, torch's import and torch.optim's first
use (its import of torch._dynamo) cost 3-6 CPU-s a script on a 2-core CI machine, more than
most quick runs' own work. step_time.py and stacked.py (``torch.compile``: its caches would
stay in this process), concurrent_fits.py (its children and exit codes) and demo.py (the
command line itself) run in a fresh interpreter.
"""

import os
import re
import subprocess
import sys

import pytest

from tests.benchmarks.in_process import BENCHMARKS, run_script


def _run(script: str, *args: str) -> str:
    run = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, script), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_pyro_path_quick_prints_both_elbos_and_the_jit_speed_up():
    text = run_script("pyro_path.py", "--quick")
    for row in ("| Trace_ELBO |", "| JitTrace_ELBO |", "| composed guide |"):
        assert row in text, text


def test_methods_benchmark_vectorized_equals_loop(tmp_path):
    output = tmp_path / "methods.md"
    # --quick: every comparison once, Laplace's on 500 points in four batches (the full run's
    # 2,000 in four of 500: the same sums over batches, a quarter of the loop's backward passes)
    text = run_script("methods.py", "--quick", "--output", str(output))
    assert output.read_text() == text.rstrip("\n") + "\n"
    diffs = re.findall(r"\| ([0-9.e+-]+) (rel|abs) \|$", text, flags=re.M)
    assert len(diffs) == 4, text
    # float32 sums over 500 per-example squared gradients (Laplace) and 5 members (ensemble)
    # in a different order: round-off ~1e-7 relative per term; 1e-4 leaves room, a wrong
    # Fisher or a member mix-up is off by O(1)
    assert all(float(value) < 1e-4 for value, _ in diffs), diffs


def test_step_time_quick_prints_its_tables():
    text = _run("step_time.py", "--quick")
    assert "| 13→50→1 |" in text and "| 784→400→400→10 |" in text
    assert "| bnn_pyro fit, elbo='meanfield' |" in text and text.count("| 13→50→1 |") == 3
    assert "| bnn_pyro fit, compile=True |" in text
    assert "| Predictive(parallel=False) |" in text
    verdict = (
        r"^- bnn_pyro fit / torch BBB: [0-9.]+× \(13→50→1\), [0-9.]+× \(784→400→400→10\); "
        r"target ≤ 1\.0×: met on [0-2] of 2$"
    )
    assert re.search(verdict, text, re.M)
    assert _doctests_passed("step_time.py") == 1  # the verdict line's example


def test_stacked_quick_trains_the_same_ensemble_both_ways():
    text = _run("stacked.py", "--quick")
    diffs = re.findall(r"\| ([0-9.e+-]+) \|$", text, flags=re.M)
    # two ensembles, then 5 seeds of each of VariationalBNN, VBLL and SNGP
    assert len(diffs) == 5, text
    assert all(f"| {name} |" in text for name in ("VariationalBNN", "VBLL", "SNGP"))
    # the members' final losses, stacked and one by one: the same arithmetic batched
    # differently, float32 round-off (~1e-7 relative after the quick run's 40 Adam steps, 1e-6
    # after the full run's hundreds); a member trained on another member's minibatches or seed
    # is off by 7e-3 or more (measured on the quick run's rows: the same members one by one
    # with another minibatch order)
    assert all(float(value) < 1e-4 for value in diffs), diffs
    assert "peak RSS" in text


def test_stacked_chains_quick_runs_each_chain_as_its_own_fit():
    text = run_script("stacked_chains.py", "--quick")
    rows = re.findall(r"^\| (c?sghmc) \|.*\| ([0-9.e+-]+) \| ([0-9.e+-]+) \|$", text, flags=re.M)
    assert [r[0] for r in rows] == ["sghmc", "csghmc"], text
    # stacked against one by one, the same chains summed in another order: float32 round-off
    # (~1e-7) and float64's (~1e-15) over these 45 steps; a chain run on another's noise or
    # minibatches is off by O(1e-2) or more
    assert all(float(f32) < 1e-4 and float(f64) < 1e-10 for _, f32, f64 in rows), rows


def test_demo_script_runs_as_a_script():
    # the full run is tests/cli/test_demo_cli.py's (it compares a fresh demo with the committed
    # benchmarks/results/demo.md); here only that the script starts from the command line
    text = _run("demo.py", "--help")
    assert "--output" in text


def test_uci_projection_quick_projects_every_method_from_two_scaled_runs():
    text = run_script(os.path.join("uci", "projection.py"), "--quick")
    # the four shared sets come from the committed run, the quick set from its two runs
    assert (
        len(re.findall(r"^\| (boston|concrete|energy|yacht) \| .* \| measured \|", text, re.M)) == 4
    )
    runs = re.findall(
        r"^\| wine \| (\w+) \| [0-9.]+ s / ([0-9,]+), [0-9.]+ s / ([0-9,]+) \|", text, re.M
    )
    from benchmarks.uci.registry import available_methods  # every tuned row, projected

    assert sorted(m for m, _, _ in runs) == sorted(available_methods())
    assert {"vi", "dropout", "laplace", "sghmc"} <= set(available_methods())
    epochs = {m: (int(a.replace(",", "")), int(b.replace(",", ""))) for m, a, b in runs}
    # the second run trains every configuration for LONG_RUN (4) times the epochs. Where the
    # final fit trains the whole configuration (no epoch checkpoints scored) the total is
    # exactly that multiple;
    # vi, lrt and bb_alpha score checkpoints and refit at the one validation chose, which may
    # differ between the runs (the accounting itself: the unit test below), so only more epochs
    for method in ("dropout", "ensemble", "swag", "laplace"):
        assert epochs[method][1] == 4 * epochs[method][0], epochs
    assert all(epochs[m][1] > epochs[m][0] for m in ("vi", "lrt", "bb_alpha")), epochs


def test_projection_counts_each_grid_configuration_and_the_chosen_final_fit(monkeypatch):
    sys.path.insert(0, os.path.dirname(BENCHMARKS))
    from benchmarks.uci import projection, registry
    from benchmarks.uci.runner import BenchmarkSettings

    seen = {}

    def fake_bundle(tasks, settings):
        spec = registry.METHODS["vi"]  # the scaled grid, in place while the bundle runs
        seen["grid"] = [c["epochs"] for c in spec.grid(None, settings.quick)]
        # each split refits at a checkpoint of its own choosing
        return [{"config": {"epochs": 3 + t.split}} for t in tasks]

    monkeypatch.setattr(projection, "run_bundle", fake_bundle)
    monkeypatch.setattr(projection, "dataset_info", lambda folder, split: None)
    monkeypatch.setattr(projection, "load_uci_split", lambda folder, split: None)
    spec = registry.METHODS["vi"]
    monkeypatch.setitem(
        registry.METHODS,
        "vi",
        projection.dataclasses.replace(
            spec, grid=lambda info, q: [{"epochs": 400}, {"epochs": 100}]
        ),
    )
    _, epochs = projection.timed_bundle("/nowhere/wine", "vi", 2, BenchmarkSettings(), 0.05, 2)
    # scaled configurations 2·round(400·0.05) = 40 and 2·round(100·0.05) = 10 per split, and
    # the final fits' own epochs (3 and 4): 2·(40 + 10) + 3 + 4
    assert seen["grid"] == [40, 10]
    assert epochs == 2 * (40 + 10) + 3 + 4
    assert registry.METHODS["vi"].grid(None, False) == [{"epochs": 400}, {"epochs": 100}]


def test_projection_lengthens_the_lever_arm_until_the_per_epoch_time_shows(monkeypatch):
    # protein's Laplace read 108.0 s at 25 epochs and 107.8 s at 100: a two-run slope of 0
    # projected the full run at its fixed part alone. Timed runs that grow by less than half
    # are followed by runs 4x longer (up to 64x), and the line is fitted through all of them.
    sys.path.insert(0, os.path.dirname(BENCHMARKS))
    from benchmarks.uci import projection
    from benchmarks.uci.runner import BenchmarkSettings

    def timed(fixed, per_epoch, noise):
        calls = []

        def fake(folder, method, splits, settings, f, mult):
            calls.append(mult)
            epochs = 25 * mult
            return fixed + per_epoch * epochs + noise.get(mult, 0.0), epochs

        return fake, calls

    monkeypatch.setattr(projection, "full_epochs", lambda *a, **k: 6250.0)
    # the slope (0.2 s/epoch) hidden by -5 s of noise at 100 epochs; 16x shows it (+75 s)
    fake, calls = timed(100.0, 0.2, {4: -5.0})
    monkeypatch.setattr(projection, "timed_bundle", fake)
    out = projection.project("/x", "laplace", 5, BenchmarkSettings(), 0.01)
    assert calls == [1, 4, 16]
    a, b = projection.line_fit([tuple(r) for r in out["runs"]])
    assert out["seconds"] == a + b * 6250.0
    # least squares through the three points: the -5 s moves the slope by
    # 75 * 5 / 78,750 = 0.0048 (the point's lever times the noise over sum (e - mean e)^2)
    assert abs(b - 0.2) < 0.006 and out["seconds"] > 1000.0  # the two-run slope gave b = 0

    # a slope the second run shows at once: two runs, as before
    fake, calls = timed(10.0, 1.0, {})
    monkeypatch.setattr(projection, "timed_bundle", fake)
    out = projection.project("/x", "vi", 5, BenchmarkSettings(), 0.01)
    assert calls == [1, 4] and abs(out["seconds"] - (10.0 + 6250.0)) < 1e-6
    # never past MAX_MULT, even with no slope at all
    fake, calls = timed(100.0, 0.0, {})
    monkeypatch.setattr(projection, "timed_bundle", fake)
    projection.project("/x", "laplace", 5, BenchmarkSettings(), 0.01)
    assert calls == [1, 4, 16, 64] and max(calls) == projection.MAX_MULT


def test_line_fit_needs_two_epoch_counts():
    sys.path.insert(0, os.path.dirname(BENCHMARKS))
    from benchmarks.uci import projection

    with pytest.raises(ValueError, match="at least two epoch counts"):
        projection.line_fit([(10.0, 25), (12.0, 25)])


def test_threads_benchmark_times_a_block_in_a_fresh_process():
    """benchmarks/threads.py's machinery: the README's first block, and one timed child run."""
    sys.path.insert(0, BENCHMARKS)
    try:
        import threads
    finally:
        sys.path.remove(BENCHMARKS)
    assert "bnn.fit(" in threads.ten_lines()
    seconds = threads._timed("import torch; assert torch.get_num_threads() >= 1", "")
    assert 0.0 <= seconds < 60.0


def test_concurrent_fits_quick_times_each_process_count(tmp_path):
    """benchmarks/concurrent_fits.py --quick: a row per process count, each with its wall time,
    the mean and largest fit and the throughput over one process (1.0× for one, by definition);
    a bad --procs is refused before any work."""
    output = tmp_path / "concurrent.md"
    text = _run("concurrent_fits.py", "--quick", "--output", str(output))
    assert output.read_text() == text.rstrip("\n") + "\n"
    number = r"([0-9.]+)"
    row = rf"^\| cpu \| (\d+) \| {number} s \| {number} s \| {number} s \| {number}× \|$"
    rows = re.findall(row, text, flags=re.M)
    assert [int(r[0]) for r in rows] == [1, 2], text
    assert rows[0][4] == "1.0"
    assert all(float(mean) <= float(largest) for _, _, mean, largest, _ in rows)
    refused = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, "concurrent_fits.py"), "--procs", "0,2"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode != 0 and "at least 1" in refused.stderr
    no_baseline = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, "concurrent_fits.py"), "--procs", "4,8"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert no_baseline.returncode != 0 and "must start with 1" in no_baseline.stderr


def _doctests_passed(script: str) -> int:
    """Run a script's doctests from its folder (it imports its siblings from there): how many
    examples passed; any failure fails the test."""
    run = subprocess.run(
        [sys.executable, "-m", "doctest", "-v", script],
        cwd=BENCHMARKS,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    found = re.search(r"\b(\d+) passed and 0 failed", run.stdout)
    assert found, run.stdout[-2000:]
    return int(found[1])


def test_suite_time_reads_the_makefile_and_pytest_summary():
    """benchmarks/suite_time.py times ``make test`` and ``make test-quick`` on the paths the
    Makefile gives pytest, read from the Makefile itself (its doctests: the quick paths, and
    pytest's closing line as numbers); the full run is the suite itself, not run here."""
    assert _doctests_passed("suite_time.py") == 3


def test_mutation_report_pieces():
    """benchmarks/mutation.py (``make mutate``): its setup.cfg, its reading of mutmut's
    results, the equivalent-mutant list and the report's merge (its doctests); a real run
    mutates a module for minutes and is not run here."""
    assert _doctests_passed("mutation.py") >= 9


def test_mutation_runs_draw_progress_bars_that_a_stopped_child_cannot_hang():
    """``mutmut`` forks each mutant's run from one process; tqdm's default lock is one
    semaphore shared by those children, so a child stopped inside a bar (at its time limit)
    would leave it held and every later bar would wait forever. Under the lines the run adds
    to its ``tests/conftest.py``, a child that takes the lock and dies holding it does not stop
    the next bar (without them this script hangs: checked by hand, and by the timeout here)."""
    import textwrap

    from benchmarks.mutation import FORK_SAFE_TQDM

    script = FORK_SAFE_TQDM + textwrap.dedent(
        """
        import os
        from tqdm.std import tqdm
        list(tqdm(range(2), disable=False))  # the parent has drawn a bar before it forks
        pid = os.fork()
        if pid == 0:  # a child stopped inside a bar: it holds the lock and never lets go
            tqdm.get_lock().acquire()
            os._exit(0)
        os.waitpid(pid, 0)
        list(tqdm(range(2), disable=False))
        print("drawn")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "drawn"


def test_mutation_jobs_must_be_positive(capsys):
    """``--jobs`` (mutants at a time, passed to mutmut as ``--max-children``) below 1 is
    refused by the parser, naming the value, before any copy or mutmut run."""
    from benchmarks import mutation

    with pytest.raises(SystemExit) as info:
        mutation.main(["--module", "bnn_pyro/metrics/ood.py", "--tests", "t.py", "--jobs", "0"])
    assert info.value.code == 2
    assert "--jobs must be >= 1, got 0" in capsys.readouterr().err


def test_laplace_glm_predict_quick_prints_both_paths():
    """benchmarks/laplace_glm_predict.py --quick: the per-layer and the full-Jacobian paths of
    the diagonal Laplace side by side, with the gap between their results."""
    text = run_script("laplace_glm_predict.py", "--quick")
    assert "per layer" in text and "full Jacobians" in text, text
