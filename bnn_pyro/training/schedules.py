"""Learning-rate schedules and iterate averaging for the one loop
(:func:`~bnn_pyro.training.train`).

A constant-step optimizer keeps its iterates jittering around the optimum (by about ``lr`` per
coordinate for Adam); a decaying step size and/or an average of the last iterates (Polyak &
Juditsky 1992) remove that jitter, which matters when the posterior itself is the answer.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch
from torch.optim.lr_scheduler import LRScheduler

from bnn_pyro._checks import check_float

__all__ = [
    "LR_SCHEDULES",
    "IterateAverage",
    "KLWeightSpec",
    "LRScheduleSpec",
    "check_schedule_args",
    "kl_weight_at",
    "make_lr_schedule",
]

#: The named schedules, as a factor of the base ``lr`` at ``progress = epoch / epochs``:
#: ``"constant"`` 1; ``"cosine"`` ``0.5 (1 + cos(pi progress))``, from 1 towards 0;
#: ``"step"`` 1, then 0.1 from half-way and 0.01 from three quarters; ``"warmup_cosine"``
#: linear from 0 over the first 5% of the epochs, then cosine.
LR_SCHEDULES = ("constant", "cosine", "step", "warmup_cosine")

LRScheduleSpec = str | Callable[[float], float] | Any | None


def _cosine(progress: float) -> float:
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def _step(progress: float) -> float:
    return 1.0 if progress < 0.5 else 0.1 if progress < 0.75 else 0.01


def _warmup_cosine(progress: float) -> float:
    warm = 0.05
    return progress / warm if progress < warm else _cosine((progress - warm) / (1.0 - warm))


_NAMED: dict[str, Callable[[float], float]] = {
    "constant": lambda progress: 1.0,
    "cosine": _cosine,
    "step": _step,
    "warmup_cosine": _warmup_cosine,
}


def _is_scheduler_factory(spec: object) -> bool:
    target = spec.func if isinstance(spec, functools.partial) else spec
    return isinstance(target, type) and issubclass(target, LRScheduler)


def check_schedule_args(lr_schedule: LRScheduleSpec, average: float | None) -> None:
    """Check ``fit``'s ``lr_schedule`` and ``average`` before any work.

    Example:
        >>> check_schedule_args("cosine", 0.5)
        >>> check_schedule_args("linear", None)
        Traceback (most recent call last):
          ...
        ValueError: lr_schedule must be one of ('constant', 'cosine', 'step', 'warmup_cosine') or a callable, got 'linear'
    """  # noqa: E501
    if isinstance(lr_schedule, str) and lr_schedule not in _NAMED:
        raise ValueError(
            f"lr_schedule must be one of {LR_SCHEDULES} or a callable, got {lr_schedule!r}"
        )
    if not (lr_schedule is None or isinstance(lr_schedule, str) or callable(lr_schedule)):
        raise TypeError(
            f"lr_schedule must be a name from {LR_SCHEDULES}, a callable progress -> factor, or "
            f"a torch LRScheduler class, got {lr_schedule!r}"
        )
    if average is not None:
        if isinstance(average, bool) or not isinstance(average, (int, float)):
            raise TypeError(f"average must be a float in (0, 1] or None, got {average!r}")
        if not 0.0 < average <= 1.0:
            raise ValueError(f"average must be a fraction of the epochs in (0, 1], got {average}")


def make_lr_schedule(
    spec: LRScheduleSpec, optimizer: torch.optim.Optimizer | None, epochs: int
) -> Callable[[int], None] | None:
    """The per-epoch learning-rate update of ``fit(..., lr_schedule=spec)``.

    Args:
        spec: ``None`` or ``"constant"`` (no schedule), a name from :data:`LR_SCHEDULES`, a
            callable ``progress -> factor`` (``progress = epoch / epochs`` in ``[0, 1)``; the
            factor multiplies the base ``lr``), or a torch scheduler class or
            ``functools.partial`` of one (e.g. ``partial(StepLR, step_size=30)``), built on the
            optimizer and stepped once per epoch.
        optimizer: the torch optimizer being stepped (``None``: a Pyro optimizer, which a
            schedule cannot drive).
        epochs: the number of epochs of the run.

    Returns:
        ``set_epoch(epoch)``, called before each epoch, or ``None`` when there is no schedule.

    Example:
        >>> w = torch.nn.Parameter(torch.zeros(1))
        >>> opt = torch.optim.SGD([w], lr=1.0)
        >>> set_epoch = make_lr_schedule("cosine", opt, epochs=4)
        >>> rates = []
        >>> for epoch in range(4):
        ...     set_epoch(epoch); rates.append(round(opt.param_groups[0]["lr"], 3))
        >>> rates
        [1.0, 0.854, 0.5, 0.146]
    """
    check_schedule_args(spec, None)
    if spec is None or spec == "constant":
        return None
    if optimizer is None:
        raise ValueError(
            "lr_schedule needs a torch optimizer (optimizer=None, a name, a torch class or "
            "instance), not a pyro.optim.PyroOptim"
        )
    if _is_scheduler_factory(spec):
        scheduler = spec(optimizer)

        def step_scheduler(epoch: int) -> None:
            if epoch > 0:
                scheduler.step()

        step_scheduler.scheduler = scheduler  # type: ignore[attr-defined] # saved on resume
        return step_scheduler
    factor = _NAMED[spec] if isinstance(spec, str) else spec
    base = [group["lr"] for group in optimizer.param_groups]

    def set_epoch(epoch: int) -> None:
        f = check_float("lr_schedule factor", factor(epoch / epochs), minimum=0.0)
        for group, lr in zip(optimizer.param_groups, base, strict=True):
            group["lr"] = lr * f

    return set_epoch


class IterateAverage:
    """The running mean of a module's trainable parameters over the last steps of a run.

    ``fit(..., average=a)`` averages the iterates of every step in the last fraction ``a`` of
    the epochs and leaves the module at that average (Polyak averaging).

    Args:
        module: the module being trained.
        fraction: the share of the epochs, at the end, whose iterates are averaged, in (0, 1].
        epochs: the number of epochs of the run.

    Example:
        >>> w = torch.nn.Linear(1, 1, bias=False)
        >>> avg = IterateAverage(w, fraction=1.0, epochs=2)
        >>> for value in (1.0, 3.0):
        ...     _ = w.weight.data.fill_(value); avg.update(epoch=0)
        >>> avg.apply(); w.weight.item()
        2.0
    """

    def __init__(self, module: torch.nn.Module, fraction: float, epochs: int) -> None:
        check_schedule_args(None, fraction)
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.start = epochs - max(1, math.ceil(fraction * epochs))
        self.means: list[torch.Tensor] | None = None
        self.count = 0

    @torch.no_grad()
    def update(self, epoch: int) -> None:
        """Fold the current parameters into the mean (from the averaging window on)."""
        if epoch < self.start:
            return
        self.count += 1
        if self.means is None:
            self.means = [p.detach().clone() for p in self.params]
            return
        for mean, p in zip(self.means, self.params, strict=True):
            mean.add_(p.detach() - mean, alpha=1.0 / self.count)

    @torch.no_grad()
    def apply(self) -> None:
        """Set the parameters to their average (nothing if no step was averaged)."""
        if self.means is not None:
            for mean, p in zip(self.means, self.params, strict=True):
                p.copy_(mean)


#: The KL weight beta of a run: a float, or ``fn(epoch) -> float`` (e.g.
#: :func:`~bnn_pyro.training.callbacks.linear_annealing`).
KLWeightSpec = float | Callable[[int], float]


def kl_weight_at(kl_weight: KLWeightSpec, epoch: int) -> float:
    """Beta for ``epoch`` (0-based) of a ``kl_weight`` spec: the float, or ``kl_weight(epoch)``.

    Raises:
        ValueError: the value is not a finite float >= 0.

    Example:
        >>> from bnn_pyro.training.callbacks import linear_annealing
        >>> kl_weight_at(0.5, 3), kl_weight_at(linear_annealing(4), 1)
        (0.5, 0.25)
    """
    beta = float(kl_weight(epoch) if callable(kl_weight) else kl_weight)
    if not (beta >= 0 and math.isfinite(beta)):
        raise ValueError(f"kl_weight must be a finite float >= 0, got {beta!r} at epoch {epoch}")
    return beta
