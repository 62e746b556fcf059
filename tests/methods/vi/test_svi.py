"""The SVI loop: divergence guard, kl_weight schedules, callbacks, optimizers, validation."""

from __future__ import annotations

import math

import pyro.optim
import pytest
import torch

import bnn_pyro as bp
from bnn_pyro.training import Checkpoint, linear_annealing


def _bnn() -> bp.VariationalBNN:
    torch.manual_seed(0)
    return bp.VariationalBNN(bp.nn.mlp(3, [6], 1), bp.Gaussian(scale=0.2))


def test_divergence_stops_with_a_clear_error_and_leaves_the_model_as_before(regression_data):
    X, y = regression_data
    bnn = _bnn()

    def poison(model, epoch, history):
        if epoch == 2:
            with torch.no_grad():
                model.guide.locs["net__0__weight"][0, 0] = float("nan")

    with pytest.raises(bp.TrainingDivergedError, match="epoch 3, step 0") as info:
        bnn.fit(X, y, epochs=10, batch_size=32, progress=False, callbacks=[poison])
    assert "lower learning rate" in str(info.value)
    with pytest.raises(bp.NotFittedError):  # a failed first fit: unfitted, as before it
        bnn.predict(X, num_samples=3)
    bnn.fit(X, y, epochs=2, batch_size=32, progress=False, seed=0)
    before = {k: v.clone() for k, v in bnn.state_dict().items()}
    with pytest.raises(bp.TrainingDivergedError, match="epoch 3, step 0"):
        bnn.fit(X, y, epochs=10, batch_size=32, progress=False, callbacks=[poison], seed=0)
    after = bnn.state_dict()  # a failed refit: the earlier fit, bit for bit
    assert after.keys() == before.keys()
    assert all(torch.equal(after[k], v) for k, v in before.items())
    mean, _ = bnn.predict(X, num_samples=3)  # still usable
    assert bool(torch.isfinite(mean).all())


def test_kl_weight_schedule_is_applied_per_epoch(regression_data):
    X, y = regression_data
    history = _bnn().fit(X, y, epochs=6, kl_weight=linear_annealing(4), progress=False, seed=0)
    assert history["kl_weight"] == [0.0, 0.25, 0.5, 0.75, 1.0, 1.0]
    assert math.isnan(history["kl"][0])  # beta = 0: the KL part is not observable from the loss
    # beta scales the KL part of the loss: loss = nll + beta * kl
    for loss, nll, kl, beta in zip(
        history["loss"][1:],
        history["nll"][1:],
        history["kl"][1:],
        history["kl_weight"][1:],
        strict=True,
    ):
        assert math.isclose(loss, nll + beta * kl, rel_tol=1e-6)


def test_tempering_changes_the_posterior_width(regression_data):
    X, y = regression_data
    scales = {}
    for beta in (1.0, 0.01):
        bnn = _bnn()
        bnn.fit(X, y, epochs=300, kl_weight=beta, progress=False, seed=0)
        scales[beta] = float(bnn.guide.scales()["net.0.weight"].mean())
    # a small beta down-weights the prior's pull towards its scale of 1: narrower posterior
    assert scales[0.01] < scales[1.0]


def test_callbacks_early_stopping_and_checkpoints(regression_data, tmp_path):
    X, y = regression_data
    seen = []
    history = _bnn().fit(
        X,
        y,
        epochs=50,
        progress=False,
        callbacks=[lambda m, e, h: seen.append(e) or e == 4],
    )
    assert seen == [0, 1, 2, 3, 4] and len(history["loss"]) == 5
    stopper = bp.EarlyStopping(monitor="val_nll", patience=2, min_delta=1e9)
    history = _bnn().fit(
        X, y, epochs=50, validation_data=(X[:16], y[:16]), progress=False, callbacks=[stopper]
    )
    assert len(history["val_nll"]) == 3  # no epoch improves by 1e9: stops after patience
    path = tmp_path / "ckpt.pt"
    _bnn().fit(X, y, epochs=4, progress=False, callbacks=[Checkpoint(str(path), every=2)])
    assert bp.VariationalBNN.load(path, net=bp.nn.mlp(3, [6], 1)).dataset_size == len(X)
    with pytest.raises(ValueError, match="val_nll"):
        _bnn().fit(X, y, epochs=2, progress=False, callbacks=[bp.EarlyStopping("val_nll")])


@pytest.mark.parametrize(
    "optimizer, lr",
    [
        (torch.optim.SGD, 1e-5),
        (lambda params: torch.optim.RMSprop(params, lr=1e-2), None),
        (pyro.optim.ClippedAdam({"lr": 1e-2}), None),
    ],
)
def test_torch_and_pyro_optimizers(regression_data, optimizer, lr):
    X, y = regression_data
    bnn = _bnn()
    # (the loss is the whole data set's negative ELBO, so plain SGD needs a small step)
    history = bnn.fit(X, y, epochs=60, optimizer=optimizer, lr=lr or 1e-3, progress=False, seed=0)
    assert history["loss"][-1] < history["loss"][0]


def test_validation_nll_is_reported(regression_data):
    X, y = regression_data
    history = _bnn().fit(
        X[:48], y[:48], epochs=30, validation_data=(X[48:], y[48:]), progress=False, seed=0
    )
    assert history["val_nll"][-1] < history["val_nll"][0]
