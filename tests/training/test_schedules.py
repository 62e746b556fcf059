"""Learning-rate schedules and iterate averaging in the one loop, for SVI and classic methods."""

from __future__ import annotations

import functools
import math

import pyro.optim
import pytest
import torch

import bnn_pyro as bp
from bnn_pyro.training import IterateAverage, LossStep, train


def _bnn() -> bp.VariationalBNN:
    torch.manual_seed(0)
    return bp.VariationalBNN(bp.nn.mlp(3, [4], 1), bp.Gaussian(scale=0.3))


def _fit(model, schedule, epochs=8, **kwargs):
    X = torch.randn(32, 3, generator=torch.Generator().manual_seed(0))
    y = X.sum(-1)
    return model.fit(
        X, y, epochs=epochs, lr=0.1, lr_schedule=schedule, progress=False, seed=0, **kwargs
    )


@pytest.mark.parametrize(
    ("schedule", "factors"),
    [
        ("cosine", [0.5 * (1 + math.cos(math.pi * e / 8)) for e in range(8)]),
        ("step", [1, 1, 1, 1, 0.1, 0.1, 0.01, 0.01]),
        (
            "warmup_cosine",
            [0.0] + [0.5 * (1 + math.cos(math.pi * (e / 8 - 0.05) / 0.95)) for e in range(1, 8)],
        ),
        (lambda progress: 1 - progress, [1 - e / 8 for e in range(8)]),
    ],
)
@pytest.mark.parametrize("method", ["vi", "dropout"])
def test_the_schedule_sets_the_lr_of_each_epoch(schedule, factors, method):
    model = (
        _bnn()
        if method == "vi"
        else bp.make("dropout", bp.nn.mlp(3, [4], 1, dropout=0.1), bp.Gaussian(scale=0.3))
    )
    history = _fit(model, schedule)
    assert history["lr"] == pytest.approx([0.1 * f for f in factors], abs=1e-12)


def test_a_torch_scheduler_is_stepped_once_per_epoch():
    step_lr = functools.partial(torch.optim.lr_scheduler.StepLR, step_size=3, gamma=0.5)
    history = _fit(_bnn(), step_lr)
    assert history["lr"] == pytest.approx([0.1] * 3 + [0.05] * 3 + [0.025] * 2)


def test_the_svi_default_is_cosine_and_constant_records_no_lr():
    # the default of an SVI fit (lr_schedule=None) decays the rate to 0: it converges (see
    # DEFAULT_SCHEDULE and test_exact_posterior.py); "constant" keeps it; a pyro.optim
    # optimizer, which no schedule can drive, keeps its constant rate by default
    cosine = [0.1 * 0.5 * (1 + math.cos(math.pi * e / 8)) for e in range(8)]
    assert _fit(_bnn(), None)["lr"] == pytest.approx(cosine, abs=1e-12)
    assert "lr" not in _fit(_bnn(), "constant")
    assert "lr" not in _fit(_bnn(), None, optimizer=pyro.optim.Adam({"lr": 0.1}))
    dropout = bp.make("dropout", bp.nn.mlp(3, [4], 1, dropout=0.1), bp.Gaussian(scale=0.3))
    assert "lr" not in _fit(dropout, None)  # the classic methods keep their papers' constant


def test_bad_schedules_are_refused_before_any_work():
    bnn = _bnn()
    before = {k: v.clone() for k, v in bnn.state_dict().items()}
    with pytest.raises(ValueError, match="lr_schedule must be one of"):
        _fit(bnn, "linear")
    with pytest.raises(ValueError, match="average must be a fraction"):
        _fit(bnn, None, average=1.5)
    assert all(torch.equal(v, bnn.state_dict()[k]) for k, v in before.items())
    with pytest.raises(ValueError, match="needs a torch optimizer"):
        _fit(bnn, "cosine", optimizer=pyro.optim.Adam({"lr": 0.1}))


def test_averaging_leaves_the_mean_of_the_iterates_of_the_window():
    """One step per epoch: the average over the last 4 of 10 epochs equals the mean of the
    parameters recorded after each of those epochs (by a callback, which runs after the step)."""
    torch.manual_seed(0)
    net = torch.nn.Linear(2, 1)
    x, y = torch.randn(16, 2), torch.randn(16, 1)
    seen = []

    def record(module, epoch, history):
        if epoch >= 6:
            seen.append(module.weight.detach().clone())

    step = LossStep(
        lambda xb, yb: ((net(xb) - yb) ** 2).mean(), torch.optim.SGD(net.parameters(), 0.1)
    )
    train(net, step, lambda: [(x, y)], epochs=10, callbacks=[record], progress=False, average=0.4)
    assert len(seen) == 4
    torch.testing.assert_close(net.weight.detach(), torch.stack(seen).mean(0))
    # the window is a real choice: the last iterate differs from the average
    assert not torch.allclose(seen[-1], net.weight.detach())


def test_iterate_average_checks_its_fraction():
    with pytest.raises(ValueError, match="average must be a fraction"):
        IterateAverage(torch.nn.Linear(1, 1), 0.0, epochs=3)
