"""Stopping the UCI harness: SIGTERM to the parent, or Ctrl-C (SIGINT to its process group),
stops its worker processes (no orphans) and leaves the resume file with complete records only.

A real child process runs ``python -m benchmarks.uci --jobs 2`` on a tiny synthetic data set;
once a worker has finished a task (so the workers are running and the resume file is being
written), the signal is sent; every process the harness had started must be gone within the
timeout, and every line of the resume file must be a whole JSON record.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from benchmarks.uci import write_uci_folder
from benchmarks.uci.cli import RUNS_FILE

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 120.0  # seconds for each wait; a run of all the tasks would take several minutes


def _descendants(root: int) -> set[int]:
    """The pids of all living processes below ``root`` (from /proc; no psutil needed)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z":
                parents[int(entry)] = int(fields[1])
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait(condition, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {TIMEOUT:.0f} s waiting for {what}")
        time.sleep(0.1)


def _records(path: Path) -> list[dict]:
    """Every line of the resume file, which must each be a complete JSON record."""
    text = path.read_text() if path.exists() else ""
    assert text == "" or text.endswith("\n"), "the resume file ends in half a line"
    records = [json.loads(line) for line in text.splitlines()]  # raises on a broken line
    for record in records:
        assert {"dataset", "split", "method", "settings"} <= set(record)
        assert "test_ll" in record or "error" in record
    return records


FOLDERS = tuple(f"toy_{i}" for i in range(8))


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("uci-signals")
    g = torch.Generator().manual_seed(0)
    X = torch.randn(80, 3, generator=g)
    y = X[:, 0] - X[:, 1] + 0.5 * torch.randn(80, generator=g)
    # eight data sets: the splits of a stacked method finish together as one unit, so one data
    # set alone can be done before the signal lands; eight leave seconds of work
    for name in FOLDERS:
        write_uci_folder(root / name, X, y, n_splits=4)
    return root


@pytest.mark.parametrize("how", ["SIGTERM to the parent", "Ctrl-C to the group"])
def test_a_stopped_harness_leaves_no_workers_and_whole_records(data_root, tmp_path, how):
    out = tmp_path / "out"
    argv = ["--data", str(data_root), "--splits", "all", "--methods", "all", "--quick"]
    harness = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.uci", *argv, "--jobs", "2", "--out", str(out)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a shell gives a job
        # a foreground job's Ctrl-C: SIGINT handled by default, even when this test process was
        # started in the background (which ignores SIGINT, and children inherit that)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    runs = out / RUNS_FILE
    workers: set[int] = set()
    try:
        _wait(lambda: runs.exists() and runs.read_text().count("\n") >= 1, "a finished task")
        workers = _descendants(harness.pid)
        assert len(workers) >= 2, "the worker processes were not found"
        if how.startswith("SIGTERM"):
            os.kill(harness.pid, signal.SIGTERM)
        else:
            os.killpg(harness.pid, signal.SIGINT)
        code = harness.wait(TIMEOUT)
        _wait(lambda: not any(_alive(pid) for pid in workers), "the workers to exit")
    finally:  # whatever happened, nothing this test started keeps running
        if harness.poll() is None:
            os.killpg(harness.pid, signal.SIGKILL)
            harness.wait(TIMEOUT)
        for pid in workers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    stderr = harness.stderr.read()
    assert code == 130, stderr
    assert "interrupted" in stderr and "--resume" in stderr, stderr
    records = _records(runs)
    assert 1 <= len(records) < len(FOLDERS) * 4 * 6, "the run was not stopped part-way"
