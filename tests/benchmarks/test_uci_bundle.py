"""A bundle of splits trained stacked gives each split the record run_task gives it."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from benchmarks.uci import registry, variational
from benchmarks.uci.bundle import bundled, final_groups, run_bundle
from benchmarks.uci.registry import get_method
from benchmarks.uci.runner import BenchmarkSettings, Task, run_task
from benchmarks.uci.writer import write_uci_folder

#: These tests check the harness's plumbing (records, backends, bundles, factors) on runs kept
#: a few epochs long on purpose: their fits are not meant to converge, and the library rightly
#: warns that they predict their training targets poorly. Here that warning is expected.
pytestmark = pytest.mark.filterwarnings("ignore::bnn_pyro.exceptions.TrainingInstabilityWarning")


def _small_grid(info, quick):
    base = {"lr": 3e-2, "batch_size": 16, "prior_gain": 1.0, "init_scale": 0.01, "elbo": "trace"}
    factors = {"noise_factors": [0.5, 1.0, 2.0]}  # predictive-only: one run scores all three
    # 12 epochs at 3e-2: the toy's splits choose different checkpoints (3 to 9 epochs)
    return [{**base, **factors, "epochs": 12, "noise_tau": tau} for tau in (None, 4.0)]


def _small_dropout_grid(info, quick):
    base = {"taus": [1.0, 4.0], "batch_size": 16, "lr": 1e-2}
    return [{**base, "epochs": e, "dropout": p} for p in (0.05, 0.2) for e in (3, 6)]


def _small_sgmcmc_grid(info, quick):
    base = {"batch_size": 16, "epochs": 6}  # 24 steps: short chains, round-off stays small
    return [
        {**base, "lr": lr, "prior": prior} for lr in (0.05, 0.01) for prior in ("normal", "fan_in")
    ]


def _small_decay_grid(info, quick):
    base = {"batch_size": 16, "lr": 3e-3}
    return [{**base, "epochs": 4, "weight_decay": wd} for wd in (1e-4, 1e-1)]


SETTINGS = BenchmarkSettings(validation_samples=20, test_samples=50)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(60, 3, generator=g)
    y = X[:, 0] - 0.5 * X[:, 1] + 0.3 * torch.randn(60, generator=g)
    folder = str(write_uci_folder(tmp_path_factory.mktemp("bundle") / "toy", X, y, n_splits=3))
    grids = {
        "dropout": _small_dropout_grid,
        "swag": _small_decay_grid,
        "laplace": _small_decay_grid,
        "sghmc": _small_sgmcmc_grid,
        "csghmc": _small_sgmcmc_grid,
    }
    with pytest.MonkeyPatch.context() as monkeypatch:  # the small grids, for this file only
        for name in ("vi", "lrt", "dropout", "swag", "laplace", "sghmc", "csghmc"):
            grid = grids.get(name, _small_grid)
            spec = dataclasses.replace(registry.METHODS[name], grid=grid)
            monkeypatch.setitem(registry.METHODS, name, spec)
        yield folder


@pytest.fixture(scope="module")
def vi_bundle(toy):
    """The toy's three splits of vi trained stacked, for the two tests that check vi's bundle
    (its records against split-by-split ones; its final fits shared): one bundle, not two
    (~1.4 s each here)."""
    return run_bundle([Task("toy", toy, s, "vi") for s in range(3)], SETTINGS)


@pytest.mark.parametrize("method", ["vi", "lrt", "dropout", "swag", "laplace", "sghmc", "csghmc"])
def test_bundled_records_are_the_split_by_split_records(toy, request, method):
    settings = SETTINGS
    tasks = [Task("toy", toy, s, method) for s in range(3)]
    together = (
        request.getfixturevalue("vi_bundle") if method == "vi" else run_bundle(tasks, settings)
    )
    for task, got in zip(tasks, together, strict=True):
        alone = run_task(task, settings)
        assert got["stacked"] == 3 and got["split"] == task.split
        assert got["config"] == alone["config"]
        # the same training and scoring per split, batched differently: float32 round-off
        assert got["val_ll"] == pytest.approx(alone["val_ll"], rel=1e-4)
        assert got["test_ll"] == pytest.approx(alone["test_ll"], rel=1e-4)
        assert got["rmse"] == pytest.approx(alone["rmse"], rel=1e-4)
        assert [r["config"] for r in got["records"]] == [r["config"] for r in alone["records"]]


def test_an_alpha_energy_grid_bundles_as_it_runs_split_by_split(toy, monkeypatch):
    """``elbo="alpha"`` configurations: the stacked energy in the bundle, ``fit(elbo="alpha")``
    split by split (:mod:`benchmarks.uci.variants` runs them this way)."""
    monkeypatch.setenv("BNN_PYRO_UCI_VI_OVERRIDES", '{"elbo": "alpha", "num_particles": 3}')

    def grid(info, quick):
        return [{**c, "epochs": 6} for c in variational.vi_grid(info, quick=True)]

    monkeypatch.setitem(
        registry.METHODS, "vi", dataclasses.replace(registry.METHODS["vi"], grid=grid)
    )
    settings = BenchmarkSettings(validation_samples=20, test_samples=50)
    tasks = [Task("toy", toy, s, "vi") for s in range(2)]
    for task, got in zip(tasks, run_bundle(tasks, settings), strict=True):
        alone = run_task(task, settings)
        assert got["stacked"] == 2 and got["config"]["elbo"] == "alpha"
        assert got["config"]["num_particles"] == 3
        assert got["test_ll"] == pytest.approx(alone["test_ll"], rel=1e-4)
        assert got["rmse"] == pytest.approx(alone["rmse"], rel=1e-4)


def test_an_objective_that_does_not_stack_is_refused_before_training():
    """The bundle falls back to split-by-split fits on this ValueError (fit_stacked's check)."""
    info = variational.DatasetInfo("toy", 40, 3)
    config = {**variational.vi_grid(info, quick=True)[0], "elbo": "meanfield", "num_particles": 2}
    seen = []
    with pytest.raises(ValueError, match="fit_stacked takes elbo"):
        variational.vi_train_stacked(
            config, torch.randn(2, 40, 3), torch.randn(2, 40, 1), y_stds=[1.0, 1.0], hidden=4,
            seeds=[0, 1], checkpoints=[2], reports=[seen.append] * 2, num_samples=2,
        )  # fmt: skip
    assert seen == []


def test_final_fits_share_a_run_across_epochs_and_overrides(vi_bundle):
    """The toy's splits choose different epoch counts and noise factors from one grid
    configuration; the test above checks their records equal the split-by-split ones, this one
    that they really were trained in fewer runs than there are distinct choices."""
    chosen = [r["config"] for r in vi_bundle]
    grid = _small_grid(None, False)
    groups = final_groups(registry.METHODS["vi"], grid, chosen)
    distinct = {str(sorted(c.items())) for c in chosen}
    assert len(groups) < len(distinct)
    assert any(len({chosen[k]["epochs"] for k in members}) > 1 for _, members in groups)
    for run, members in groups:
        assert run["epochs"] == max(chosen[k]["epochs"] for k in members)
        assert "noise_factor" not in run  # every factor is scored; each split keeps its own


def test_a_decaying_schedule_is_not_merged_across_epochs():
    """Only ``config["epochs"]`` is a checkpoint of a decaying schedule: a split that chose
    another epoch count (impossible from the search, but as a guard) is not cut from a run."""
    grid = [{"epochs": 8, "lr": 0.1, "lr_schedule": "cosine"}]
    chosen = [{**grid[0], "epochs": 8}, {**grid[0], "epochs": 4}]
    groups = final_groups(registry.METHODS["vi"], grid, chosen)
    assert groups == [(chosen[0], [0]), (chosen[1], [1])]


def test_final_groups_refuses_bad_input():
    spec = registry.METHODS["vi"]
    with pytest.raises(TypeError, match="spec must be a MethodSpec"):
        final_groups("vi", [], [])
    with pytest.raises(TypeError, match="configs must be a list"):
        final_groups(spec, [], ({"epochs": 2},))
    with pytest.raises(ValueError, match="every entry of configs needs an 'epochs' key"):
        final_groups(spec, [{"epochs": 4, "lr": 0.1}], [{"lr": 0.1}])


def test_only_methods_that_stack_are_bundled():
    tasks = [Task("a", "/a", s, m) for s in range(2) for m in ("vi", "swag", "ensemble")]
    groups = bundled(tasks)
    assert [len(g) for g in groups] == [2, 2, 1, 1]
    assert [{t.method for t in g} for g in groups[:2]] == [{"vi"}, {"swag"}]


@pytest.mark.parametrize("method", ["vbll", "sngp"])
def test_last_layer_rows_that_stack_bundle_as_they_run_split_by_split(tmp_path, method):
    """The tuned rows of the heads with a stacked fit train a data set's splits as one, each
    split's record (its checkpoints scored mid-run included) its one-by-one record."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(60, 3, generator=g)
    y = X[:, 0] - 0.5 * X[:, 1] + 0.3 * torch.randn(60, generator=g)
    folder = str(write_uci_folder(tmp_path / "toy", X, y, n_splits=3))
    assert get_method(method).train_stacked is not None
    assert get_method("dkl").train_stacked is None  # no stacked fit: split by split
    settings = BenchmarkSettings(quick=True, validation_samples=20, test_samples=50)
    tasks = [Task("toy", folder, s, method) for s in range(3)]
    together = run_bundle(tasks, settings)
    for task, got in zip(tasks, together, strict=True):
        alone = run_task(task, settings)
        assert got["stacked"] == 3 and got["split"] == task.split
        # the same training and scoring per split, batched differently: float32 round-off
        assert got["test_ll"] == pytest.approx(alone["test_ll"], rel=1e-4)
        assert got["rmse"] == pytest.approx(alone["rmse"], rel=1e-4)
        assert [r["config"] for r in got["records"]] == [r["config"] for r in alone["records"]]
