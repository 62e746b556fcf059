"""The classic family's one training engine: one net, or K nets of one architecture stacked.

Every classic fit trains through :func:`train_nets`: a loss minimised by the one
:class:`~bnn_pyro.training.LossStep` in the one loop (:func:`bnn_pyro.training.train`), with
every option of :class:`~bnn_pyro.methods.classic.training.TrainSettings` (the optimizer and its
learning-rate schedule, the iterate average, the compiled loss, callbacks, validation data and
a resume file). Two thin calls choose what trains and the order of the rows:

- :func:`train_epochs`, one net (a method's own ``fit``): its loss ``()``, its rows in the order
  of the global generator, forked and seeded with the run's seed;
- :func:`train_stacked`, K nets as one (``DeepEnsemble.fit``'s members, and
  :func:`bnn_pyro.fit_stacked` of MC dropout, SWAG or Laplace): their losses ``(K,)``, member
  ``k``'s rows and dropout masks from a generator seeded as its own run's, so that each member
  ends where :func:`train_epochs` of it with its seed ends, to float rounding (tested; see
  :mod:`bnn_pyro.training.stacked` for why). ``fit_stacked`` of one model is that model's
  own ``fit``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
import torch.nn as nn

from bnn_pyro._rng import noise_generators, order_generators, seeded
from bnn_pyro.methods.classic.training import TrainSettings, module_device
from bnn_pyro.nn.modes import modes
from bnn_pyro.training import Callback, History, LossStep, make_optimizer, train
from bnn_pyro.training.batches import permuted_batches
from bnn_pyro.training.compiled import compile_loss
from bnn_pyro.training.stacked import StackedModels, member_tensors
from bnn_pyro.training.stacked_batches import stacked_batches
from bnn_pyro.training.stacked_heads import StackedHeads

__all__ = ["train_epochs", "train_nets", "train_stacked"]

Data = tuple[torch.Tensor, torch.Tensor]
Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
#: ``(outputs (K, B, O), targets (K, B, ...)) -> (K,)``: each member's mean loss.
OutputLoss = Loss


def train_nets(
    module: nn.Module,
    params: Iterable[torch.Tensor],
    losses: Loss,
    batches: Callable[[], Iterable[Data]],
    settings: TrainSettings,
    *,
    owner: nn.Module,
    name: str,
    desc: str,
    validation: Data | None = None,
    callbacks: Sequence[Callback] = (),
    sync: tuple[Callable[[], None], Callable[[], None]] | None = None,
) -> History:
    """Minimise ``losses(xb, yb)`` (``()`` one net, ``(K,)`` K stacked) over ``batches()`` with
    the options of ``settings``; return the :class:`~bnn_pyro.training.History`.

    ``module`` trains in train mode (``owner``'s flags restored afterwards); the loop's
    snapshots and iterate average hold it. After each epoch, ``callbacks`` and then the user's
    (``settings.callbacks``) are called as ``fn(owner, epoch, history)``, a ``True`` stopping
    the run; with ``sync = (write_back, read_from)``, the members are written back before them
    and read back after (what a callback put in them is what training goes on from).

    Args:
        module: what trains (a net, or :class:`~bnn_pyro.training.stacked.StackedModels`).
        params: the trainable tensors (the optimizer's).
        losses: ``(xb, yb) -> ()`` or ``(K,)``; compiled where ``settings.compile``.
        batches: the epoch's minibatches, called once per epoch.
        settings: the checked options of the fit.
        owner: what callbacks see.
        name: names the run in the divergence error.
        desc: the progress bar's label.
        validation: ``(x_val, y_val)``: after each epoch ``val_loss`` (``losses`` in eval mode,
            eager, without gradients; K members: their mean, and ``member_val_loss``).
        callbacks: the method's own, before the user's.
        sync: ``(write_back, read_from)`` around the callbacks, or ``None``.

    Example:
        >>> from bnn_pyro.methods.classic.training import check_fit_args
        >>> net = nn.Linear(2, 1); x = torch.randn(16, 2); y = x.sum(-1, keepdim=True)
        >>> settings = check_fit_args(40, 8, 0.1, 0.0, "adam", False, None)
        >>> h = train_nets(net, net.parameters(), lambda xb, yb: ((net(xb) - yb) ** 2).mean(),
        ...                permuted_batches(x, y, 8), settings, owner=net, name="fit", desc="fit")
        >>> h["loss"][-1] < h["loss"][0]
        True
    """
    step_losses = compile_loss(losses) if settings.compile else losses
    optimizer = make_optimizer(settings.optimizer, params, settings.lr, settings.weight_decay)
    step = LossStep(step_losses, optimizer, desc=f"{name} (lr={settings.lr})")
    called = [*callbacks, *settings.callbacks]

    def after_epoch(_: Any, epoch: int, history: History) -> bool:
        if sync is not None and called:
            sync[0]()
        stop = any([bool(cb(owner, epoch, history)) for cb in called])
        if sync is not None and called:
            sync[1]()
        return stop

    def val_loss() -> dict[str, Any]:
        xv, yv = validation  # type: ignore[misc]
        module.train(False)
        try:
            with torch.no_grad():
                value = losses(xv, yv)  # eager: no graph for one more shape
        finally:
            module.train(True)
        if value.dim() == 0:
            return {"val_loss": float(value)}
        per_member = value.tolist()
        return {"val_loss": sum(per_member) / len(per_member), "member_val_loss": per_member}

    with modes(owner, lambda m: True):
        module.train(True)
        return train(
            module,
            step,
            batches,
            callbacks=[after_epoch],
            validation=None if validation is None else val_loss,
            desc=desc,
            **settings.loop_options(),
        )


def train_epochs(
    params: Iterable[torch.Tensor],
    losses: Loss,
    data: Data,
    settings: TrainSettings,
    *,
    module: nn.Module,
    owner: nn.Module,
    name: str,
    seed: int | None = None,
    validation: Data | None = None,
    callbacks: Sequence[Callback] = (),
) -> History:
    """:func:`train_nets` of one net: ``losses(xb, yb) -> ()`` over shuffled minibatches of
    ``data`` (``(N, ...)`` each), on the global generator forked and seeded with ``seed``
    (default ``settings.seed``; each epoch's order is ``torch.randperm`` of it, the net's
    dropout masks drawn from the same stream; the caller's generator is left as it was).

    Example:
        >>> from bnn_pyro.methods.classic.training import check_fit_args
        >>> net = nn.Linear(2, 1); x = torch.randn(16, 2); y = x.sum(-1, keepdim=True)
        >>> settings = check_fit_args(40, 8, 0.1, 0.0, "adam", False, 0)
        >>> h = train_epochs(net.parameters(), lambda xb, yb: ((net(xb) - yb) ** 2).mean(),
        ...                  (x, y), settings, module=net, owner=net, name="fit")
        >>> h["loss"][-1] < h["loss"][0]
        True
    """
    x, y = data
    with seeded(settings.seed if seed is None else seed, x.device):
        return train_nets(
            module,
            params,
            losses,
            permuted_batches(x, y, settings.batch_size),
            settings,
            owner=owner,
            name=name,
            desc=name,
            validation=validation,
            callbacks=callbacks,
        )


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
    callbacks: Sequence[Callback] = (),
    heads: StackedHeads | None = None,
) -> History:
    """:func:`train_nets` of ``nets`` stacked as one net; each ends as its own run seeded with
    its seed would.

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
        callbacks: ``fn(owner, epoch, history)`` after each epoch, the members written back,
            before the user's callbacks (SWAG's snapshot collectors, each bound to its member).
        heads: the members' own heads trained beside the nets (VBLL's ``q``), stacked, which
            ``output_loss`` reads; they train without ``fit``'s weight
            decay (a head has a prior of its own) and are written back with the nets.

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
    module: nn.Module = stacked
    params: list[Any] = list(stacked.parameters())
    if heads is not None:
        module = nn.ModuleDict({"nets": stacked, "heads": heads})
        own = [p for p in heads.parameters() if p.requires_grad]
        params = [{"params": params}, {"params": own, "weight_decay": 0.0}]
    if settings.resume is not None:  # the run's state is the stacked tensors, not the members
        for key, p in member_tensors(module):
            settings.resume.extra[key] = p

    def losses(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        return output_loss(stacked(xb), yb)

    def write_back() -> None:
        stacked.write_back(nets)
        if heads is not None:
            heads.write_back()

    def read_from() -> None:
        stacked.read_from(nets)
        if heads is not None:
            heads.read_from()

    try:
        return train_nets(
            module,
            params,
            losses,
            stacked_batches(x, y, settings.batch_size, generators, per_member, noise),
            settings,
            owner=owner,
            name=name,
            desc=desc,
            validation=validation,
            callbacks=callbacks,
            sync=(write_back, read_from),
        )
    finally:
        write_back()
