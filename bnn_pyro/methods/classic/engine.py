"""The classic family's one stacked engine: K nets trained as one with every option of a fit.

``DeepEnsemble.fit`` (its members) and :func:`bnn_pyro.fit_stacked` (K models of MC dropout,
SWAG or Laplace) both train K nets of one architecture on a loss of their outputs; this is the
one place that does it (see :mod:`bnn_pyro.training.stacked` for how K nets train as one and
why the numbers are those of K one-by-one runs). What a one-by-one run takes, this takes, from
the same :class:`~bnn_pyro.methods.classic.training.TrainSettings`: the optimizer and its
learning-rate schedule, the iterate average, the compiled loss, callbacks, validation data and
a resume file.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn as nn

from bnn_pyro._rng import noise_generators, order_generators
from bnn_pyro.methods.classic.training import TrainSettings, modes, module_device
from bnn_pyro.training import History, make_optimizer, train
from bnn_pyro.training.compiled import compile_loss
from bnn_pyro.training.stacked import StackedLossStep, StackedModels
from bnn_pyro.training.stacked_batches import stacked_batches

__all__ = ["train_stacked"]

Data = tuple[torch.Tensor, torch.Tensor]
#: ``(outputs (K, B, O), targets (K, B, ...)) -> (K,)``: each member's mean loss.
OutputLoss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def train_stacked(
    nets: Sequence[nn.Module],
    output_loss: OutputLoss,
    data: Data,
    settings: TrainSettings,
    seeds: Sequence[int],
    *,
    owner: nn.Module,
    name: str,
    desc: str,
    per_member: bool = False,
    validation: Data | None = None,
    member_callbacks: Sequence[Callable[[int, History], None]] = (),
) -> History:
    """Train ``nets`` as one stacked net; each ends as its own run seeded with its seed would.

    Every epoch, the members are written back before any callback runs, so callbacks see them as
    trained so far; whatever a callback then puts in the members (``EarlyStopping``'s
    ``restore_best``) is what training goes on from, and what the members end with.

    Args:
        nets: K nets of one architecture (see :func:`~bnn_pyro.training.stacked.stackable`;
            ``nn.Dropout`` layers draw each member's masks from its own generator).
        output_loss: ``(out (K, B, O), y (K, B, ...)) -> (K,)``, the members' mean losses.
        data: ``(x, y)``, ``(N, ...)`` shared, or ``(K, N, ...)`` with ``per_member``, on the
            nets' device.
        settings: the checked options of the fit (``settings.seed`` is not read: ``seeds``).
        seeds: member ``k``'s seed, which draws its minibatch order and dropout masks.
        owner: what the user's callbacks (``settings.callbacks``) are called with, and what a
            resume file (``settings.resume``) holds besides the stacked parameters.
        name: the method's name, for the divergence error.
        desc: the progress bar's label.
        per_member: ``data`` holds each member's own rows.
        validation: ``(x (K, Nv, ...), y (K, Nv, ...))``: after each epoch, ``val_loss`` (the
            members' mean) and ``member_val_loss``, ``output_loss`` in eval mode.
        member_callbacks: ``fn(epoch, history)`` after each epoch, the members written back,
            before the user's callbacks (SWAG's snapshot collectors).

    Returns:
        The :class:`~bnn_pyro.training.History`: ``loss`` (the members' mean) and
        ``member_loss`` per epoch, and the validation entries.

    Example:
        >>> from bnn_pyro.methods.classic.training import check_fit_args
        >>> nets = [nn.Linear(2, 1) for _ in range(3)]
        >>> x = torch.randn(16, 2); y = x.sum(-1, keepdim=True)
        >>> settings = check_fit_args(5, 8, 0.1, 0.0, "adam", False, None)
        >>> mse = lambda out, y: ((out - y) ** 2).mean((1, 2))
        >>> h = train_stacked(nets, mse, (x, y), settings, [0, 1, 2],
        ...                   owner=nn.ModuleList(nets), name="fit", desc="fit")
        >>> len(h["member_loss"][-1]), h["loss"][-1] < h["loss"][0]
        (3, True)
    """
    nets = list(nets)
    x, y = data
    seeds = [int(s) for s in seeds]
    # each member's generators of its minibatch order and dropout masks, as its own seeded run
    # draws them: one CPU stream for both on the CPU, the device's for the masks on a GPU
    generators = order_generators(seeds)
    noise = noise_generators(generators, seeds, module_device(nets[0]))
    stacked = StackedModels(nets, x[0] if per_member else x, noise)
    batches = stacked_batches(x, y, settings.batch_size, generators, per_member, noise)
    if settings.resume is not None:  # the run's state is the stacked parameters, not the members
        for name, p in stacked.named_parameters():
            settings.resume.extra[name] = p

    def loss(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        return output_loss(stacked(xb), yb)

    member_losses = compile_loss(loss) if settings.compile else loss
    optimizer = make_optimizer(
        settings.optimizer, stacked.parameters(), settings.lr, settings.weight_decay
    )
    step = StackedLossStep(member_losses, optimizer, desc=f"{name} (lr={settings.lr})")
    users = list(settings.callbacks)

    def after_epoch(_: Any, epoch: int, history: History) -> bool:
        if member_callbacks or users:
            stacked.write_back(nets)
        for callback in member_callbacks:
            callback(epoch, history)
        stop = any([bool(cb(owner, epoch, history)) for cb in users])
        if users:  # what a callback put in the members is what training goes on from
            stacked.read_from(nets)
        return stop

    def val_loss() -> dict[str, Any]:
        xv, yv = validation  # type: ignore[misc]
        stacked.eval()
        try:
            with torch.no_grad():
                per_member_loss = loss(xv, yv).tolist()  # eager: no graph for one more shape
        finally:
            stacked.train()
        return {"val_loss": sum(per_member_loss) / len(nets), "member_val_loss": per_member_loss}

    stacked.train()
    try:
        with modes(owner, lambda m: True):
            return train(
                stacked,
                step,
                batches,
                callbacks=[after_epoch],
                validation=None if validation is None else val_loss,
                desc=desc,
                **settings.loop_options(),
            )
    finally:
        stacked.write_back(nets)
