"""The UCI harness through joblib's backends: the same records in one process, in loky worker
processes and on a local Dask cluster; a run stopped under one backend resumes under another;
an unknown or missing backend is refused before any work."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from benchmarks.uci import write_uci_folder
from benchmarks.uci.cli import RUNS_FILE, main
from benchmarks.uci.parallel import BACKENDS, check_backend, run_tasks
from benchmarks.uci.runner import BenchmarkSettings, Task

#: These tests check the harness's plumbing (records, backends, bundles, factors) on runs kept
#: a few epochs long on purpose: their fits are not meant to converge, and the library rightly
#: warns that they predict their training targets poorly. Here that warning is expected.
pytestmark = pytest.mark.filterwarnings("ignore::bnn_pyro.exceptions.TrainingInstabilityWarning")

try:  # dask's scheduler itself: a folder named "distributed" on the path is not it
    from distributed import Client  # noqa: F401

    HAS_DASK = True
except ImportError:
    HAS_DASK = False
SCORES = ("dataset", "split", "method", "test_ll", "rmse", "config")


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("uci-backends")
    g = torch.Generator().manual_seed(1)
    X = torch.randn(60, 3, generator=g)
    y = X[:, 0] - 2.0 * X[:, 1] + 0.3 * torch.randn(60, generator=g)
    write_uci_folder(root / "toy", X, y, n_splits=2)
    return root


def _scores(records: list[dict]) -> list[dict]:
    """What a record says about the model (not how long it took or where it ran)."""
    return [{k: r[k] for k in SCORES} for r in records]


ARGV = ["--methods", "ensemble,vi", "--quick", "--quiet"]
TASKS = [(k, m) for k in (0, 1) for m in ("ensemble", "vi")]


@pytest.fixture(scope="module")
def whole(toy: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The four tasks (two splits of ensemble and vi) run whole by the command, in this process
    (jobs 1): the records every backend must give, and the table a resumed run must write. One
    run for both tests (they ran these same tasks twice, ~5 s each here)."""
    out = tmp_path_factory.mktemp("uci-whole")
    assert main(["--data", str(toy), *ARGV, "--out", str(out), "--splits", "all"]) == 0
    return out


@pytest.fixture(scope="module")
def one_process(whole: Path) -> list[dict]:
    records = [json.loads(line) for line in (whole / RUNS_FILE).read_text().splitlines()]
    assert sorted((r["split"], r["method"]) for r in records) == TASKS
    return sorted(records, key=lambda r: TASKS.index((r["split"], r["method"])))


@pytest.mark.parametrize(
    "backend",
    [
        "loky",
        pytest.param(
            "dask", marks=pytest.mark.skipif(not HAS_DASK, reason="dask.distributed missing")
        ),
    ],
)
def test_every_backend_gives_the_records_of_one_process(toy, one_process, backend):
    # the tasks are seeded from (data set, split, method): where they run changes nothing
    tasks = [Task("toy", str(toy / "toy"), k, m) for k, m in TASKS]
    records = run_tasks(
        tasks, BenchmarkSettings(quick=True), jobs=2, progress=False, backend=backend
    )
    assert all("error" not in r for r in records), records
    assert _scores(records) == _scores(one_process)


def _table(out: Path) -> dict:
    payload = json.loads((out / "uci.json").read_text())
    return {k: v for k, v in payload.items() if k in ("results", "hyperparameters")}


@pytest.mark.skipif(not HAS_DASK, reason="dask.distributed missing")
def test_a_run_stopped_under_loky_resumes_on_dask(toy, whole, tmp_path):
    argv = ["--data", str(toy), *ARGV]
    parts = tmp_path / "parts"
    # "stopped" after split 0 (its records are in the resume file), then resumed on Dask
    assert main([*argv, "--out", str(parts), "--splits", "0", "--jobs", "2"]) == 0
    resumed = [*argv, "--out", str(parts), "--splits", "all", "--resume", "--jobs", "2"]
    assert main([*resumed, "--backend", "dask"]) == 0
    assert len((parts / RUNS_FILE).read_text().splitlines()) == 4  # 2 + the 2 others, once
    assert _table(parts) == _table(whole)


@pytest.mark.parametrize(
    ("backend", "message"),
    [("spark", "invalid choice: 'spark'"), ("ray", "pip install 'ray'")],
)
def test_an_unknown_or_missing_backend_is_refused_naming_it(
    toy, tmp_path, capsys, monkeypatch, backend, message
):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)  # ray: not installed
    with pytest.raises(SystemExit) as stop:
        main(["--data", str(toy), "--out", str(tmp_path), "--jobs", "2", "--backend", backend])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "--backend" in err and message in err, err
    assert not (tmp_path / RUNS_FILE).exists()  # refused before any work


def test_check_backend_and_the_scheduler_option(toy, tmp_path, capsys):
    assert set(BACKENDS) >= {"loky", "dask", "ray"}
    with pytest.raises(ValueError, match="backend must be one of"):
        check_backend("threads")
    with pytest.raises(SystemExit):
        main(["--data", str(toy), "--out", str(tmp_path), "--scheduler", "tcp://x:1"])
    assert "--scheduler is only used with --backend dask" in capsys.readouterr().err
