"""The classic methods' shared training pieces (``methods/classic/training.py``), value by value:
``check_fit_args`` (each refusal word for word, each accepted value passed on), the residual
noise scale against its closed form, the output probe, and ``train_epochs``'s validation score,
callbacks, progress bar and divergence message."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

from bnn_pyro.exceptions import TrainingDivergedError
from bnn_pyro.methods.classic.training import (
    check_fit_args,
    module_device,
    probe,
    residual_noise_scale,
    train_epochs,
)
from bnn_pyro.training.callbacks import EarlyStopping

OK = dict(
    epochs=3, batch_size=8, lr=0.1, weight_decay=0.0, optimizer=None, progress=False, seed=None
)


def test_the_settings_are_the_arguments_given():
    """Every argument lands in its own field (the order of TrainSettings' fields)."""
    stop = EarlyStopping(monitor="val_loss")
    settings = check_fit_args(
        epochs=4, batch_size=16, lr=0.05, weight_decay=0.01, optimizer="sgd", progress=True,
        seed=7, callbacks=[stop], validation_data=("x", "y"), lr_schedule="cosine",
        average=0.5,
    )  # fmt: skip
    assert (settings.epochs, settings.batch_size, settings.lr, settings.weight_decay) == (
        4, 16, 0.05, 0.01,
    )  # fmt: skip
    assert (settings.optimizer, settings.progress, settings.seed) == ("sgd", True, 7)
    assert settings.callbacks == (stop,)
    assert settings.validation_data == ("x", "y")
    assert (settings.lr_schedule, settings.average, settings.resume) == ("cosine", 0.5, None)


@pytest.mark.parametrize(
    ("name", "value", "error", "message"),
    [
        ("epochs", 0, ValueError, "epochs must be an int >= 1, got 0"),
        ("batch_size", 0, ValueError, "batch_size must be an int >= 1, got 0"),
        ("lr", 0.0, ValueError, "lr must be a finite float > 0.0, got 0.0"),
        ("weight_decay", -0.1, ValueError, "weight_decay must be a finite float >= 0.0, got -0.1"),
        ("optimizer", "bogus", ValueError, "optimizer must be one of ('adam', 'sgd'), got 'bogus'"),
        ("progress", 1, TypeError, "progress must be a bool, got int (1)"),
        ("seed", -1, ValueError, "seed must be an int >= 0, got -1"),
        (
            "lr_schedule",
            "bogus",
            ValueError,
            "lr_schedule must be one of ('constant', 'cosine', 'step', 'warmup_cosine') or a "
            "callable, got 'bogus'",
        ),
        ("average", 2.0, ValueError, "average must be a fraction of the epochs in (0, 1], got 2.0"),
    ],
)
def test_each_bad_argument_is_refused_by_name(name, value, error, message):
    with pytest.raises(error) as info:
        check_fit_args(**{**OK, name: value})
    assert str(info.value) == message


def test_one_epoch_and_no_weight_decay_are_valid_unless_a_minimum_says_otherwise():
    """epochs=1 passes the default minimum of 1 (min_epochs=2 refuses it); weight_decay=0 is
    valid (no penalty)."""
    assert check_fit_args(**{**OK, "epochs": 1}).epochs == 1
    assert check_fit_args(**{**OK, "weight_decay": 0.0}).weight_decay == 0.0
    with pytest.raises(ValueError) as info:
        check_fit_args(**{**OK, "epochs": 1}, min_epochs=2)
    assert str(info.value) == "epochs must be an int >= 2, got 1"


def test_a_callback_watching_the_validation_loss_needs_validation_data():
    stop = EarlyStopping(monitor="val_loss")
    with pytest.raises(ValueError, match="validation_data is required: EarlyStopping monitors"):
        check_fit_args(**OK, callbacks=[stop])
    assert check_fit_args(**OK, callbacks=[stop], validation_data=("x", "y")).callbacks == (stop,)


def test_the_residual_noise_scale_is_the_rms_residual_per_column():
    """sigma_o = sqrt(mean_n (y_no - mean_no)^2): a float for one column, a (O,) tensor for
    several, at least 1e-6 (an exact fit)."""
    mean = torch.tensor([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]])
    y = mean + torch.tensor([[0.3, 1.0], [-0.3, -2.0], [0.6, 2.0]])
    one = residual_noise_scale(mean[:, :1], y[:, :1])
    assert isinstance(one, float)
    assert one == pytest.approx(math.sqrt((0.09 + 0.09 + 0.36) / 3), rel=1e-6)
    both = residual_noise_scale(mean, y)
    assert isinstance(both, torch.Tensor) and both.shape == (2,)
    torch.testing.assert_close(both, torch.tensor([math.sqrt(0.18), math.sqrt(3.0)]))
    assert residual_noise_scale(mean, mean.clone()).tolist() == pytest.approx([1e-6, 1e-6])


class _Recorder(nn.Module):
    """A linear layer that records the rows, mode and grad mode of each call."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 1)
        self.seen: list[tuple[int, bool, bool]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append((x.shape[0], self.training, torch.is_grad_enabled()))
        return self.lin(x)


def test_the_probe_runs_two_rows_in_eval_mode_without_gradients():
    net = _Recorder().train()
    out = probe(net, net, torch.randn(5, 2))
    assert out.shape == (2, 1)
    assert net.seen == [(2, False, False)]
    assert net.training  # its mode given back


def _settings(**kw):
    return check_fit_args(**{**OK, "epochs": 2, "batch_size": 4, **kw})


def test_the_validation_loss_is_scored_in_eval_mode_and_callbacks_see_the_owner():
    """train_epochs scores validation_data in eval mode (dropout off: the loss of the net as
    it predicts), and each callback gets (history_module, epoch, history so far)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 8), nn.Dropout(0.5), nn.Linear(8, 1))
    owner = nn.Linear(1, 1)  # e.g. the ensemble a member belongs to
    x, y = torch.randn(16, 2), torch.randn(16, 1)
    xv, yv = torch.randn(8, 2), torch.randn(8, 1)
    seen = []
    history = train_epochs(
        net.parameters(), lambda xb, yb: ((net(xb) - yb) ** 2).mean(), x, y, _settings(),
        module=net, desc="probe run", seed=0, validation=(xv, yv), history_module=owner,
        callbacks=[lambda m, epoch, h: seen.append((m, epoch, list(h["loss"])))],
    )  # fmt: skip
    net.eval()
    with torch.no_grad():
        eval_loss = float(((net(xv) - yv) ** 2).mean())
    assert history["val_loss"][-1] == pytest.approx(eval_loss, rel=1e-6)
    assert [(m is owner, e) for m, e, _ in seen] == [(True, 0), (True, 1)]
    assert [rows for _, _, rows in seen] == [history["loss"][:1], history["loss"][:2]]


def test_the_bar_names_the_run_and_a_divergence_names_its_lr(capsys):
    """progress=True shows a bar labelled desc; a non-finite loss is refused naming desc and
    the learning rate."""
    net = nn.Linear(2, 1)
    x, y = torch.randn(8, 2), torch.randn(8, 1)
    loss = lambda xb, yb: ((net(xb) - yb) ** 2).mean()  # noqa: E731
    train_epochs(net.parameters(), loss, x, y, _settings(progress=True), module=net,
                 desc="my run")  # fmt: skip
    assert "my run" in capsys.readouterr().err
    train_epochs(net.parameters(), loss, x, y, _settings(), module=net, desc="my run")
    assert "my run" not in capsys.readouterr().err
    with pytest.raises(TrainingDivergedError, match=r"^my run \(lr=0.1\)"):
        train_epochs(net.parameters(), lambda xb, yb: loss(xb, yb) * float("inf"), x, y,
                     _settings(), module=net, desc="my run")  # fmt: skip


def test_an_iterate_average_ends_at_the_mean_of_the_last_share_of_steps():
    """average=0.5 over 4 full-batch epochs (one step each): the parameters end at the mean of
    their values after the steps of the last 2 epochs (read by a callback after each, which
    is handed the trained module itself when no other owner is named)."""
    torch.manual_seed(0)
    net = nn.Linear(2, 1)
    x, y = torch.randn(8, 2), torch.randn(8, 1)
    after = []
    train_epochs(
        net.parameters(), lambda xb, yb: ((net(xb) - yb) ** 2).mean(), x, y,
        _settings(epochs=4, batch_size=8, average=0.5), module=net, desc="avg", seed=0,
        callbacks=[lambda m, epoch, h: after.append((m, net.weight.detach().clone()))],
    )  # fmt: skip
    assert all(m is net for m, _ in after)
    after = [w for _, w in after]
    torch.testing.assert_close(net.weight.detach(), (after[2] + after[3]) / 2)
    assert not torch.allclose(after[2], after[3])  # the average is not one of them


def test_a_module_is_on_its_first_tensors_device_and_one_without_tensors_on_the_cpu():
    """``module_device``: the first parameter's device, else the first buffer's, else the CPU
    (a parameter-free net such as an activation, or a functional net's shell)."""
    assert module_device(nn.Identity()) == torch.device("cpu")
    with_buffer = nn.BatchNorm1d(2, affine=False).to("meta")  # buffers only
    assert module_device(with_buffer) == torch.device("meta")
    assert module_device(nn.Linear(2, 1).to("meta")) == torch.device("meta")
