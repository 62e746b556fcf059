"""The MC dropout, SWAG and Laplace rows trained stacked: one configuration on K splits at once.

:func:`dropout_train_stacked` is :func:`benchmarks.uci.baselines.dropout_train` and
:func:`swag_laplace_train_stacked` is :func:`benchmarks.uci.baselines.swag_laplace_train` for K
splits (:func:`bnn_pyro.fit_stacked` with ``MCDropout``, ``SWAG`` or ``LaplaceApproximation``
models): member ``k`` gets the net, the weight decay and the seed its own one-split run would,
and reports its own predictive, so each split's numbers are its one-by-one numbers up to float
rounding (:mod:`benchmarks.uci.bundle` runs them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from benchmarks.uci.baselines import (
    dropout_model,
    report_dropout,
    report_swag_laplace,
    swag_laplace_model,
)
from benchmarks.uci.method import Report
from bnn_pyro.stacking import fit_stacked

__all__ = ["dropout_train_stacked", "swag_laplace_train_stacked"]


def dropout_train_stacked(
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
) -> None:
    """``dropout_train`` on ``xs[k]``, ``ys[k]`` with ``seeds[k]`` for every split k at once.

    Args:
        config: a :func:`~benchmarks.uci.baselines.dropout_grid` configuration.
        xs: ``(K, N, D)``; ys: ``(K, N, 1)`` normalised rows of each split.
        y_stds, seeds, reports: one per split.
        hidden, checkpoints, num_samples: as ``dropout_train``.

    Example:
        >>> from benchmarks.uci.baselines import dropout_grid
        >>> from benchmarks.uci.method import DatasetInfo
        >>> config = dropout_grid(DatasetInfo("toy", 40, 3), quick=True)[0]
        >>> seen = []
        >>> dropout_train_stacked(config, torch.randn(2, 40, 3), torch.randn(2, 40, 1),
        ...     y_stds=[1.0, 2.0], hidden=8, seeds=[0, 1], checkpoints=[2], num_samples=5,
        ...     reports=[lambda e, p, o, k=k: seen.append((k, o)) for k in range(2)])
        >>> seen
        [(0, {'tau': 0.1}), (1, {'tau': 0.1})]
    """
    built = [dropout_model(config, xs.shape[1:], hidden, seed, num_samples) for seed in seeds]
    models = [model.to(xs.device) for model, _ in built]
    epochs = max(checkpoints)
    fit_stacked(
        models,
        xs,
        ys,
        seeds=list(seeds),
        epochs=epochs,
        batch_size=int(config["batch_size"]),
        lr=float(config["lr"]),
        weight_decay=built[0][1],  # the same for every split: it depends on N and the taus
        progress=False,
    )
    for model, y_std, seed, report in zip(models, y_stds, seeds, reports, strict=True):
        report_dropout(model, config, y_std, seed, epochs, report)


def swag_laplace_train_stacked(
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
    """``swag_laplace_train(..., method=method)`` on ``xs[k]``, ``ys[k]`` with ``seeds[k]`` for
    every split k at once (arguments as :func:`dropout_train_stacked`).

    Example:
        >>> from benchmarks.uci.baselines import swag_grid
        >>> from benchmarks.uci.method import DatasetInfo
        >>> config = swag_grid(DatasetInfo("toy", 40, 3), quick=True)[0]
        >>> seen = []
        >>> swag_laplace_train_stacked(config, torch.randn(2, 40, 3), torch.randn(2, 40, 1),
        ...     y_stds=[1.0, 2.0], hidden=8, seeds=[0, 1], checkpoints=[2], num_samples=5,
        ...     reports=[lambda e, p, k=k: seen.append((k, e)) for k in range(2)], method="swag")
        >>> seen
        [(0, 2), (1, 2)]
    """
    built = [swag_laplace_model(method, xs.shape[1:], hidden, seed, num_samples) for seed in seeds]
    models = [model.to(xs.device) for model, _ in built]
    epochs = max(checkpoints)
    fit_stacked(
        models,
        xs,
        ys,
        seeds=list(seeds),
        epochs=epochs,
        batch_size=int(config["batch_size"]),
        lr=float(config["lr"]),
        weight_decay=float(config["weight_decay"]),
        progress=False,
        **built[0][1],
    )
    for model, seed, report in zip(models, seeds, reports, strict=True):
        report_swag_laplace(model, seed, epochs, report)
