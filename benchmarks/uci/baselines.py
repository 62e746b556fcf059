"""The non-Pyro rows: MC dropout, deep ensemble, SWAG and Laplace, as published where published.

* ``dropout``: Gal & Ghahramani (2016) and their DropoutUncertaintyExps code (2018 version):
  dropout on the inputs and on the hidden layer, Adam (lr 1e-3), minibatches of 128, an L2
  penalty ``lengthscale² (1 - p) / (2 N tau)`` with lengthscale 1e-2, a fixed noise precision
  ``tau`` (original units) in the predictive, grid over the folder's ``dropout_rates.txt`` x
  ``tau_values.txt``, and over ``n_epochs.txt`` x 10 (the README's "10x epochs") or x 50
  (that code's default multiplier is 500; its logs show 10x undertrains concrete and yacht).
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
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn as nn

from benchmarks.uci.method import Config, DatasetInfo, Report
from benchmarks.uci.protocol import Predictor
from bnn_pyro._rng import seed_from
from bnn_pyro.base import BaseBayesianMethod
from bnn_pyro.likelihoods import Gaussian, HeteroscedasticGaussian
from bnn_pyro.nn import mlp
from bnn_pyro.registry import make

__all__ = [
    "dropout_model",
    "report_dropout",
    "dropout_grid",
    "dropout_train",
    "ensemble_grid",
    "ensemble_train",
    "laplace_grid",
    "prediction_seed",
    "swag_grid",
    "report_swag_laplace",
    "swag_laplace_model",
    "swag_laplace_train",
]

_LENGTHSCALE = 1e-2  # Gal's prior length-scale
_DEFAULT_DROPOUT = (0.005, 0.01, 0.05, 0.1)
_DEFAULT_TAU = (0.1, 0.15, 0.2)  # used only when the folder has no tau_values.txt
#: ``(make options, fit options)`` of the methods :func:`swag_laplace_train` trains.
_WEIGHT_DECAY_SETUPS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "swag": ({}, {"optimizer": "sgd"}),
    "laplace": ({"hessian": "ggn", "hessian_structure": "full", "predictive": "glm"}, {}),
}


def prediction_seed(seed: int) -> int:
    """The ``predict(seed=...)`` of a run seeded ``seed``: the seed that
    ``predict(generator=torch.Generator().manual_seed(seed))`` draws, so the numbers stay those
    of the results computed with that call.

    Example:
        >>> prediction_seed(3) == prediction_seed(3) != prediction_seed(4)
        True
    """
    return seed_from(torch.Generator().manual_seed(seed))


def _fit(
    name: str,
    net: nn.Module,
    likelihood: Any,
    config: Mapping[str, Any],
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    epochs: int,
    seed: int,
    options: Mapping[str, Any] | None = None,
    **fit_options: Any,
) -> BaseBayesianMethod:
    """``bnn_pyro.make(name, net, likelihood, **options)`` fitted on ``(x, y)`` for ``epochs``
    with the config's ``batch_size`` and ``lr`` (and ``fit_options``, e.g. ``weight_decay``)."""
    model = make(name, net, likelihood, **(options or {})).to(x.device)  # where its rows are
    model.fit(
        x,
        y,
        epochs=epochs,
        batch_size=int(config["batch_size"]),
        lr=float(config["lr"]),
        progress=False,
        seed=seed,
        **fit_options,
    )
    return model


# ---------------------------------------------------------------------------- MC dropout
def dropout_grid(info: DatasetInfo, quick: bool = False) -> list[Config]:
    """Gal's grid: dropout rate x tau (the folder's grids when present) x epochs (10x, 50x).

    One configuration per (dropout rate, epochs); every tau of the grid is scored from that
    training run (see :func:`dropout_train`).

    Example:
        >>> grid = dropout_grid(DatasetInfo("toy", 455, 13))
        >>> len(grid), grid[0]
        (8, {'epochs': 400, 'dropout': 0.005, 'taus': [0.1, 0.15, 0.2], 'batch_size': 128, \
'lr': 0.001})
    """
    ref = info.reference
    rates = ref.dropout_rates if ref is not None else _DEFAULT_DROPOUT
    taus = ref.tau_values if ref is not None else _DEFAULT_TAU
    base = ref.n_epochs if ref is not None else 40
    epochs = (2,) if quick else (10 * base, 50 * base)
    if quick:
        rates, taus = rates[:1], taus[:1]
    return [
        {"epochs": e, "dropout": p, "taus": list(taus), "batch_size": 128, "lr": 1e-3}
        for p in rates
        for e in epochs
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
    (here on the biases too). Gal trains one net per (dropout, tau); tau enters the training
    only through ``reg ~ 1e-6``, far below the squared-error gradients, so one net per dropout
    rate is trained with ``reg`` at the median tau and every tau's predictive is scored
    (``report(..., {"tau": tau})``). A config with a ``"tau"`` (the chosen one) reports only
    that tau.

    Example:
        >>> x, y = torch.randn(40, 3), torch.randn(40, 1)
        >>> config = dropout_grid(DatasetInfo("toy", 40, 3), quick=True)[0]
        >>> out = []
        >>> dropout_train(config, x, y, y_std=2.0, hidden=8, seed=0, checkpoints=[2],
        ...               report=lambda e, p, o: out.append((o, p(x))), num_samples=5)
        >>> out[0][0], out[0][1][0].shape, round(float(out[0][1][1]), 4)  # 1 / (sqrt(0.1) 2)
        ({'tau': 0.1}, torch.Size([5, 40, 1]), 1.5811)
    """
    model, weight_decay = dropout_model(config, x.shape, hidden, seed, num_samples)
    model = model.to(x.device)
    model.fit(
        x,
        y,
        epochs=max(checkpoints),
        batch_size=int(config["batch_size"]),
        lr=float(config["lr"]),
        progress=False,
        seed=seed,
        weight_decay=weight_decay,
    )
    report_dropout(model, config, y_std, seed, max(checkpoints), report)


def dropout_model(
    config: Mapping[str, Any], shape: torch.Size, hidden: int, seed: int, num_samples: int
) -> tuple[BaseBayesianMethod, float]:
    """Gal's MC dropout model for ``config`` on training inputs of ``shape`` ``(N, D)``, its
    initial weights drawn under ``seed``, and the weight decay ``2 reg`` it trains with (see
    :func:`dropout_train`).

    Example:
        >>> config = dropout_grid(DatasetInfo("toy", 40, 3), quick=True)[0]
        >>> model, decay = dropout_model(config, torch.Size((40, 3)), 8, 0, 5)
        >>> type(model).__name__, f"{decay:.2e}"  # 2 * 1e-4 * (1 - 0.005) / (2 * 40 * 0.1)
        ('MCDropout', '2.49e-05')
    """
    p = float(config["dropout"])
    taus = [float(t) for t in config["taus"]]
    reg = _LENGTHSCALE**2 * (1.0 - p) / (2.0 * shape[0] * float(statistics.median(taus)))
    torch.manual_seed(seed)
    net = nn.Sequential(
        nn.Dropout(p), nn.Linear(shape[1], hidden), nn.ReLU(), nn.Dropout(p), nn.Linear(hidden, 1)
    )
    options = {"num_samples": num_samples, "dropout_rate": p}
    # the predictive's noise is tau's (report_dropout) and training is squared error: a fixed
    # likelihood scale only spares fit its residual-noise estimate, a Monte Carlo prediction
    # of every training row that no score reads (most of a run's time on 8k+ rows)
    return make("dropout", net, Gaussian(scale=1.0), **options), 2.0 * reg


def report_dropout(
    model: BaseBayesianMethod,
    config: Mapping[str, Any],
    y_std: float,
    seed: int,
    epoch: int,
    report: Report,
) -> None:
    """Report a trained MC dropout ``model``'s predictive for each tau of ``config`` (or the
    chosen ``config["tau"]``), the dropout samples drawn once with the run's prediction seed."""
    taus = [float(t) for t in config["taus"]]
    cache: list[tuple[torch.Tensor, torch.Tensor]] = []  # (inputs, samples): one MC run

    def predictor_for(tau: float) -> Predictor:
        noise = torch.tensor(1.0 / (math.sqrt(tau) * y_std))

        def predictor(x_eval: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            if not cache or cache[0][0] is not x_eval:  # the same masks for every tau
                samples = model.predict(x_eval, return_samples=True, seed=prediction_seed(seed))[2]
                cache[:] = [(x_eval, samples)]
            return cache[0][1], noise

        return predictor

    chosen = config.get("tau")
    for tau in taus if chosen is None else [float(chosen)]:
        report(epoch, predictor_for(tau), {"tau": tau})


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
    net = mlp(x.shape[1], [hidden], 2)  # mean and variance heads; a template, re-initialised
    torch.manual_seed(seed)  # the members' initial weights
    model = _fit(
        "ensemble",
        net,
        HeteroscedasticGaussian(),
        config,
        x,
        y,
        epochs=max(checkpoints),
        seed=seed,
        options={"num_models": int(config["members"])},
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


def swag_laplace_train(
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
    method: str,
) -> None:
    """Train ``method`` (``"swag"`` or ``"laplace"``) with the config's weight decay.

    ``swag``: :class:`~bnn_pyro.methods.SWAG` (SGD, momentum 0.9, constant learning rate).
    ``laplace``: MAP training (Adam), then :class:`~bnn_pyro.methods.LaplaceApproximation`
    (full GGN, GLM predictive) with the prior precision chosen by the evidence.

    Example:
        >>> x, y = torch.randn(40, 3), torch.randn(40, 1)
        >>> out = []
        >>> for method, grid in (("swag", swag_grid), ("laplace", laplace_grid)):
        ...     config = grid(DatasetInfo("toy", 40, 3), quick=True)[0]
        ...     swag_laplace_train(config, x, y, y_std=1.0, hidden=8, seed=0, checkpoints=[2],
        ...                        report=lambda e, p: out.append(p(x)), num_samples=5,
        ...                        method=method)
        >>> out[0][0].shape, out[1][0].shape  # Laplace's GLM: one Gaussian in closed form
        (torch.Size([5, 40, 1]), torch.Size([1, 40, 1]))
    """
    model, fit_options = swag_laplace_model(method, x.shape, hidden, seed, num_samples)
    model = model.to(x.device)
    model.fit(
        x,
        y,
        epochs=max(checkpoints),
        batch_size=int(config["batch_size"]),
        lr=float(config["lr"]),
        progress=False,
        seed=seed,
        weight_decay=float(config["weight_decay"]),
        **fit_options,
    )
    report_swag_laplace(model, seed, max(checkpoints), report)


def swag_laplace_model(
    method: str, shape: torch.Size, hidden: int, seed: int, num_samples: int
) -> tuple[BaseBayesianMethod, dict[str, Any]]:
    """``method``'s (``"swag"`` or ``"laplace"``) model on training inputs of ``shape``
    ``(N, D)``, its initial weights drawn under ``seed``, and its own fit options.

    Example:
        >>> model, options = swag_laplace_model("swag", torch.Size((40, 3)), 8, 0, 5)
        >>> type(model).__name__, options
        ('SWAG', {'optimizer': 'sgd'})
    """
    if method not in _WEIGHT_DECAY_SETUPS:
        raise ValueError(f"method must be one of {tuple(_WEIGHT_DECAY_SETUPS)}, got {method!r}")
    options, fit_options = _WEIGHT_DECAY_SETUPS[method]
    torch.manual_seed(seed)
    net = mlp(shape[1], [hidden], 1)
    model = make(method, net, Gaussian(scale="learned"), num_samples=num_samples, **options)
    return model, dict(fit_options)


def report_swag_laplace(model: BaseBayesianMethod, seed: int, epoch: int, report: Report) -> None:
    """Report a trained SWAG or Laplace ``model``'s Gaussian predictive (Laplace: after its
    prior precision is chosen by the evidence), drawn with the run's prediction seed."""
    if hasattr(model, "optimize_prior_precision"):
        model.optimize_prior_precision()
    report(epoch, lambda x_eval: model.predictive_gaussian(x_eval, seed=prediction_seed(seed)))
