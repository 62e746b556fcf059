"""Data-parallel training on 2 gloo processes (CPU), checked against one process.

The tests start two ranks of ``ddp_worker.py`` (the way torchrun does) under a hard timeout, so
a hung collective fails the test instead of the suite. The scenarios that end normally run one
after another in one such run (the ``shared`` fixture): each seeds its own draws and writes its
own folder, and each test reads its own; every start of the two processes costs a few seconds of
imports each (16 s of wall time per start on a loaded 2-core machine).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import bnn_pyro as bp
from tests.distributed.launch import launch, run_past_exit_race
from tests.methods.vi.test_exact_posterior import _data, _exact

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed unavailable")

WORKER = Path(__file__).with_name("ddp_worker.py")


#: The scenarios of the shared run, in its order (``dies`` ends its run: a run of its own).
SHARED = ("gradient", "classic", "others", "predict", "posterior")


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> dict[str, list[dict]]:
    """Every scenario of :data:`SHARED` in one 2-rank run: ``{scenario: [rank 0's, rank 1's]}``
    (what each rank wrote), plus ``"folder"``: the run's folder."""
    folder = tmp_path_factory.mktemp("ddp")
    run = launch(WORKER, [",".join(SHARED), str(folder)], world=2, timeout=400.0)
    assert run.returncodes == [0, 0], run.stderr
    out: dict = {"folder": folder}
    for scenario in SHARED:
        out[scenario] = [
            torch.load(folder / scenario / f"rank{r}.pt", weights_only=False) for r in range(2)
        ]
    return out


def test_one_step_averages_the_two_shards_gradients(shared):
    out = shared["gradient"]
    mean = [(a + b) / 2 for a, b in zip(out[0]["local"], out[1]["local"], strict=True)]
    for rank in range(2):
        # SGD with lr 1: the step is the averaged gradient (float32 sums: 1e-6 relative)
        for got, want in zip(out[rank]["step"], mean, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    # and the two shards' gradients differ: the average is not one rank's own
    assert not torch.allclose(out[0]["local"][0], out[1]["local"][0])


def test_two_ranks_reach_the_exact_posterior_with_one_checkpoint_writer(shared):
    """The bounds of ``test_default_fit_recovers_the_exact_posterior`` (one process). A KL
    counted on each rank, or N taken as a rank's 100 rows instead of 200, moves the variances
    by a factor of about 2 and fails them."""
    out = shared["posterior"]
    X, y = _data()
    mean, std = _exact(X, y)
    loc, scale = out[0]["loc"], out[0]["scale"]
    assert float(((loc - mean).abs() / std).max()) < 0.1, (loc, mean)
    assert float((scale**2 / std**2 - 1).abs().max()) < 0.10, (scale, std)
    # identical parameters and histories on both ranks
    for key, value in out[0]["state"].items():
        assert torch.equal(value, out[1]["state"][key]), key
    assert out[0]["loss"] == out[1]["loss"]
    # Checkpoint writes from rank 0 only
    folder = shared["folder"] / "posterior"
    assert (folder / "checkpoint-rank0.pt").exists()
    assert not (folder / "checkpoint-rank1.pt").exists()


def test_classic_methods_train_data_parallel_and_agree_across_ranks(shared):
    out = shared["classic"]
    assert out[0]["dropout_history"] == out[1]["dropout_history"]
    assert torch.equal(out[0]["dropout"], out[1]["dropout"])
    # it learned: the targets' std is 1.8 and their noise 0.5; the fit's error is near the noise
    X, y = _data()
    rmse = float((out[0]["dropout"] - y[:10]).pow(2).mean().sqrt())
    assert rmse < 0.8, rmse
    for a, b in zip(out[0]["laplace"], out[1]["laplace"], strict=True):
        assert torch.equal(a, b)
    # Laplace's curvature: each rank's part of the rows, summed = one process on all of them
    # (float32 sums in another order: 1e-5 relative)
    torch.manual_seed(3)
    one = bp.make("laplace", bp.nn.mlp(3, [8], 1), bp.Gaussian(scale=0.5))
    one.fit(X, y, epochs=0, progress=False)
    assert out[0]["n_data"] == out[1]["n_data"] == len(X)
    for rank in range(2):
        torch.testing.assert_close(
            out[rank]["precision"], one.posterior_precision, rtol=1e-5, atol=1e-5
        )


@pytest.mark.parametrize("name", ["ensemble", "swag", "vbnn", "hidden_layer", "lrt"])
def test_every_other_gradient_trained_method_agrees_across_ranks(shared, name):
    others = shared["others"]
    (loss0, pred0), (loss1, pred1) = others[0][name], others[1][name]
    assert loss0 == loss1 and torch.equal(pred0, pred1)  # one model, trained together
    assert loss0[-1] < loss0[0]  # and it trained
    assert torch.isfinite(pred0).all()


def test_predict_shards_the_rows_and_gathers_the_same_numbers(shared):
    out = shared["predict"]
    assert out[0]["equal"] and out[1]["equal"]  # = each rank predicting every row alone
    assert out[0]["dropout_equal"] and out[1]["dropout_equal"]
    assert torch.equal(out[0]["mean"], out[1]["mean"])


def test_a_rank_that_dies_stops_the_other_with_a_clear_error(tmp_path):
    ranks = launch(WORKER, ["dies", str(tmp_path)], world=2, timeout=90.0)
    assert ranks.returncodes[1] == 3  # it died
    assert ranks.returncodes[0] not in (0, None), ranks.stderr[0]  # and rank 0 did not hang
    message = (tmp_path / "dies" / "rank0.err").read_text()
    assert "DistributedError" in message and "peer process died" in message, message
    assert ranks.seconds < 90.0


def test_an_unchanged_script_runs_under_torchrun(tmp_path):
    """``examples/train_ddp.py`` never mentions torch.distributed; torchrun's environment is
    enough (``fit`` initialises the group)."""
    import sys

    from tests.distributed.launch import ROOT

    script = ROOT / "examples" / "train_ddp.py"
    out = tmp_path / "result.pt"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    done = run_past_exit_race(
        [*command, str(script), "--epochs", "30", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=150,
        env={**__import__("os").environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = torch.load(out, weights_only=False)  # written by rank 0
    assert result["ranks"] == 2  # fit found (and made) the process group
    assert result["rmse"] < 0.3, result["rmse"]  # sin(x) learned (noise 0.1, 30 epochs)
    assert done.stdout.count("final loss") == 1, done.stdout  # one line, from rank 0


def test_a_group_made_by_fit_is_destroyed_at_exit(monkeypatch):
    """The group ``active()`` makes under torchrun's environment is registered for destruction at
    interpreter exit (a gloo group left alive aborted a finished rank at exit: "terminate called
    without an active exception"); a group the script made itself is left to the script."""
    import atexit

    from bnn_pyro.training import distributed

    state = {"initialized": False, "destroyed": 0}
    registered: list = []
    monkeypatch.setattr(dist, "is_initialized", lambda: state["initialized"])
    monkeypatch.setattr(dist, "init_process_group", lambda backend: state.update(initialized=True))
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(
        dist,
        "destroy_process_group",
        lambda: state.update(destroyed=state["destroyed"] + 1, initialized=False),
    )
    monkeypatch.setattr(atexit, "register", registered.append)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    assert distributed.active()
    assert registered == [distributed._destroy_own_group]
    assert distributed.active() and len(registered) == 1  # made once, registered once
    registered[0]()
    assert state == {"initialized": False, "destroyed": 1}
    registered[0]()  # the script destroyed it already: nothing to do
    assert state["destroyed"] == 1


@pytest.mark.parametrize(
    ("gpus", "ranks", "backend", "device"),
    [
        (0, 2, "gloo", None),  # a CPU machine
        (1, 2, "gloo", None),  # two ranks, one GPU: nccl cannot put both on it
        (2, 2, "cpu:gloo,cuda:nccl", 1),  # a GPU per rank: rank 1 (LOCAL_RANK 1) takes GPU 1
    ],
)
def test_the_group_fit_makes_follows_the_gpus_there_are(monkeypatch, gpus, ranks, backend, device):
    """A torchrun group made by ``active()`` uses nccl only where every local rank has a GPU of
    its own; with fewer GPUs (one GPU and two ranks, or a CPU model on a GPU machine) it is gloo,
    and no rank is pointed at a GPU that is not there. (nccl whenever CUDA was available broke
    every CPU torchrun run on a GPU machine.)"""
    import atexit

    from bnn_pyro.training import distributed

    made: list = []
    chosen: list = []
    monkeypatch.setattr(dist, "is_initialized", lambda: bool(made))
    monkeypatch.setattr(dist, "init_process_group", made.append)
    monkeypatch.setattr(dist, "get_world_size", lambda: ranks)
    monkeypatch.setattr(atexit, "register", lambda fn: None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    for name, value in {"WORLD_SIZE": ranks, "LOCAL_WORLD_SIZE": ranks, "RANK": 1}.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    assert distributed.active()
    assert made == [backend]
    assert chosen == ([] if device is None else [device])
