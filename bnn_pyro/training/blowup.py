"""The blow-up guard of :func:`bnn_pyro.training.train`: a fit that left its optimum for good.

A finite loss can still mean a broken fit. With Adam at a learning rate near the edge of
stability, a fit whose noise has shrunk to a sliver of the targets' spread (a smooth, nearly
noiseless regression) can leave its optimum and never come back: the loss climbs above where
training started, the predictions move by tens of the targets' standard deviations, and nothing
is NaN, so the divergence guard is silent.

The guard watches the objective being minimised, one number per epoch (``loss``, or per
member of a stacked fit ``member_loss``), over the epochs of the run's last KL weight (``kl_weight``
in the row: under a KL warm-up the loss rises by design while the weight grows, so only the
epochs after it are compared; a trade of data fit for KL under a large weight is no blow-up
either, the objective falls). It keeps the trainable parameters of the best epoch so far. When
training ends, a series whose last :data:`RECOVERY_EPOCHS` epochs (their median) gave back more
than :data:`GIVE_BACK` of its progress (from its first epoch down to its best) *and* sit more
than :data:`NOISE_UNITS` times its epoch-to-epoch noise above its best (the robust standard
deviation of one epoch's value, from the median absolute change between epochs) has its
parameters put back as they were at its best epoch (a stacked member's slice only), and a
:class:`~bnn_pyro.exceptions.TrainingInstabilityWarning` says so. The first test judges the
size of the rise against what training achieved, the second against the noise of a Monte
Carlo loss, so a fit that barely moved is not judged on its noise. Series shorter than
:data:`MIN_EPOCHS` epochs are not judged.

The thresholds sit between fits on the naval propulsion set that blew up and fits that did not:
those that blew up ended having given back more than all of their progress, tens of noise units
above their best; those that held, a small share of it, a few units above theirs. Half and ten
are far from both.
Measured: ``benchmarks/results/library_measurements.md``, section 'Blow-up guard thresholds'.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from typing import Any

import torch

from bnn_pyro.exceptions import TrainingInstabilityWarning, warn_user

__all__ = [
    "GIVE_BACK",
    "MIN_EPOCHS",
    "NOISE_UNITS",
    "RECOVERY_EPOCHS",
    "BlowUpGuard",
    "blew_up",
    "gave_back",
]

#: The share of its progress a series must have given back at the end to be put back.
GIVE_BACK = 0.5
#: ... and how many of its epoch-to-epoch noise units its end must sit above its best.
NOISE_UNITS = 10.0
#: The last epochs whose median is the series' end level.
RECOVERY_EPOCHS = 5
#: Runs with fewer epochs than this are not judged (their first epochs are all progress).
MIN_EPOCHS = 20


def gave_back(values: list[float]) -> float:
    """The share of its progress a series of epoch values has given back at its end: ``(end -
    best) / (first - best)``, the end the median of the last :data:`RECOVERY_EPOCHS`; 0 when it
    made no progress.

    Example:
        >>> round(gave_back([10.0, 6.0, 2.0, 2.0, 2.1, 2.0, 1.9, 2.0]), 3)  # at its best, nearly
        0.012
        >>> gave_back([10.0, 6.0, 2.0, 9.0, 12.0, 11.0, 12.0, 12.0])  # above where it started
        1.25
        >>> gave_back([])
        Traceback (most recent call last):
          ...
        ValueError: values must be a non-empty list of finite numbers (one per epoch), got []
    """
    if not values or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
        shown = values if len(values) < 8 else f"{len(values)} values"
        raise ValueError(
            f"values must be a non-empty list of finite numbers (one per epoch), got {shown}"
        )
    best = min(values)
    progress = values[0] - best
    end = statistics.median(values[-RECOVERY_EPOCHS:])
    return max(0.0, (end - best) / progress) if progress > 0 else 0.0


def blew_up(values: list[float]) -> bool:
    """Whether a series of epoch values (of one KL weight) blew up and stayed up: at least
    :data:`MIN_EPOCHS` long, it gave back more than :data:`GIVE_BACK` of its progress and ends
    more than :data:`NOISE_UNITS` noise units above its best.

    Example:
        >>> calm = [100.0 - e + (e % 3) for e in range(40)]
        >>> blew_up(calm), blew_up(calm + [300.0] * 10)
        (False, True)
        >>> blew_up([10.0, 9.0] + [9.0 + (e % 2) for e in range(40)])  # noise, not a blow-up
        False
    """
    if len(values) < MIN_EPOCHS or gave_back(values) <= GIVE_BACK:
        return False
    steps = [abs(b - a) for a, b in zip(values[:-1], values[1:], strict=True)]
    noise = 1.4826 * statistics.median(steps) / 2**0.5  # one epoch's robust std
    rise = statistics.median(values[-RECOVERY_EPOCHS:]) - min(values)
    return rise > NOISE_UNITS * noise


class BlowUpGuard:
    """Keeps each series' best parameters and puts back those of a series that blew up.

    Args:
        module: the module being trained; its trainable parameters are what is kept and put
            back (a stacked fit's ``(K, ...)`` tensors member by member).

    Example:
        >>> module = torch.nn.Linear(1, 1, bias=False)
        >>> guard = BlowUpGuard(module)
        >>> for epoch in range(40):  # the loss falls to epoch 29, then climbs and stays up
        ...     with torch.no_grad():
        ...         _ = module.weight.fill_(epoch)
        ...     guard.after_epoch({"loss": 100.0 - epoch if epoch < 30 else 500.0})
        >>> import warnings
        >>> with warnings.catch_warnings(record=True):
        ...     warnings.simplefilter("always")
        ...     guard.finish()
        [29]
        >>> module.weight.item()  # as at the end of epoch 29
        29.0
    """

    def __init__(self, module: torch.nn.Module) -> None:
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.series: list[list[float]] = []
        # per series: its best epoch (within the series), that epoch's value, the kept tensors
        self.best: list[tuple[int, float, list[torch.Tensor] | None]] = []
        self.epochs = 0  # epochs seen, the run's earlier ones included
        self.start = 0  # the epoch the series start at (where the KL weight last changed)
        self.weight: float | None = None

    @staticmethod
    def _values(row: Mapping[str, Any]) -> list[float]:
        for key in ("member_loss", "loss"):
            if key in row:
                value = row[key]
                return [float(v) for v in value] if isinstance(value, list) else [float(value)]
        return []

    def _kept(self, k: int) -> list[torch.Tensor]:
        if len(self.series) == 1:
            return [p.detach().clone() for p in self.params]
        return [
            p[k].detach().clone() if self._per_member(p) else p.new_empty(0) for p in self.params
        ]

    def _per_member(self, p: torch.Tensor) -> bool:
        return p.dim() > 0 and p.shape[0] == len(self.series)

    def after_epoch(self, row: Mapping[str, Any], keep: bool = True) -> None:
        """Record an epoch's row (after its last step); ``keep``: the parameters are the ones
        that row describes (``False`` for the rows of a resumed run's earlier epochs)."""
        values = self._values(row)
        self.epochs += 1
        if not values:
            return
        weight = row.get("kl_weight")
        if not self.series or weight != self.weight:  # a new KL weight: compare from here on
            self.series = [[] for _ in values]
            self.best = [(-1, float("inf"), None) for _ in values]
            self.start, self.weight = self.epochs - 1, weight
        for k, value in enumerate(values):
            series = self.series[k]
            if value < self.best[k][1]:  # a running best: one comparison per epoch
                self.best[k] = (len(series), value, self._kept(k) if keep else None)
            series.append(value)

    def finish(self) -> list[int]:
        """Put back every series that gave back more than :data:`GIVE_BACK` of its progress,
        and warn. Returns the (0-based) epochs they were put back to."""
        restored: list[int] = []
        for k, series in enumerate(self.series):
            at, _, kept = self.best[k]
            if kept is None or not blew_up(series):
                continue
            share = gave_back(series)
            epoch = self.start + at
            with torch.no_grad():
                for p, old in zip(self.params, kept, strict=True):
                    if len(self.series) == 1:
                        p.copy_(old)
                    elif self._per_member(p):
                        p[k].copy_(old)
            restored.append(epoch)
            who = f"member {k} of the stacked fit" if len(self.series) > 1 else "the fit"
            warn_user(
                f"{who} blew up: it ended at {statistics.median(series[-RECOVERY_EPOCHS:]):.4g}, "
                f"having given back {share:.0%} of its progress (from {series[0]:.4g} at epoch "
                f"{self.start} to {series[at]:.4g} at epoch {epoch}), so it keeps its "
                f"parameters from epoch {epoch}. Its steps were too large for this fit: a "
                "smaller lr (a third, say), a decaying lr_schedule or more particles avoid it.",
                TrainingInstabilityWarning,
            )
        return restored
