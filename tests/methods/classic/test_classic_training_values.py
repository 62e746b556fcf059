"""The classic methods' shared training pieces (``methods/classic/training.py``), value by value:
``check_fit_args`` (each refusal word for word, each accepted value passed on), the residual
noise scale against its closed form, and the output probe."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

from bnn_pyro.methods.classic.training import (
    check_fit_args,
    module_device,
    probe,
    residual_noise_scale,
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
    assert settings.compile is False  # not asked: eager
    assert check_fit_args(**OK, compile=True).compile is True


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
        ("compile", "yes", TypeError, "compile must be a bool, got str ('yes')"),
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


def test_a_module_is_on_its_first_tensors_device_and_one_without_tensors_on_the_cpu():
    """``module_device``: the first parameter's device, else the first buffer's, else the CPU
    (a parameter-free net such as an activation, or a functional net's shell)."""
    assert module_device(nn.Identity()) == torch.device("cpu")
    with_buffer = nn.BatchNorm1d(2, affine=False).to("meta")  # buffers only
    assert module_device(with_buffer) == torch.device("meta")
    assert module_device(nn.Linear(2, 1).to("meta")) == torch.device("meta")
