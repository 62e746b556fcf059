"""K ``MCDropout`` fits in one pass (seeds, data splits): the stacked path of ``bp.fit_stacked``.

Member ``k`` keeps its own rows, its own initial weights and a generator seeded with
``seeds[k]`` that draws its minibatch order and its dropout masks in the order its own
``fit(..., seed=seeds[k])`` draws them from the global generator (see
:mod:`bnn_pyro.training.stacked`); after training each member sets its noise from its own
residuals as its own fit does. The result is each member's own fit up to float rounding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from bnn_pyro.methods._training import check_fit_args, member_task_losses
from bnn_pyro.training import History, make_optimizer, train
from bnn_pyro.training.stacked import (
    StackedLossStep,
    StackedModels,
    elementwise_optimizer,
    stackable,
    stacked_batches,
)

__all__ = ["fit_dropout_stacked"]


def fit_dropout_stacked(
    methods: Sequence[Any],
    X: torch.Tensor,
    y: torch.Tensor,
    *,
    seeds: Sequence[int],
    epochs: int = 100,
    batch_size: int = 32,
    lr: float | None = None,
    weight_decay: float = 0.0,
    optimizer: Any = None,
    lr_schedule: Any = None,
    progress: bool = True,
) -> History:
    """Train K :class:`~bnn_pyro.MCDropout` models as one (see the module docstring).

    Args:
        methods: K ``MCDropout`` of one architecture and one likelihood.
        X: ``(N, D)`` shared, or ``(K, N, D)`` one set per member; y: ``(N, ...)`` or
            ``(K, N, ...)``.
        seeds: one per member, as ``fit(seed=)``.
        epochs, batch_size, lr, weight_decay, optimizer, lr_schedule, progress: as
            ``MCDropout.fit`` (``optimizer``: an elementwise one; default the class's).

    Returns:
        The :class:`~bnn_pyro.training.History`: ``loss`` (the members' mean), ``member_loss``.

    Raises:
        ValueError: the models cannot train stacked (the reason is named).

    Example:
        >>> import bnn_pyro as bp, torch.nn as nn
        >>> make = lambda: nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Dropout(0.1),
        ...                              nn.Linear(8, 1))
        >>> models = [bp.MCDropout(make(), likelihood="regression") for _ in range(3)]
        >>> X = torch.randn(64, 2); y = X.sum(-1)
        >>> history = fit_dropout_stacked(models, X, y, seeds=[0, 1, 2], epochs=2,
        ...                               progress=False)
        >>> len(history["member_loss"][-1])
        3
    """
    from bnn_pyro.methods.mc_dropout import MCDropout

    if any(type(m) is not MCDropout for m in methods):
        raise ValueError("fit_stacked trains MCDropout models (the class itself) here")
    if len({m.task for m in methods}) > 1:
        raise ValueError("the models must share one likelihood")
    if len(seeds) != len(methods):
        raise ValueError(f"seeds must give one seed per model ({len(methods)}), got {len(seeds)}")
    first = methods[0]
    optimizer = first.fit_defaults["optimizer"] if optimizer is None else optimizer
    if not elementwise_optimizer(optimizer):
        raise ValueError(f"fit_stacked needs an elementwise optimizer, got {optimizer!r}")
    per_member = X.dim() == 3
    if len(methods) == 1:  # one model: its own fit
        return first.fit(X[0] if per_member else X, y[0] if per_member else y, epochs=epochs,
                         batch_size=batch_size, lr=lr, weight_decay=weight_decay,
                         optimizer=optimizer, lr_schedule=lr_schedule, progress=progress,
                         seed=int(seeds[0]))  # fmt: skip
    nets = [m.model for m in methods]
    reason = stackable(nets, dropout=True)
    if reason is not None:
        raise ValueError(f"these models cannot be trained stacked: {reason}")
    lr = first.fit_defaults["lr"] if lr is None else lr
    settings = check_fit_args(
        epochs, batch_size, lr, weight_decay, optimizer, progress, None, lr_schedule=lr_schedule
    )
    data = [
        m._fit_data(X[k] if per_member else X, y[k] if per_member else y, m.model, m.model, None)
        for k, m in enumerate(methods)
    ]
    xs = torch.stack([d[0] for d in data])
    ys = torch.stack([d[1] for d in data])
    generators = [torch.Generator().manual_seed(int(s)) for s in seeds]
    stacked = StackedModels(nets, xs[0], generators)
    opt = make_optimizer(
        settings.optimizer, stacked.parameters(), settings.lr, settings.weight_decay
    )
    step = StackedLossStep(
        lambda xb, yb: member_task_losses(stacked(xb), yb, first.task),
        opt,
        desc=f"MCDropout (lr={lr})",
    )
    stacked.train()
    try:
        history = train(
            stacked,
            step,
            stacked_batches(xs, ys, settings.batch_size, generators, per_member=True),
            epochs=settings.epochs,
            progress=settings.progress,
            desc=f"MCDropout, {len(nets)} models stacked",
            lr_schedule=settings.lr_schedule,
        )
    finally:
        stacked.write_back(nets)
    for m, (x, yt, _), seed in zip(methods, data, seeds, strict=True):
        m._refit_noise(x, yt, int(seed))
        m._seen_input = tuple(x.shape[1:])
    return history
