"""A bundle of splits trained stacked gives each split the record run_task gives it."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from benchmarks.uci import registry
from benchmarks.uci.bundle import bundled, run_bundle
from benchmarks.uci.runner import BenchmarkSettings, Task, run_task
from benchmarks.uci.writer import write_uci_folder


def _small_grid(info, quick):
    base = {"lr": 3e-3, "batch_size": 16, "prior_gain": 1.0, "init_scale": 0.01, "elbo": "trace"}
    return [{**base, "epochs": 6, "noise_tau": tau} for tau in (None, 4.0)]


def _small_dropout_grid(info, quick):
    base = {"taus": [1.0, 4.0], "batch_size": 16, "lr": 1e-2}
    return [{**base, "epochs": e, "dropout": p} for p in (0.05, 0.2) for e in (3, 6)]


def _small_decay_grid(info, quick):
    base = {"batch_size": 16, "lr": 3e-3}
    return [{**base, "epochs": 4, "weight_decay": wd} for wd in (1e-4, 1e-1)]


@pytest.fixture
def toy(tmp_path, monkeypatch):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(60, 3, generator=g)
    y = X[:, 0] - 0.5 * X[:, 1] + 0.3 * torch.randn(60, generator=g)
    folder = str(write_uci_folder(tmp_path / "toy", X, y, n_splits=3))
    grids = {
        "dropout": _small_dropout_grid,
        "swag": _small_decay_grid,
        "laplace": _small_decay_grid,
    }
    for name in ("vi", "lrt", "dropout", "swag", "laplace"):
        grid = grids.get(name, _small_grid)
        spec = dataclasses.replace(registry.METHODS[name], grid=grid)
        monkeypatch.setitem(registry.METHODS, name, spec)
    return folder


@pytest.mark.parametrize("method", ["vi", "lrt", "dropout", "swag", "laplace"])
def test_bundled_records_are_the_split_by_split_records(toy, method):
    settings = BenchmarkSettings(validation_samples=20, test_samples=50)
    tasks = [Task("toy", toy, s, method) for s in range(3)]
    together = run_bundle(tasks, settings)
    for task, got in zip(tasks, together, strict=True):
        alone = run_task(task, settings)
        assert got["stacked"] == 3 and got["split"] == task.split
        assert got["config"] == alone["config"]
        # the same training and scoring per split, batched differently: float32 round-off
        assert got["val_ll"] == pytest.approx(alone["val_ll"], rel=1e-4)
        assert got["test_ll"] == pytest.approx(alone["test_ll"], rel=1e-4)
        assert got["rmse"] == pytest.approx(alone["rmse"], rel=1e-4)
        assert [r["config"] for r in got["records"]] == [r["config"] for r in alone["records"]]


def test_only_methods_that_stack_are_bundled():
    tasks = [Task("a", "/a", s, m) for s in range(2) for m in ("vi", "swag", "ensemble")]
    groups = bundled(tasks)
    assert [len(g) for g in groups] == [2, 2, 1, 1]
    assert [{t.method for t in g} for g in groups[:2]] == [{"vi"}, {"swag"}]
