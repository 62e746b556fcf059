"""What every classic ``fit`` shares around its training (:mod:`~bnn_pyro.methods.classic.engine`):
its checked settings, the output probe and the noise estimate."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from bnn_pyro._checks import check_bool, check_float, check_int, check_seed
from bnn_pyro.nn.modes import modes
from bnn_pyro.training import (
    Callback,
    check_callbacks,
    check_optimizer,
)
from bnn_pyro.training.schedules import check_schedule_args


@dataclass(frozen=True)
class TrainSettings:
    """The training arguments every method's ``fit`` shares (see :func:`check_fit_args`)."""

    epochs: int
    batch_size: int
    lr: float
    weight_decay: float
    optimizer: object
    progress: bool
    seed: int | None
    callbacks: tuple[Callback, ...] = ()
    validation_data: Any = None
    lr_schedule: Any = None
    average: float | None = None
    resume: Any = None  # a bnn_pyro.training.resume.Resume, or None
    compile: bool = False  # the step's loss compiled (bnn_pyro.training.compiled)

    def loop_options(self) -> dict[str, Any]:
        """What the one loop (:func:`bnn_pyro.training.train`) takes of these settings."""
        return {
            "epochs": self.epochs,
            "progress": self.progress,
            "lr_schedule": self.lr_schedule,
            "average": self.average,
            "resume": self.resume,
        }


def check_fit_args(
    epochs: object,
    batch_size: object,
    lr: object,
    weight_decay: object,
    optimizer: object,
    progress: object,
    seed: object,
    min_epochs: int = 1,
    callbacks: Iterable[Callback] = (),
    validation_data: Any = None,
    lr_schedule: Any = None,
    average: float | None = None,
    compile: object = False,
) -> TrainSettings:
    """Validate the arguments every ``fit`` shares; return them as :class:`TrainSettings`."""
    check_int("epochs", epochs, minimum=min_epochs)
    check_int("batch_size", batch_size)
    check_float("lr", lr, minimum=0.0, strict=True)
    check_float("weight_decay", weight_decay, minimum=0.0, strict=False)
    check_optimizer(optimizer)
    check_bool("progress", progress)
    check_seed("seed", seed)
    check_schedule_args(lr_schedule, average)
    callbacks = check_callbacks(callbacks, validation_data is not None)
    check_bool("compile", compile)
    return TrainSettings(
        epochs,
        batch_size,
        lr,
        weight_decay,
        optimizer,
        progress,
        seed,
        tuple(callbacks),
        validation_data,
        lr_schedule,
        average,
        compile=compile,
    )


def module_device(module: nn.Module) -> torch.device:
    """The device of the first parameter or buffer (CPU for a module without tensors)."""
    for t in module.parameters():
        return t.device
    for t in module.buffers():
        return t.device
    return torch.device("cpu")


def probe(model: Callable[[torch.Tensor], torch.Tensor], module: nn.Module, x: torch.Tensor):
    """One forward pass on two rows in eval mode without gradients, to check output shapes."""
    with torch.no_grad(), modes(module, lambda m: False):
        return model(x[:2].to(module_device(module)))


def residual_noise_scale(mean: torch.Tensor, y: torch.Tensor) -> float | torch.Tensor:
    """Maximum-likelihood homoscedastic noise std of ``y ~ N(mean, σ²)`` per output column.

    ``σ̂_o = sqrt(mean_n (y_no - mean_no)²)``, floored at 1e-6. Returns a float for one output
    and a ``(O,)`` tensor otherwise.

    Args:
        mean: ``(N, O)`` predictive means on the training inputs.
        y: ``(N, O)`` training targets.
    """
    sigma = ((y - mean) ** 2).mean(dim=0).sqrt().clamp_min(1e-6).detach()
    return float(sigma) if sigma.numel() == 1 else sigma
