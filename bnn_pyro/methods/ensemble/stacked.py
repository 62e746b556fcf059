"""``DeepEnsemble.fit``'s stacked path: all members in one pass of the loop.

See :mod:`bnn_pyro.training.stacked` for how K models train as one and why the numbers are
those of training them one by one; here are the ensemble's part: when its members may train
stacked, their seeds, and their losses on a ``(K, B, ...)`` block of minibatches.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from bnn_pyro._rng import noise_generators, order_generators
from bnn_pyro.likelihoods import Likelihood
from bnn_pyro.methods.classic.training import (
    TrainSettings,
    modes,
    module_device,
)
from bnn_pyro.methods.ensemble.heads import VAR_FLOOR, split_heads
from bnn_pyro.training import History, distributed, make_optimizer, train
from bnn_pyro.training.compiled import compile_loss
from bnn_pyro.training.stacked import (
    StackedLossStep,
    StackedModels,
    elementwise_optimizer,
    stackable,
    stacked_batches,
)

__all__ = ["fit_stacked", "why_not_stacked"]


def why_not_stacked(members: list[nn.Module], settings: TrainSettings) -> str | None:
    """Why the members cannot train stacked, or ``None`` (see ``DeepEnsemble._fit``).

    Example:
        >>> from bnn_pyro.methods.classic.training import check_fit_args
        >>> settings = check_fit_args(1, 8, 1e-3, 0.0, None, False, 0)
        >>> why_not_stacked([nn.Linear(2, 1), nn.Linear(2, 1)], settings) is None
        True
    """
    if distributed.active():
        return "torch.distributed trains one model at a time"
    if not elementwise_optimizer(settings.optimizer):
        return f"the optimizer {settings.optimizer!r} is not elementwise"
    return stackable(members, dropout=True)


def fit_stacked(
    ensemble: Any,
    x: torch.Tensor,
    yt: torch.Tensor,
    settings: TrainSettings,
    validation: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> History:
    """All members in one pass of the loop (see :mod:`bnn_pyro.training.stacked`).

    The members are written back after every epoch, so callbacks (``fn(ensemble, epoch,
    history)``, a ``True`` stops every member) see them as trained so far; the history has
    ``loss`` (the members' mean) and ``member_loss`` per epoch, with ``validation`` also
    ``val_loss`` and ``member_val_loss``."""
    members = list(ensemble.models)
    device = module_device(members[0])
    x, yt = x.to(device), yt.to(device)
    seeds = _member_seeds(settings.seed, len(members))
    # each member's generators of its minibatch order and dropout masks, as its own seeded run
    # draws them: one CPU stream for both on the CPU, the device's for the masks on a GPU
    generators = order_generators(seeds)
    noise = noise_generators(generators, seeds, device)
    stacked = StackedModels(members, x, noise)
    batches = stacked_batches(x, yt, settings.batch_size, generators, noise=noise)
    if settings.resume is not None:  # the run's state is the stacked parameters, not the members
        for name, p in stacked.named_parameters():
            settings.resume.extra[name] = p
    loss = partial(_stacked_loss, stacked, ensemble.likelihood, ensemble.gaussian_nll, split_heads)
    loss = compile_loss(loss) if settings.compile else loss
    optimizer = make_optimizer(
        settings.optimizer, stacked.parameters(), settings.lr, settings.weight_decay
    )
    step = StackedLossStep(loss, optimizer, desc=f"DeepEnsemble (lr={settings.lr})")

    def write_back(_: Any, epoch: int, history: History) -> None:
        stacked.write_back(members)

    seen = [lambda _, epoch, h, cb=cb: cb(ensemble, epoch, h) for cb in settings.callbacks]

    def val_loss() -> dict[str, Any]:
        xv, yv = validation  # type: ignore[misc]
        k = len(members)
        stacked.eval()
        try:
            with torch.no_grad(), modes(ensemble, lambda m: False):
                per_member = loss(xv.expand(k, *xv.shape), yv.expand(k, *yv.shape)).tolist()
        finally:
            stacked.train()
        return {"val_loss": sum(per_member) / k, "member_val_loss": per_member}

    stacked.train()
    try:
        with modes(ensemble, lambda m: True):
            return train(
                stacked,
                step,
                batches,
                epochs=settings.epochs,
                callbacks=[write_back, *seen],
                validation=None if validation is None else val_loss,
                progress=settings.progress,
                desc=f"DeepEnsemble, {len(members)} members stacked",
                lr_schedule=settings.lr_schedule,
                average=settings.average,
                resume=settings.resume,
            )
    finally:
        stacked.write_back(members)


def _member_seeds(seed: int | None, count: int) -> list[int]:
    """Member i's seed: ``seed + i`` (as its one-by-one run), or drawn from the global RNG."""
    if seed is None:
        return [int(s) for s in torch.randint(0, 2**62, (count,))]
    return [seed + i for i in range(count)]


def _stacked_loss(
    stacked: StackedModels,
    likelihood: Likelihood,
    gaussian_nll: bool,
    split: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    xb: torch.Tensor,
    yb: torch.Tensor,
) -> torch.Tensor:
    """The members' mean losses ``(K,)`` on their minibatches ``xb (K, B, D)``, ``yb (K, B, ...)``:
    per member what :meth:`bnn_pyro.DeepEnsemble._loss` computes."""
    out = stacked(xb)
    if gaussian_nll:
        mean, var = split(out)
        nll = F.gaussian_nll_loss(mean, yb, var, eps=VAR_FLOOR, reduction="none")
        return nll.view(out.shape[0], -1).mean(1)
    return likelihood.point_loss(out, yb).mean(-1)
