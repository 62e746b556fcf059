"""The minibatch loop, optimizers, seeding and noise estimation shared by the methods' ``fit``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from bnn_pyro._progress import tqdm
from bnn_pyro._rng import seeded
from bnn_pyro.exceptions import TrainingDivergedError
from bnn_pyro.methods._checks import (
    check_bool,
    check_choice,
    check_float,
    check_int,
    check_noise_scale,
    check_seed,
)

OPTIMIZERS = ("adam", "sgd")


@dataclass(frozen=True)
class TrainSettings:
    """The training arguments every method's ``fit`` shares (see :func:`check_fit_args`)."""

    epochs: int
    batch_size: int
    lr: float
    weight_decay: float
    optimizer: str
    progress: bool
    seed: int | None


def check_fit_args(
    epochs: object,
    batch_size: object,
    lr: object,
    weight_decay: object,
    optimizer: object,
    progress: object,
    seed: object,
    min_epochs: int = 1,
) -> TrainSettings:
    """Validate the arguments every ``fit`` shares; return them as :class:`TrainSettings`."""
    check_int(epochs, "epochs", minimum=min_epochs)
    check_int(batch_size, "batch_size")
    check_float(lr, "lr")
    check_float(weight_decay, "weight_decay", strict=False)
    check_choice(optimizer, "optimizer", OPTIMIZERS)
    check_bool(progress, "progress")
    check_seed(seed)
    return TrainSettings(epochs, batch_size, lr, weight_decay, optimizer, progress, seed)


def module_device(module: nn.Module) -> torch.device:
    """The device of the first parameter or buffer (CPU for a module without tensors)."""
    for t in module.parameters():
        return t.device
    for t in module.buffers():
        return t.device
    return torch.device("cpu")


@contextlib.contextmanager
def modes(module: nn.Module, train: Callable[[nn.Module], bool]) -> Iterator[None]:
    """Set each submodule's ``training`` flag to ``train(m)``; restore every flag afterwards."""
    # only the flags that change are set (and restored): nn.Module.__setattr__ is slow enough
    # to dominate a small predict otherwise
    changed = [(m, m.training) for m in module.modules() if m.training != bool(train(m))]
    try:
        for m, flag in changed:
            m.training = not flag
        yield
    finally:
        for m, flag in changed:
            m.training = flag


def make_optimizer(
    params: Iterable[torch.Tensor], name: str, lr: float, weight_decay: float
) -> torch.optim.Optimizer:
    """Adam, or SGD with momentum 0.9; ``weight_decay`` is an L2 penalty on the mean loss."""
    params = list(params)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=weight_decay)


def task_loss(out: torch.Tensor, y: torch.Tensor, likelihood: str) -> torch.Tensor:
    """Mean cross-entropy (classification) or mean squared error (regression, ``y: (B, O)``)."""
    if likelihood == "classification":
        return F.cross_entropy(out, y)
    return F.mse_loss(out, y)


def probe(model: Callable[[torch.Tensor], torch.Tensor], module: nn.Module, x: torch.Tensor):
    """One forward pass on two rows in eval mode without gradients, to check output shapes."""
    with torch.no_grad(), modes(module, lambda m: False):
        return model(x[:2].to(module_device(module)))


def train_epochs(
    params: Iterable[torch.Tensor],
    batch_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    settings: TrainSettings,
    *,
    module: nn.Module,
    desc: str,
    seed: int | None = None,
    after_epoch: Callable[[int], None] | None = None,
) -> list[float]:
    """Minimise ``batch_loss(xb, yb)`` over shuffled minibatches; return the epoch mean losses.

    ``module`` trains in train mode (every flag restored afterwards), on a forked RNG seeded
    with ``seed`` (default ``settings.seed``). Raises :class:`TrainingDivergedError` as soon as a
    batch loss is NaN/inf, naming the epoch and suggesting a smaller learning rate.
    """
    seed = settings.seed if seed is None else seed
    with seeded(seed, x.device), modes(module, lambda m: True):
        return _train_epochs(params, batch_loss, x, y, settings, desc, after_epoch)


def _train_epochs(
    params: Iterable[torch.Tensor],
    batch_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    settings: TrainSettings,
    desc: str,
    after_epoch: Callable[[int], None] | None,
) -> list[float]:
    epochs, batch_size, lr, progress = (
        settings.epochs,
        settings.batch_size,
        settings.lr,
        settings.progress,
    )
    opt = make_optimizer(params, settings.optimizer, lr, settings.weight_decay)
    n = len(x)
    history: list[float] = []
    bar = tqdm(range(epochs), desc=desc, disable=not progress, leave=False)
    for epoch in bar:
        perm = torch.randperm(n).to(x.device)
        total = 0.0
        for start in range(0, n, batch_size):
            idx = perm[start : start + batch_size]
            opt.zero_grad(set_to_none=True)
            loss = batch_loss(x[idx], y[idx])
            if not bool(torch.isfinite(loss)):
                raise TrainingDivergedError(
                    f"{desc}: the loss became {loss.item()} in epoch {epoch}; "
                    f"try a smaller lr (got {lr})"
                )
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        history.append(total / n)
        bar.set_postfix(loss=f"{history[-1]:.4g}")
        if after_epoch is not None:
            after_epoch(epoch)
    return history


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


class NoiseScaleMixin:
    """``noise_scale``: the homoscedastic Gaussian noise std of a regression model.

    A value the user sets (in the constructor or by assignment) is kept by ``fit``; a value that
    ``fit`` estimated is re-estimated by the next ``fit``. ``None`` means "not known yet".
    """

    _noise_scale: float | torch.Tensor | None = None
    _noise_from_user: bool = False

    @property
    def noise_scale(self) -> float | torch.Tensor | None:
        """Observation noise standard deviation (float, or ``(O,)`` tensor), or ``None``."""
        return self._noise_scale

    @noise_scale.setter
    def noise_scale(self, value: float | torch.Tensor | None) -> None:
        self._noise_scale = check_noise_scale(value)
        self._noise_from_user = value is not None

    def _estimate_noise(self, value: float | torch.Tensor) -> None:
        if not self._noise_from_user:
            self._noise_scale = value

    def get_extra_state(self) -> dict[str, object]:
        """Saved by ``state_dict`` under ``_extra_state`` (loads with ``weights_only=True``)."""
        return {"noise_scale": self._noise_scale, "noise_from_user": self._noise_from_user}

    def set_extra_state(self, state: dict[str, object]) -> None:
        self._noise_scale = state["noise_scale"]  # type: ignore[assignment]
        self._noise_from_user = bool(state["noise_from_user"])
