"""The non-Pyro rows: MC dropout, deep ensemble, SWAG and Laplace, as published where published.

* ``dropout``: Gal & Ghahramani (2016) and their DropoutUncertaintyExps code: dropout on the
  inputs and on the hidden layer, Adam (lr 1e-3), minibatches of 128, an L2 penalty
  ``lengthscale² (1 - p) / (2 N tau)`` with lengthscale 1e-2, a fixed noise precision ``tau``
  (original units) in the predictive, grid over the folder's ``dropout_rates.txt`` x
  ``tau_values.txt`` at ``n_epochs.txt`` x 10 epochs (the 2018 rerun's training time).
* ``ensemble``: Lakshminarayanan et al. (2017): 5 members with mean and variance heads trained
  on the Gaussian NLL, Adam, minibatches of 100, 40 epochs; learning rate chosen on the
  validation rows. No adversarial training (the library's DeepEnsemble has none).
* ``swag``: SGD with momentum at a constant learning rate, one snapshot per epoch over the
  second half of training, rank 20, scale 0.5; noise from the training residuals.
* ``laplace``: MAP by Adam with weight decay, then the full GGN Laplace posterior with the
  linearised (GLM) predictive, prior precision by evidence maximisation; noise from the
  training residuals.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn as nn

from bnn_pyro.methods import SWAG, DeepEnsemble, LaplaceApproximation, MCDropout
from bnn_pyro.nn import mlp
from bnn_pyro.uci_benchmark.method import Config, DatasetInfo, Report

__all__ = [
    "dropout_grid",
    "dropout_train",
    "ensemble_grid",
    "ensemble_train",
    "laplace_grid",
    "laplace_train",
    "swag_grid",
    "swag_train",
]

_LENGTHSCALE = 1e-2  # Gal's prior length-scale
_DEFAULT_DROPOUT = (0.005, 0.01, 0.05, 0.1)
_DEFAULT_TAU = (0.1, 0.15, 0.2)  # used only when the folder has no tau_values.txt


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------------- MC dropout
def dropout_grid(info: DatasetInfo, quick: bool = False) -> list[Config]:
    """Gal's grid: dropout rate x tau (from the folder's reference settings when present).

    Example:
        >>> grid = dropout_grid(DatasetInfo("toy", 455, 13))
        >>> len(grid), grid[0]
        (12, {'epochs': 400, 'dropout': 0.005, 'tau': 0.1, 'batch_size': 128, 'lr': 0.001})
    """
    ref = info.reference
    rates = ref.dropout_rates if ref is not None else _DEFAULT_DROPOUT
    taus = ref.tau_values if ref is not None else _DEFAULT_TAU
    epochs = 2 if quick else 10 * (ref.n_epochs if ref is not None else 40)
    if quick:
        rates, taus = rates[:1], taus[:1]
    return [
        {"epochs": epochs, "dropout": p, "tau": tau, "batch_size": 128, "lr": 1e-3}
        for p in rates
        for tau in taus
    ]


def dropout_train(
    config: Mapping[str, Any],
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    y_std: float,
    hidden: int,
    seed: int,
    checkpoints: Sequence[int],
    report: Report,
    num_samples: int,
) -> None:
    """Train Gal's MC dropout net with :class:`~bnn_pyro.methods.MCDropout` (module docstring).

    ``tau`` is in original units: the normalised noise std is ``1 / (sqrt(tau) y_std)``. Keras'
    ``l2(reg)`` adds ``reg ||W||²`` to the loss, the same gradient as ``weight_decay = 2 reg``
    (here on the biases too).

    Example:
        >>> x, y = torch.randn(40, 3), torch.randn(40, 1)
        >>> config = dropout_grid(DatasetInfo("toy", 40, 3), quick=True)[0]
        >>> out = []
        >>> dropout_train(config, x, y, y_std=2.0, hidden=8, seed=0, checkpoints=[2],
        ...               report=lambda e, p: out.append(p(x)), num_samples=5)
        >>> out[0][0].shape, round(float(out[0][1]), 4)  # 1 / (sqrt(0.1) * 2)
        (torch.Size([5, 40, 1]), 1.5811)
    """
    p, tau = float(config["dropout"]), float(config["tau"])
    reg = _LENGTHSCALE**2 * (1.0 - p) / (2.0 * x.shape[0] * tau)
    torch.manual_seed(seed)
    net = nn.Sequential(
        nn.Dropout(p), nn.Linear(x.shape[1], hidden), nn.ReLU(), nn.Dropout(p), nn.Linear(hidden, 1)
    )
    noise = 1.0 / (math.sqrt(tau) * y_std)
    model = MCDropout(net, num_samples, dropout_rate=p, likelihood="regression", noise_scale=noise)
    model.fit(
        x,
        y,
        epochs=max(checkpoints),
        batch_size=int(config["batch_size"]),
        lr=float(config["lr"]),
        weight_decay=2.0 * reg,
        progress=False,
        seed=seed,
    )
    report(max(checkpoints), lambda xe: model.predictive_gaussian(xe, generator=_generator(seed)))


# ---------------------------------------------------------------------------- deep ensemble
def ensemble_grid(info: DatasetInfo, quick: bool = False) -> list[Config]:
    """Deep-ensemble grid: the learning rate at the paper's 40 epochs, batch 100, 5 members.

    Example:
        >>> [c["lr"] for c in ensemble_grid(DatasetInfo("toy", 455, 13))]
        [0.001, 0.01, 0.1]
    """
    lrs = (1e-2,) if quick else (1e-3, 1e-2, 1e-1)
    epochs = 2 if quick else 40
    return [{"epochs": epochs, "lr": lr, "batch_size": 100, "members": 5} for lr in lrs]


def ensemble_train(
    config: Mapping[str, Any],
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    y_std: float,
    hidden: int,
    seed: int,
    checkpoints: Sequence[int],
    report: Report,
    num_samples: int,
) -> None:
    """Train a :class:`~bnn_pyro.methods.DeepEnsemble` with Gaussian-NLL heads.

    Example:
        >>> x, y = torch.randn(40, 3), torch.randn(40, 1)
        >>> config = ensemble_grid(DatasetInfo("toy", 40, 3), quick=True)[0]
        >>> out = []
        >>> ensemble_train(config, x, y, y_std=1.0, hidden=8, seed=0, checkpoints=[2],
        ...                report=lambda e, p: out.append(p(x)), num_samples=5)
        >>> out[0][0].shape, out[0][1].shape  # one Gaussian per member
        (torch.Size([5, 40, 1]), torch.Size([5, 40, 1]))
    """
    torch.manual_seed(seed)
    model = DeepEnsemble(
        lambda: mlp(x.shape[1], [hidden], 2),
        int(config["members"]),
        likelihood="regression",
        gaussian_nll=True,
    )
    model.fit(
        x,
        y,
        epochs=max(checkpoints),
        batch_size=int(config["batch_size"]),
        lr=float(config["lr"]),
        progress=False,
        seed=seed,
    )
    report(max(checkpoints), model.predictive_gaussian)


# ---------------------------------------------------------------------------- SWAG
def swag_grid(info: DatasetInfo, quick: bool = False) -> list[Config]:
    """SWAG grid: learning rate x weight decay, 200 epochs (snapshots from epoch 100).

    Example:
        >>> len(swag_grid(DatasetInfo("toy", 455, 13)))
        4
    """
    if quick:
        return [{"epochs": 2, "lr": 1e-2, "weight_decay": 1e-4, "batch_size": 32}]
    return [
        {"epochs": 200, "lr": lr, "weight_decay": wd, "batch_size": 32}
        for lr in (3e-3, 1e-2)
        for wd in (1e-4, 1e-3)
    ]


def swag_train(
    config: Mapping[str, Any],
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    y_std: float,
    hidden: int,
    seed: int,
    checkpoints: Sequence[int],
    report: Report,
    num_samples: int,
) -> None:
    """Train :class:`~bnn_pyro.methods.SWAG` (SGD, momentum 0.9, constant learning rate).

    Example:
        >>> x, y = torch.randn(40, 3), torch.randn(40, 1)
        >>> config = swag_grid(DatasetInfo("toy", 40, 3), quick=True)[0]
        >>> out = []
        >>> swag_train(config, x, y, y_std=1.0, hidden=8, seed=0, checkpoints=[2],
        ...            report=lambda e, p: out.append(p(x)), num_samples=5)
        >>> out[0][0].shape
        torch.Size([5, 40, 1])
    """
    torch.manual_seed(seed)
    model = SWAG(mlp(x.shape[1], [hidden], 1), num_samples, likelihood="regression")
    model.fit(
        x,
        y,
        epochs=max(checkpoints),
        batch_size=int(config["batch_size"]),
        lr=float(config["lr"]),
        weight_decay=float(config["weight_decay"]),
        optimizer="sgd",
        progress=False,
        seed=seed,
    )
    report(max(checkpoints), lambda xe: model.predictive_gaussian(xe, generator=_generator(seed)))


# ---------------------------------------------------------------------------- Laplace
def laplace_grid(info: DatasetInfo, quick: bool = False) -> list[Config]:
    """Laplace grid: the MAP's weight decay and epochs (Adam, lr 1e-3, batch 32).

    Example:
        >>> len(laplace_grid(DatasetInfo("toy", 455, 13)))
        4
    """
    if quick:
        return [{"epochs": 2, "lr": 1e-3, "weight_decay": 1e-4, "batch_size": 32}]
    return [
        {"epochs": epochs, "lr": 1e-3, "weight_decay": wd, "batch_size": 32}
        for epochs in (100, 400)
        for wd in (1e-4, 1e-3)
    ]


def laplace_train(
    config: Mapping[str, Any],
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    y_std: float,
    hidden: int,
    seed: int,
    checkpoints: Sequence[int],
    report: Report,
    num_samples: int,
) -> None:
    """MAP training, then :class:`~bnn_pyro.methods.LaplaceApproximation` (full GGN, GLM).

    Example:
        >>> x, y = torch.randn(40, 3), torch.randn(40, 1)
        >>> config = laplace_grid(DatasetInfo("toy", 40, 3), quick=True)[0]
        >>> out = []
        >>> laplace_train(config, x, y, y_std=1.0, hidden=8, seed=0, checkpoints=[2],
        ...               report=lambda e, p: out.append(p(x)), num_samples=5)
        >>> out[0][0].shape
        torch.Size([5, 40, 1])
    """
    torch.manual_seed(seed)
    model = LaplaceApproximation(
        mlp(x.shape[1], [hidden], 1),
        "regression",
        num_samples=num_samples,
        hessian="ggn",
        hessian_structure="full",
        predictive="glm",
    )
    model.fit(
        x,
        y,
        epochs=max(checkpoints),
        batch_size=int(config["batch_size"]),
        lr=float(config["lr"]),
        weight_decay=float(config["weight_decay"]),
        progress=False,
        seed=seed,
    )
    model.optimize_prior_precision()
    report(max(checkpoints), lambda xe: model.predictive_gaussian(xe, generator=_generator(seed)))
