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

from bnn_pyro.likelihoods import Likelihood
from bnn_pyro.methods.classic.engine import train_stacked
from bnn_pyro.methods.classic.training import TrainSettings
from bnn_pyro.methods.ensemble.heads import VAR_FLOOR, split_heads
from bnn_pyro.training import History, distributed
from bnn_pyro.training.stacked import elementwise_optimizer, stackable

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
    """All members in one pass of the loop (the classic family's stacked engine,
    :func:`~bnn_pyro.methods.classic.engine.train_stacked`), member ``i`` seeded with
    ``seed + i`` as its one-by-one run.

    The members are written back after every epoch, so callbacks (``fn(ensemble, epoch,
    history)``, a ``True`` stops every member) see them as trained so far; the history has
    ``loss`` (the members' mean) and ``member_loss`` per epoch, with ``validation`` also
    ``val_loss`` and ``member_val_loss``. ``x``, ``yt`` and ``validation`` are on the members'
    device, as ``fit_data`` returns them."""
    members = list(ensemble.models)
    k = len(members)
    if validation is not None:  # every member scores the one validation set
        xv, yv = validation
        validation = xv.expand(k, *xv.shape), yv.expand(k, *yv.shape)
    return train_stacked(
        members,
        partial(_output_loss, ensemble.likelihood, ensemble.gaussian_nll, split_heads),
        (x, yt),
        settings,
        _member_seeds(settings.seed, k),
        owner=ensemble,
        name="DeepEnsemble",
        desc=f"DeepEnsemble, {k} members stacked",
        validation=validation,
    )


def _member_seeds(seed: int | None, count: int) -> list[int]:
    """Member i's seed: ``seed + i`` (as its one-by-one run), or drawn from the global RNG."""
    if seed is None:
        return [int(s) for s in torch.randint(0, 2**62, (count,))]
    return [seed + i for i in range(count)]


def _output_loss(
    likelihood: Likelihood,
    gaussian_nll: bool,
    split: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    out: torch.Tensor,
    yb: torch.Tensor,
) -> torch.Tensor:
    """The members' mean losses ``(K,)`` from their outputs ``out (K, B, O)`` on their
    minibatches, targets ``yb (K, B, ...)``: per member what :meth:`bnn_pyro.DeepEnsemble._loss`
    computes."""
    if gaussian_nll:
        mean, var = split(out)
        nll = F.gaussian_nll_loss(mean, yb, var, eps=VAR_FLOOR, reduction="none")
        return nll.view(out.shape[0], -1).mean(1)
    return likelihood.point_loss(out, yb).mean(-1)
