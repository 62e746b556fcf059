"""K fits of one classic method in one pass (seeds, data splits): MC dropout, SWAG, Laplace,
VBLL, SNGP.

The stacked path of ``bp.fit_stacked`` for ``MCDropout``, ``SWAG``, ``LaplaceApproximation``,
``VBLL`` and ``SNGP`` models. The first three train a net on the task loss (cross-entropy or
squared error, with an L2 ``weight_decay``); VBLL and SNGP train the net's body and a head of
their own beside it (VBLL's ``q(W)`` on the ELBO, SNGP's random-feature output weights and
noise on the log joint; the heads stacked as
:class:`~bnn_pyro.training.stacked_heads.StackedHeads`: what each model's
:meth:`~bnn_pyro.methods.classic.base.ClassicMethod.stacked_parts` gives). Member ``k`` keeps
its own rows, its own initial weights and a generator seeded with ``seeds[k]`` that draws its
minibatch order and its dropout masks in the order its own ``fit(..., seed=seeds[k])`` draws
them from the global generator (see :mod:`bnn_pyro.training.stacked`). What each method does
around the training is its own code, run per member: SWAG collects its snapshots after each
epoch from ``epochs // 2`` on (the members written back first), and after training MC dropout
and SWAG set the noise from their residuals, Laplace fits its posterior at the MAP, VBLL puts
``q``'s mean in the net's last layer and SNGP fits its Laplace posterior over the training
rows. Each member ends as its own fit up to float rounding (tested).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.nn as nn

from bnn_pyro.methods.classic.base import RUN_KEYS
from bnn_pyro.methods.classic.engine import train_stacked
from bnn_pyro.methods.classic.training import check_fit_args
from bnn_pyro.registry import method_specs
from bnn_pyro.training import Callback, History
from bnn_pyro.training.callbacks import SeenAs
from bnn_pyro.training.resume import ResumePath, open_resume
from bnn_pyro.training.stacked import elementwise_optimizer, stackable
from bnn_pyro.training.stacked_batches import check_member_sets, member_data
from bnn_pyro.training.stacked_heads import StackedHeads

__all__ = ["fit_classic_stacked", "stacked_classes"]


def stacked_classes() -> tuple[type, ...]:
    """The classic methods that train stacked (the classes themselves, not subclasses): those
    whose :class:`~bnn_pyro.spec.MethodSpec` names :func:`fit_classic_stacked`.

    Example:
        >>> [c.__name__ for c in stacked_classes()]
        ['MCDropout', 'SWAG', 'LaplaceApproximation', 'VBLL', 'SNGP']
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
    average: float | None = None,
    callbacks: Iterable[Callback] = (),
    validation_data: tuple[Any, Any] | None = None,
    resume: ResumePath = None,
    compile: bool = False,
    progress: bool = True,
) -> History:
    """Train K models of one classic method as one (see the module docstring), with the
    options of their own ``fit``.

    Args:
        methods: K ``MCDropout``, ``SWAG``, ``LaplaceApproximation``, ``VBLL`` or ``SNGP``
            of one class, one architecture and one likelihood (VBLL, SNGP: and the same
            settings).
        X: ``(N, D)`` shared, or ``(K, N, D)`` one set per member; y: ``(N, ...)`` or
            ``(K, N, ...)``.
        seeds: one per member, as ``fit(seed=)``.
        epochs, batch_size, lr, weight_decay, optimizer, lr_schedule: as the class's ``fit``
            (``optimizer``: an elementwise one; default the class's: Adam, SWAG's SGD with
            momentum 0.9).
        average, compile, progress: as the class's ``fit``.
        callbacks: ``fn(models, epoch, history)`` after each epoch, ``models`` the K models
            (an ``nn.ModuleList``) as trained so far; ``True`` stops them all. What a callback
            puts in the models (``EarlyStopping(restore_best=True)``) is what they end with.
        validation_data: ``(x_val, y_val)``, ``(Nv, D)`` shared or ``(K, Nv, D)`` one set per
            member: adds ``val_loss`` (the members' mean) and ``member_val_loss`` to the
            history, each member's as its own ``fit`` scores it.
        resume: a file path: the run writes its state there after each epoch, and a call with
            the same path, models and settings goes on from it to the numbers of a run never
            interrupted (see :mod:`bnn_pyro.training.resume`).

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
        ...                               validation_data=(X[:16], y[:16]), progress=False)
        >>> len(history["member_val_loss"][-1]), [m.n_models for m in models]
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
    per_member = check_member_sets(X, y, len(methods))
    owner = nn.ModuleList(methods)
    if len(methods) == 1:  # one model: its own fit, its callbacks seeing the models
        return first.fit(X[0] if per_member else X, y[0] if per_member else y, epochs=epochs,
                         batch_size=batch_size, lr=lr, weight_decay=weight_decay,
                         optimizer=optimizer, lr_schedule=lr_schedule, average=average,
                         callbacks=[SeenAs(cb, owner) for cb in callbacks],
                         validation_data=member_data(validation_data, 0, len(methods)),
                         resume=resume, compile=compile, progress=progress,
                         seed=int(seeds[0]))  # fmt: skip
    nets = [m.model for m in methods]
    reason = stackable(nets, dropout=True)
    if reason is not None:
        raise ValueError(f"these models cannot be trained stacked: {reason}")
    lr = first.fit_defaults["lr"] if lr is None else lr
    settings = check_fit_args(
        epochs, batch_size, lr, weight_decay, optimizer, progress, None,
        callbacks=callbacks, validation_data=validation_data, lr_schedule=lr_schedule,
        average=average, compile=compile,
    )  # fmt: skip
    data = [
        m.fit_data(
            X[k] if per_member else X,
            y[k] if per_member else y,
            m.fit_probe,
            m.model,
            member_data(validation_data, k, len(methods)),
        )
        for k, m in enumerate(methods)
    ]
    validation = None
    if validation_data is not None:
        validation = tuple(torch.stack([d[2][i] for d in data]) for i in (0, 1))
    if resume is not None:
        run = {k: getattr(settings, k) for k in RUN_KEYS}
        run["seeds"] = [int(s) for s in seeds]
        opened = open_resume(resume, owner, settings.callbacks, run, None, extendable=False)
        settings = dataclasses.replace(settings, resume=opened)
    # each member's own epoch callbacks (SWAG's snapshots), the members written back first
    member_callbacks = [
        lambda _, epoch, history, m=m, cb=cb: cb(m, epoch, history)
        for m in methods
        for cb in m.epoch_callbacks(settings.epochs)
    ]
    parts = [m.stacked_parts(d[0]) for m, d in zip(methods, data, strict=True)]
    heads = None
    output_loss = lambda out, yb: first.likelihood.point_loss(out, yb).mean(-1)  # noqa: E731
    if parts[0][1] is not None:  # each member's head beside its net, one loss per member
        _check_same_settings(methods)
        heads = StackedHeads([p[1] for p in parts])
        one, stacked_heads = parts[0][2], heads
        output_loss = lambda out, yb: stacked_heads.map(one, out, yb)  # noqa: E731
    history = train_stacked(
        [p[0] for p in parts],
        output_loss,
        (torch.stack([d[0] for d in data]), torch.stack([d[1] for d in data])),
        settings,
        seeds,
        owner=owner,
        name=kind.__name__,
        desc=f"{kind.__name__}, {len(nets)} models stacked",
        per_member=True,
        validation=validation,  # type: ignore[arg-type]
        callbacks=member_callbacks,
        heads=heads,
    )
    for m, (x, yt, _), seed in zip(methods, data, seeds, strict=True):
        m.complete_training(x, yt, dataclasses.replace(settings, seed=int(seed)))
    return history


def _check_same_settings(methods: Sequence[Any]) -> None:
    """A method that trains a head of its own trains one head design: its members' saved
    settings (``checkpoint_config``) must agree; the first that differs is named."""
    first = methods[0].checkpoint_config()
    for m in methods[1:]:
        other = m.checkpoint_config()
        for key, value in first.items():
            if other.get(key) != value:
                raise ValueError(
                    f"the models' {key} differ ({value!r} and {other.get(key)!r}): stacked "
                    f"{type(m).__name__} models train one head, with one setting of each"
                )
