"""The tuned rows of the last-layer and distance-aware heads: ``vbll``, ``sngp`` and ``dkl``.

Each is the protocol's MLP with a learned Gaussian noise under ``make(method, ...)``, trained by
Adam at a constant rate, and searched as the other tuned rows are: every configuration of its
grid is scored on the validation rows at :data:`CHECKPOINTS` evenly spaced epoch counts, and
each split keeps the configuration and epoch count with the best validation log-likelihood
(:mod:`benchmarks.uci.runner`). A checkpoint is scored as ``fit(epochs=e)`` would leave the
model: a copy of it, its posterior completed on the training rows as the end of ``fit``
completes it (the output weights' Laplace posterior of SNGP, the exact GP's data of DKL, the
noise estimate of all three). With a constant rate and the same seed, the first ``e`` epochs
of a longer run are that run's ``e`` epochs, so the copy is the shorter fit.

The grids:

- ``vbll``: the prior scale of the last layer's weights, 1 or 0.1 (its regularisation), Adam
  at 1e-3, batch 32, about 10,000 steps;
- ``sngp``: the random-feature kernel's lengthscale, 1 or 2 (how far from the data the
  variance returns), Adam at 1e-3, batch 32, about 10,000 steps;
- ``dkl``: the exact GP on all training rows, full-batch steps (its marginal likelihood reads
  every row), Adam at 1e-2 for 1,000 steps. A rate of 3e-3 was tried beside it on split 0 of
  yacht and of energy: at every checkpoint its validation log-likelihood was below the best
  of 1e-2's, and the exact GP's steps are the row's cost, so it was left out.

VBLL and SNGP train a data set's splits stacked (:func:`bnn_pyro.fit_stacked`); DKL one by
one. Run them with::

    python -m benchmarks.uci --data benchmarks/uci/data --methods vbll,sngp,dkl \\
        --out /tmp/uci_dev --resume
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from benchmarks.uci.generic import generic_model
from benchmarks.uci.method import Config, DatasetInfo, MethodSpec, Report, checkpoint_epochs
from bnn_pyro.stacking import fit_stacked

__all__ = [
    "CHECKPOINTS",
    "GRID_OPTIONS",
    "last_layer_grid",
    "last_layer_specs",
    "last_layer_train",
    "last_layer_train_stacked",
    "scored_copy",
]

CHECKPOINTS = 8  #: epoch counts scored per configuration (early stopping on validation)
_STEPS = 10_000  # minibatch steps per configuration, as the VI grid
_BATCH = 32
_DKL_STEPS = 1_000  # full-batch steps of the exact GP

#: The method options each row's grid searches (the other options: the method's defaults).
GRID_OPTIONS: dict[str, list[dict[str, Any]]] = {
    "vbll": [{"prior_scale": 1.0}, {"prior_scale": 0.1}],
    "sngp": [{"lengthscale": 1.0}, {"lengthscale": 2.0}],
    "dkl": [{}],
}
_LRS = {"vbll": [1e-3], "sngp": [1e-3], "dkl": [1e-2]}
_TRAINING_KEYS = ("epochs", "lr", "batch_size")


def last_layer_grid(method: str) -> Callable[[DatasetInfo, bool], list[Config]]:
    """The grid function of ``method``'s row (see the module docstring).

    Args:
        method: ``"vbll"``, ``"sngp"`` or ``"dkl"``.

    Returns:
        ``grid(info, quick) -> [config, ...]``; a configuration holds ``epochs``, ``lr``,
        ``batch_size`` (``None``: every training row, DKL's exact GP) and the method's options.
        ``quick`` gives one configuration of 4 epochs, for smoke tests.

    Raises:
        ValueError: for a method without a row here.

    Example:
        >>> grid = last_layer_grid("vbll")(DatasetInfo("toy", 455, 13), False)
        >>> [(c["epochs"], c["prior_scale"]) for c in grid]
        [(800, 1.0), (800, 0.1)]
        >>> last_layer_grid("dkl")(DatasetInfo("toy", 455, 13), False)[0]
        {'epochs': 1000, 'lr': 0.01, 'batch_size': None}
    """
    if method not in GRID_OPTIONS:
        raise ValueError(f"no tuned last-layer row for {method!r}: use one of {list(GRID_OPTIONS)}")

    def grid(info: DatasetInfo, quick: bool = False) -> list[Config]:
        if method == "dkl":
            epochs, batch = _DKL_STEPS, None
        else:
            batch = _BATCH
            steps_per_epoch = max(1, math.ceil(info.n_train * 0.8 / batch))
            epochs = int(min(2000, max(40, round(_STEPS / steps_per_epoch, -2))))
        configs = [
            {"epochs": epochs, "lr": lr, "batch_size": batch, **options}
            for lr in _LRS[method]
            for options in GRID_OPTIONS[method]
        ]
        return [{**configs[0], "epochs": 4}] if quick else configs

    return grid


def _build(method: str, config: Mapping[str, Any], features: int, hidden: int, seed: int) -> Any:
    """:func:`~benchmarks.uci.generic.generic_model` with the configuration's method options."""
    options = {k: v for k, v in config.items() if k not in _TRAINING_KEYS}
    return generic_model(method, features, hidden, seed, **options)


def scored_copy(model: Any, x: torch.Tensor, y: torch.Tensor) -> Any:
    """A copy of ``model`` mid-``fit``, completed on its training rows as ``fit`` completes a
    model at its last epoch (its ``complete_training`` hook): what ``fit(epochs=e)`` returns,
    for a run now at epoch ``e``. ``model`` itself is left as it was.

    Args:
        model: a VBLL, SNGP or DKL model during its fit.
        x: ``(N, D)`` its training inputs; y: ``(N, 1)`` its targets.

    Example:
        >>> m = _build("vbll", {}, 3, 8, 0)
        >>> x, y = torch.randn(20, 3), torch.randn(20, 1)
        >>> scored_copy(m, x, y) is m
        False
    """
    done = copy.deepcopy(model)
    rows, targets, _ = done.fit_data(x, y, done.fit_probe, done, None)
    # the three heads' completion reads the rows and targets alone, not the fit's settings
    done.complete_training(rows, targets, None)
    return done


def _checkpoint_callback(
    members: Sequence[tuple[Any, torch.Tensor, torch.Tensor, Report]], wanted: set[int]
) -> Callable[[Any, int, Any], None]:
    """``fn(owner, epoch, history)`` reporting each member's :func:`scored_copy` at the
    ``wanted`` epoch counts short of the last (the finished model reports that one). The three
    heads' Gaussian predictives are closed forms: no draws, so no seed."""

    def callback(owner: Any, epoch: int, history: Any) -> None:
        if epoch + 1 not in wanted:
            return
        for model, x, y, report in members:
            report(epoch + 1, scored_copy(model, x, y).predictive_gaussian)

    return callback


def last_layer_train(
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
    """Train ``make(method, mlp, Gaussian("learned"), **options)`` on ``x`` ``(N, D)``, ``y``
    ``(N, 1)`` (normalised) and report its Gaussian predictive at every checkpoint.

    Example:
        >>> x, y = torch.randn(40, 3), torch.randn(40, 1)
        >>> config = last_layer_grid("sngp")(DatasetInfo("toy", 40, 3), True)[0]
        >>> seen = []
        >>> last_layer_train(config, x, y, y_std=1.0, hidden=8, seed=0, checkpoints=[2, 4],
        ...     num_samples=4, method="sngp", report=lambda e, p: seen.append((e, p(x)[0].shape)))
        >>> seen  # SNGP's predictive is one Gaussian in closed form
        [(2, torch.Size([1, 40, 1])), (4, torch.Size([1, 40, 1]))]
    """
    model = _build(method, config, x.shape[-1], hidden, seed).to(x.device)
    epochs = max(checkpoints)
    model.fit(
        x,
        y,
        epochs=epochs,
        batch_size=int(config["batch_size"] or len(x)),
        lr=float(config["lr"]),
        progress=False,
        seed=seed,
        callbacks=[_checkpoint_callback([(model, x, y, report)], set(checkpoints) - {epochs})],
    )
    report(epochs, model.predictive_gaussian)


def last_layer_train_stacked(
    config: Mapping[str, Any],
    xs: torch.Tensor,
    ys: torch.Tensor,
    *,
    y_stds: Sequence[float],
    hidden: int,
    seeds: Sequence[int],
    checkpoints: Sequence[int],
    reports: Sequence[Report],
    num_samples: int,
    method: str,
) -> None:
    """:func:`last_layer_train` on ``xs[k]`` ``(K, N, D)``, ``ys[k]`` ``(K, N, 1)`` with
    ``seeds[k]`` for every split k at once (:func:`bnn_pyro.fit_stacked`); member ``k`` ends
    as its own run, up to float rounding.

    Example:
        >>> config = last_layer_grid("vbll")(DatasetInfo("toy", 40, 3), True)[0]
        >>> seen = []
        >>> last_layer_train_stacked(config, torch.randn(2, 40, 3), torch.randn(2, 40, 1),
        ...     y_stds=[1.0, 1.0], hidden=8, seeds=[0, 1], checkpoints=[2, 4], num_samples=4,
        ...     method="vbll", reports=[lambda e, p, k=k: seen.append((k, e)) for k in range(2)])
        >>> seen
        [(0, 2), (1, 2), (0, 4), (1, 4)]
    """
    models = [_build(method, config, xs.shape[-1], hidden, seed).to(xs.device) for seed in seeds]
    epochs = max(checkpoints)
    members = list(zip(models, xs, ys, reports, strict=True))
    fit_stacked(
        models,
        xs,
        ys,
        seeds=list(seeds),
        epochs=epochs,
        batch_size=int(config["batch_size"]),
        lr=float(config["lr"]),
        progress=False,
        callbacks=[_checkpoint_callback(members, set(checkpoints) - {epochs})],
    )
    for model, _, _, report in members:
        report(epochs, model.predictive_gaussian)


def last_layer_specs() -> list[MethodSpec]:
    """The three tuned rows, for :mod:`benchmarks.uci.registry`.

    Example:
        >>> [(s.name, s.train_stacked is not None) for s in last_layer_specs()]
        [('vbll', True), ('sngp', True), ('dkl', False)]
    """
    descriptions = {
        "vbll": "VBLL, dense covariance, learned noise; prior scale 1 or 0.1; Adam 1e-3, batch 32",
        "sngp": "SNGP, bound 0.95, 1,024 features; lengthscale 1 or 2; Adam 1e-3, batch 32",
        "dkl": "deep-kernel exact GP, RBF kernel; full-batch Adam at 1e-2, 1,000 steps",
    }
    specs = []
    for method, description in descriptions.items():

        def train(*args: Any, method: str = method, **kwargs: Any) -> None:
            last_layer_train(*args, **kwargs, method=method)

        def train_stacked(*args: Any, method: str = method, **kwargs: Any) -> None:
            last_layer_train_stacked(*args, **kwargs, method=method)

        specs.append(
            MethodSpec(
                name=method,
                label=method.upper(),
                description=description,
                grid=last_layer_grid(method),
                train=train,
                checkpoints=lambda config: checkpoint_epochs(int(config["epochs"]), CHECKPOINTS),
                cost=10.0,
                train_stacked=None if method == "dkl" else train_stacked,
            )
        )
    return specs
