"""The tuned rows of VBLL, SNGP and DKL: a checkpoint scored mid-run is the shorter fit."""

from __future__ import annotations

import pytest
import torch

from benchmarks.uci.last_layer import (
    GRID_OPTIONS,
    last_layer_grid,
    last_layer_specs,
    last_layer_train,
    last_layer_train_stacked,
    scored_copy,
)
from benchmarks.uci.method import DatasetInfo
from benchmarks.uci.registry import DEV_METHODS, get_method
from bnn_pyro.likelihoods import Gaussian
from bnn_pyro.nn import mlp
from bnn_pyro.registry import make

pytestmark = pytest.mark.filterwarnings("ignore::bnn_pyro.exceptions.TrainingInstabilityWarning")

_OPTIONS = {"vbll": {"prior_scale": 0.1}, "sngp": {"lengthscale": 2.0}, "dkl": {}}


def _data(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(48, 3, generator=g)
    return x, x[:, :1] - 0.5 * x[:, 1:2] + 0.3 * torch.randn(48, 1, generator=g)


@pytest.mark.parametrize("method", ["vbll", "sngp", "dkl"])
def test_a_checkpoint_is_the_fit_that_stops_there(method, capsys):
    """The predictive reported at epoch 3 of a 6-epoch run is ``fit(epochs=3)``'s: the copy
    completed mid-run (SNGP's Laplace posterior, DKL's exact-GP data, the noise estimate) is
    the shorter fit. Without the completion SNGP's copy has no posterior and DKL's no data."""
    x, y = _data()
    batch = None if method == "dkl" else 16
    config = {"epochs": 6, "lr": 3e-2, "batch_size": batch, **_OPTIONS[method]}
    probe = torch.randn(7, 3, generator=torch.Generator().manual_seed(1))
    seen = {}
    last_layer_train(config, x, y, y_std=1.0, hidden=8, seed=5, checkpoints=[3, 6],
                     report=lambda e, p: seen.setdefault(e, p(probe)), num_samples=4,
                     method=method)  # fmt: skip
    torch.manual_seed(5)
    short = make(method, mlp(3, [8], 1), Gaussian(scale="learned"), **_OPTIONS[method])
    short.fit(x, y, epochs=3, batch_size=batch or len(x), lr=3e-2, progress=False, seed=5)
    loc, scale = short.predictive_gaussian(probe, seed=5)
    # the same operations in the same order: equal up to float32 round-off
    torch.testing.assert_close(seen[3][0], loc, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(seen[3][1], scale, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(seen[6][1], scale, rtol=1e-3)  # six epochs are not three
    assert capsys.readouterr().err == ""  # no progress bar per run: the harness has its own


def test_the_scored_copy_leaves_the_running_model_alone():
    x, y = _data()
    torch.manual_seed(0)
    model = make("sngp", mlp(3, [8], 1), Gaussian(scale="learned"))
    tensors = lambda m: dict([*m.named_parameters(), *m.named_buffers()])  # noqa: E731
    before = {k: v.clone() for k, v in tensors(model).items()}
    done = scored_copy(model, x, y)
    assert all(torch.equal(before[k], v) for k, v in tensors(model).items())
    assert not torch.equal(done.head.weight, model.head.weight)  # the copy's posterior mean


def test_stacked_checkpoints_are_each_split_on_its_own(capsys):
    """Two splits trained stacked report at each checkpoint what each reports alone."""
    (x0, y0), (x1, y1) = _data(0), _data(1)
    config = {"epochs": 4, "lr": 3e-2, "batch_size": 16, "prior_scale": 0.1}
    probe = torch.randn(5, 3)
    together: dict = {}
    last_layer_train_stacked(
        config, torch.stack([x0, x1]), torch.stack([y0, y1]), y_stds=[1.0, 1.0], hidden=8,
        seeds=[3, 4], checkpoints=[2, 4], num_samples=4, method="vbll",
        reports=[lambda e, p, k=k: together.setdefault((k, e), p(probe)) for k in range(2)],
    )  # fmt: skip
    for k, (x, y, seed) in enumerate([(x0, y0, 3), (x1, y1, 4)]):
        alone: dict = {}
        last_layer_train(config, x, y, y_std=1.0, hidden=8, seed=seed, checkpoints=[2, 4],
                         report=lambda e, p, a=alone: a.setdefault(e, p(probe)), num_samples=4,
                         method="vbll")  # fmt: skip
        for epoch in (2, 4):  # stacked and alone batch the same sums differently: round-off
            torch.testing.assert_close(together[k, epoch][0], alone[epoch][0], rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(together[k, epoch][1], alone[epoch][1], rtol=1e-4, atol=1e-5)
    assert capsys.readouterr().err == ""
    with pytest.raises(ValueError, match="zip"):  # a report per split, no fewer
        last_layer_train_stacked(
            config, torch.stack([x0, x1]), torch.stack([y0, y1]), y_stds=[1.0, 1.0], hidden=8,
            seeds=[3, 4], checkpoints=[2], num_samples=4, method="vbll", reports=[print],
        )  # fmt: skip


def test_the_grids_search_the_options_they_name():
    info = DatasetInfo("toy", 455, 13)
    for method, options in GRID_OPTIONS.items():
        grid = last_layer_grid(method)(info, False)
        assert all(set(o) <= set(c) for o, c in zip(options * 2, grid, strict=False))
        assert len({tuple(sorted(c.items())) for c in grid}) == len(grid)  # no repeats
        quick = last_layer_grid(method)(info, True)
        assert len(quick) == 1 and quick[0]["epochs"] == 4
    assert [c["lr"] for c in last_layer_grid("dkl")(info, False)] == [1e-2]
    assert get_method("vbll") is DEV_METHODS["vbll"] and get_method("dkl").train_stacked is None
    with pytest.raises(ValueError, match="no tuned last-layer row for 'vi'"):
        last_layer_grid("vi")


def test_the_grids_epochs_are_about_ten_thousand_steps_within_their_bounds():
    grid = last_layer_grid("sngp")
    assert grid(DatasetInfo("toy", 455, 13))[0]["epochs"] == 800  # 12 steps an epoch; not quick
    assert grid(DatasetInfo("toy", 40, 3))[0]["epochs"] == 2000  # 1 step an epoch: the cap
    assert grid(DatasetInfo("toy", 10**6, 3))[0]["epochs"] == 40  # 25,000 steps: the floor


def test_the_rows_run_their_own_method_with_its_grid_and_eight_checkpoints():
    """What the harness reads of each row: its label and description (the tables print them),
    its grid and checkpoints, and its train functions, each training its own method."""
    info = DatasetInfo("toy", 455, 13)
    specs = {spec.name: spec for spec in last_layer_specs()}  # as the registry builds them
    assert specs.keys() == DEV_METHODS.keys()
    assert {name: (spec.label, spec.description, spec.cost) for name, spec in
            specs.items()} == {
        "vbll": ("VBLL", "VBLL, dense covariance, learned noise; prior scale 1 or 0.1; Adam "
                 "1e-3, batch 32", 10.0),
        "sngp": ("SNGP", "SNGP, bound 0.95, 1,024 features; lengthscale 1 or 2; Adam 1e-3, "
                 "batch 32", 10.0),
        "dkl": ("DKL", "deep-kernel exact GP, RBF kernel; full-batch Adam at 1e-2, 1,000 steps",
                10.0),
    }  # fmt: skip
    x, y = _data()
    for name, spec in specs.items():
        assert spec.grid(info, False) == last_layer_grid(name)(info, False)
        assert spec.checkpoints({"epochs": 800}) == list(range(100, 900, 100))
        config = spec.grid(info, True)[0]
        seen = []
        spec.train(config, x, y, y_std=1.0, hidden=8, seed=0, checkpoints=[4], num_samples=4,
                   report=lambda e, p, s=seen: s.append(p))  # fmt: skip
        assert type(seen[0].__self__).__name__ == name.upper()  # the method's own model
        if spec.train_stacked is not None:
            seen = []
            spec.train_stacked(config, torch.stack([x, x]), torch.stack([y, y]), y_stds=[1.0, 1.0],
                               hidden=8, seeds=[0, 1], checkpoints=[4], num_samples=4,
                               reports=[lambda e, p, s=seen: s.append(p)] * 2)  # fmt: skip
            assert [type(p.__self__).__name__ for p in seen] == [name.upper()] * 2


def test_generic_model_builds_the_protocols_net_and_refuses_bad_input_before_building():
    from benchmarks.uci.generic import generic_model

    model = generic_model("vbll", 3, 8, 0, prior_scale=0.1)
    assert model.prior_scale == 0.1 and model(torch.zeros(2, 3)).shape[0] == 2
    again = generic_model("vbll", 3, 8, 0, prior_scale=0.1)  # the seed fixes the weights
    pairs = zip(model.parameters(), again.parameters(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
    with pytest.raises(ValueError, match="method must be one of"):
        generic_model("nope", 3, 8, 0)
    with pytest.raises(ValueError, match="prior_scale must be a finite float > 0.0"):
        generic_model("vbll", 3, 8, 0, prior_scale=-1.0)
