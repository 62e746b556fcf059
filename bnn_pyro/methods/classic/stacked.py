"""K fits of one classic method in one pass (seeds, data splits): MC dropout, SWAG, Laplace.

The stacked path of ``bp.fit_stacked`` for ``MCDropout``, ``SWAG`` and ``LaplaceApproximation``
models. Their training is a net on the task loss (cross-entropy or squared error, with an L2
``weight_decay``); member ``k`` keeps its own rows, its own initial weights and a generator
seeded with ``seeds[k]`` that draws its minibatch order and its dropout masks in the order its
own ``fit(..., seed=seeds[k])`` draws them from the global generator (see
:mod:`bnn_pyro.training.stacked`). What each method does around the training is its own code,
run per member: SWAG collects its snapshots after each epoch from ``epochs // 2`` on (the
members written back first), and after training MC dropout and SWAG set the noise from their
residuals and Laplace fits its posterior at the MAP. Each member ends as its own fit up to
float rounding (tested).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from bnn_pyro._rng import noise_generators, order_generators
from bnn_pyro.methods.classic.training import check_fit_args
from bnn_pyro.registry import method_specs
from bnn_pyro.training import History, make_optimizer, train
from bnn_pyro.training.stacked import (
    StackedLossStep,
    StackedModels,
    elementwise_optimizer,
    stackable,
    stacked_batches,
)

__all__ = ["fit_classic_stacked", "stacked_classes"]


def stacked_classes() -> tuple[type, ...]:
    """The classic methods that train stacked (the classes themselves, not subclasses): those
    whose :class:`~bnn_pyro.spec.MethodSpec` names :func:`fit_classic_stacked`.

    Example:
        >>> [c.__name__ for c in stacked_classes()]
        ['MCDropout', 'SWAG', 'LaplaceApproximation']
    """
    me = f"{__name__}:{fit_classic_stacked.__name__}"
    return tuple(s.load_class() for s in method_specs().values() if s.stacked_fit == me)


def fit_classic_stacked(
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
    """Train K models of one classic method as one (see the module docstring).

    Args:
        methods: K ``MCDropout``, ``SWAG`` or ``LaplaceApproximation`` of one class, one
            architecture and one likelihood.
        X: ``(N, D)`` shared, or ``(K, N, D)`` one set per member; y: ``(N, ...)`` or
            ``(K, N, ...)``.
        seeds: one per member, as ``fit(seed=)``.
        epochs, batch_size, lr, weight_decay, optimizer, lr_schedule, progress: as the
            class's ``fit`` (``optimizer``: an elementwise one; default the class's: Adam,
            SWAG's SGD with momentum 0.9).

    Returns:
        The :class:`~bnn_pyro.training.History`: ``loss`` (the members' mean), ``member_loss``.

    Raises:
        ValueError: the models cannot train stacked (the reason is named).

    Example:
        >>> import bnn_pyro as bp, torch.nn as nn
        >>> make = lambda: nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 1))
        >>> models = [bp.SWAG(make(), likelihood="regression") for _ in range(3)]
        >>> X = torch.randn(64, 2); y = X.sum(-1)
        >>> history = fit_classic_stacked(models, X, y, seeds=[0, 1, 2], epochs=4,
        ...                               progress=False)
        >>> len(history["member_loss"][-1]), [m.n_models for m in models]
        (3, [2, 2, 2])
    """
    classes = stacked_classes()
    kind = type(methods[0]) if methods else None
    if kind not in classes or any(type(m) is not kind for m in methods):
        names = ", ".join(c.__name__ for c in classes)
        raise ValueError(f"fit_stacked trains models of one of {names} (the class itself) here")
    if len({type(m.likelihood) for m in methods}) > 1:
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
        m.fit_data(X[k] if per_member else X, y[k] if per_member else y, m.model, m.model, None)
        for k, m in enumerate(methods)
    ]
    xs = torch.stack([d[0] for d in data])
    ys = torch.stack([d[1] for d in data])
    member_seeds = [int(s) for s in seeds]
    generators = order_generators(member_seeds)
    noise = noise_generators(generators, member_seeds, xs.device)  # dropout masks
    # each member's own epoch callbacks (SWAG's snapshots), the members written back first
    member_callbacks = [m.epoch_callbacks(settings.epochs) for m in methods]
    stacked = StackedModels(nets, xs[0], noise)

    def per_member_callbacks(_: Any, epoch: int, history: History) -> None:
        if any(member_callbacks):
            stacked.write_back(nets)
        for m, callbacks in zip(methods, member_callbacks, strict=True):
            for callback in callbacks:
                callback(m, epoch, history)

    opt = make_optimizer(
        settings.optimizer, stacked.parameters(), settings.lr, settings.weight_decay
    )
    name = kind.__name__
    step = StackedLossStep(
        lambda xb, yb: first.likelihood.point_loss(stacked(xb), yb).mean(-1),
        opt,
        desc=f"{name} (lr={lr})",
    )
    stacked.train()
    try:
        history = train(
            stacked,
            step,
            stacked_batches(xs, ys, settings.batch_size, generators, per_member=True, noise=noise),
            epochs=settings.epochs,
            callbacks=[per_member_callbacks],
            progress=settings.progress,
            desc=f"{name}, {len(nets)} models stacked",
            lr_schedule=settings.lr_schedule,
        )
    finally:
        stacked.write_back(nets)
    for m, (x, yt, _), seed in zip(methods, data, seeds, strict=True):
        m.complete_training(x, yt, dataclasses.replace(settings, seed=int(seed)))
    return history
