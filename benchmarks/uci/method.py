"""What a benchmarked method is: a hyper-parameter grid and a training function.

A method trains on normalised data and hands back, at each requested epoch count (a
*checkpoint*), a predictor ``x -> (locs (S, N, 1), scales)`` in normalised units. The runner
scores the checkpoints on validation rows to choose the hyper-parameters *and* the number of
epochs from one training run per configuration, then retrains on the whole training split for
the chosen number of epochs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from benchmarks.uci.data import UCIHyperparameters

__all__ = ["DatasetInfo", "MethodSpec", "TrainFn", "checkpoint_epochs"]

Config = dict[str, Any]
#: ``report(epoch, predictor, overrides=None)``; ``overrides`` (e.g. ``{"tau": 0.2}``) are
#: hyper-parameters that only change the predictive, scored from one training run.
Report = Callable[..., None]


class TrainFn(Protocol):
    """``train(config, x, y, *, y_std, hidden, seed, checkpoints, report, num_samples)``.

    Trains one configuration on ``x (N, D)``, ``y (N, 1)`` (normalised) and calls
    ``report(epoch, predictor)`` once after each epoch count in ``checkpoints`` (ascending;
    the last one is ``config["epochs"]``). ``predictor(x)`` returns ``locs (S, N, 1)`` and
    ``scales`` broadcastable to them, using ``num_samples`` samples where the method samples.
    A method whose hyper-parameter only changes the predictive (Gal's noise precision tau)
    may report several predictors per checkpoint, ``report(epoch, predictor, {"tau": t})``:
    each is scored as the configuration updated with those values, and the final run on the
    whole training split scores only the one matching the chosen configuration.
    ``y_std`` is the target std in original units (to convert noise precisions such as Gal's
    tau), ``hidden`` the protocol's hidden width.
    """

    def __call__(
        self,
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
    ) -> None: ...


@dataclass(frozen=True)
class DatasetInfo:
    """What a grid may depend on: the data set's name, size and reference settings.

    Attributes:
        name: folder name, e.g. ``"bostonHousing"``.
        n_train: training rows of a split.
        n_features: input columns.
        reference: the folder's reference settings (Gal's dropout/tau grids), if it has them.
    """

    name: str
    n_train: int
    n_features: int
    reference: UCIHyperparameters | None = None


@dataclass(frozen=True)
class MethodSpec:
    """A benchmarked method.

    Attributes:
        name: short name used on the command line (``"vi"``).
        label: name in tables and charts.
        description: one line on the setup, for the results file.
        grid: ``grid(info, quick) -> [config, ...]``; every config has an ``"epochs"`` key.
        train: the :class:`TrainFn`.
        checkpoints: ``checkpoints(config) -> [epochs, ...]`` scored during the search; by
            default only ``config["epochs"]``.
        cost: relative cost per split, for ordering tasks (largest first within a split).
        train_stacked: trains one configuration on K splits at once (``train_stacked(config,
            xs (K, N, D), ys (K, N, 1), *, y_stds, hidden, seeds, checkpoints, reports,
            num_samples)``, each split as ``train`` would, see :mod:`benchmarks.uci.bundle`),
            or ``None``.
    """

    name: str
    label: str
    description: str
    grid: Callable[[DatasetInfo, bool], list[Config]]
    train: TrainFn
    checkpoints: Callable[[Mapping[str, Any]], list[int]] = field(
        default=lambda config: [int(config["epochs"])]
    )
    cost: float = 1.0
    train_stacked: Callable[..., None] | None = None


def checkpoint_epochs(epochs: int, count: int) -> list[int]:
    """``count`` evenly spaced epoch counts ending at ``epochs``.

    Args:
        epochs: the last checkpoint (the configuration's epochs).
        count: number of checkpoints (>= 1).

    Returns:
        Ascending, distinct, positive epoch counts.

    Example:
        >>> checkpoint_epochs(400, 4), checkpoint_epochs(3, 4)
        ([100, 200, 300, 400], [1, 2, 3])
    """
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be a positive int, got {epochs!r}")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be a positive int, got {count!r}")
    return sorted({max(1, round(epochs * (i + 1) / count)) for i in range(count)})
