"""The one training loop behind every gradient-trained method's ``fit``.

:func:`train` runs the epochs: minibatches, a tqdm bar, the :class:`History`, callbacks, an
optional validation score, and a divergence guard. What a step *is* lives in a
:class:`TrainingStep`: :class:`LossStep` minimises a plain loss with a torch optimizer (MC
dropout, ensembles, SWAG, the MAP phase of Laplace, ``VariationalBayesNN``);
:class:`bnn_pyro.methods.vi.svi.SVIStep` takes one SVI step (``VariationalBNN``,
``HiddenLayerBNN``).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch

from bnn_pyro._progress import tqdm
from bnn_pyro.exceptions import TrainingDivergedError
from bnn_pyro.training import distributed
from bnn_pyro.training.blowup import BlowUpGuard
from bnn_pyro.training.callbacks import History, state_copy
from bnn_pyro.training.schedules import IterateAverage, LRScheduleSpec, make_lr_schedule

__all__ = ["Batch", "Callback", "LossStep", "TrainingStep", "train"]

Batch = tuple[torch.Tensor, torch.Tensor]
Callback = Callable[[Any, int, History], "bool | None"]

# The divergence guard restores a snapshot only when the parameters themselves became
# non-finite; snapshots are refreshed at an epoch boundary at most this often, so the copy
# stays off the hot path of small, fast epochs.
_SNAPSHOT_SECONDS = 1.0
_NON_FINITE = re.compile(r"\b(nan|inf)\b")


class TrainingStep:
    """One optimisation step of a method, plugged into :func:`train`.

    A subclass implements :meth:`__call__` (one step on a minibatch, returning its loss; it
    raises :class:`~bnn_pyro.TrainingDivergedError` on a non-finite loss *before* the optimizer
    moves) and may override :meth:`start_epoch` and :meth:`end_epoch`.

    Example:
        >>> class Count(TrainingStep):  # a step that only counts its minibatches
        ...     def __call__(self, xb, yb):
        ...         return float(len(xb))
        >>> history = train(torch.nn.Linear(1, 1), Count(), lambda: [(torch.ones(4, 1), None)],
        ...                 epochs=2, progress=False)
        >>> history["loss"]
        [4.0, 4.0]
    """

    #: The torch optimizer the step moves (what ``lr_schedule`` drives), or ``None``.
    optimizer: torch.optim.Optimizer | None = None

    #: Whether the step minimises its loss, so that a loss that climbs back up and stays there
    #: is a blow-up (:mod:`bnn_pyro.training.blowup`). A sampler's loss rises from its lowest
    #: point to the typical set by design: its step sets ``False`` and no guard judges it.
    minimizes: bool = True

    def start_epoch(self, epoch: int) -> None:
        """Called before the epoch's first step."""

    def __call__(self, xb: torch.Tensor, yb: torch.Tensor) -> float:
        raise NotImplementedError

    def end_epoch(self, losses: list[float], sizes: list[int]) -> dict[str, float]:
        """The epoch's history row from its step losses and minibatch sizes (default: the mean
        loss per point, each minibatch weighted by its size)."""
        return {"loss": sum(x * n for x, n in zip(losses, sizes, strict=True)) / sum(sizes)}

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs of the step (default: the optimizer's state)."""
        return {} if self.optimizer is None else {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        if self.optimizer is not None:
            self.optimizer.load_state_dict(state["optimizer"])


class LossStep(TrainingStep):
    """Minimise ``losses(xb, yb)`` with a torch optimizer: one model's mean minibatch loss
    ``()``, or K stacked members' ``(K,)``, whose sum is back-propagated (slice ``k`` of every
    gradient is member ``k``'s own) so that an elementwise optimizer moves each member as it
    would move that member alone.

    The history row: one model, ``loss`` (the mean loss per point, each minibatch weighted by
    its rows); K members, ``loss`` (their mean) and ``member_loss`` (a list), their minibatches
    ``(K, B, ...)``. Every step starts and ends with the gradients cleared; a non-finite loss
    raises :class:`~bnn_pyro.TrainingDivergedError` (naming the members that diverged) before
    the optimizer moves. The VI engine's :class:`~bnn_pyro.methods.vi.engine.ObjectiveStep` is
    this step on the VI objective.

    Args:
        losses: ``(xb, yb) -> ()`` or ``(K,)``, differentiable in the parameters.
        optimizer: a ``torch.optim.Optimizer`` over the trainable parameters (elementwise for
            K > 1).
        desc: names the run in the divergence error (``None``: unnamed).

    Example:
        >>> w = torch.nn.Parameter(torch.zeros(1))
        >>> step = LossStep(lambda x, y: ((x * w - y) ** 2).mean(), torch.optim.SGD([w], lr=0.1))
        >>> x = torch.ones(4); losses = [step(x, 2 * x) for _ in range(50)]
        >>> round(w.detach().item(), 3)
        2.0
        >>> v = torch.nn.Parameter(torch.zeros(2, 1))  # two members, a row of weights each
        >>> step = LossStep(lambda x, y: ((x * v - y) ** 2).mean(-1), torch.optim.SGD([v], lr=0.1))
        >>> x = torch.ones(2, 4); y = torch.tensor([[1.0], [3.0]]) * x
        >>> step.start_epoch(0); losses = [step(x, y) for _ in range(60)]
        >>> [round(t, 3) for t in v.detach().squeeze(-1).tolist()], len(step.end_epoch([], [])["member_loss"])
        ([1.0, 3.0], 2)
    """  # noqa: E501

    def __init__(
        self,
        losses: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        optimizer: torch.optim.Optimizer,
        desc: str | None = "fit",
    ) -> None:
        if not callable(losses):
            raise TypeError(f"the loss must be callable, got {type(losses).__name__}")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch optimizer, got {type(optimizer).__name__}")
        self.losses, self.optimizer, self.desc = losses, optimizer, desc
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        self._members: list[torch.Tensor] = []  # K members: each step's losses times its rows
        self._rows = 0

    def start_epoch(self, epoch: int) -> None:
        self._members, self._rows = [], 0

    def _clear(self) -> None:
        # what zero_grad(set_to_none=True) does, without its profiler record per call (a
        # visible share of a small net's step)
        # Measured: ``benchmarks/results/library_measurements.md``, section 'Clearing gradients
        # by hand'.
        for p in self.params:
            p.grad = None

    def loss(self, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        """The minibatch's loss, ``()`` or ``(K,)`` (a subclass computes more beside it)."""
        return self.losses(xb, yb)

    def record(self, loss: torch.Tensor, xb: torch.Tensor) -> None:
        """Keep what the epoch's row needs of a finished step (its detached ``loss``)."""
        if loss.dim():
            rows = xb.shape[1]
            self._members.append(loss * rows)
            self._rows += rows

    def __call__(self, xb: torch.Tensor, yb: torch.Tensor) -> float:
        self._clear()
        loss = self.loss(xb, yb)
        total = loss if loss.dim() == 0 else loss.sum()
        value = total.item()
        finite = math.isfinite(value)
        if finite:
            total.backward()
        if not distributed.average_gradients(self.params, finite):  # (no-op in one process)
            self._clear()
            raise TrainingDivergedError(self._diverged(loss.detach(), value))
        self.optimizer.step()
        self._clear()
        self.record(loss.detach(), xb)
        return value / loss.numel()

    def _diverged(self, loss: torch.Tensor, value: float) -> str:
        named = "" if self.desc is None else f"{self.desc}: "
        if loss.dim() == 0:
            return f"{named}the loss is {value}"
        bad = [k + 1 for k, v in enumerate(loss.tolist()) if not math.isfinite(v)]
        return f"{named}the loss of member(s) {bad} of {len(loss)} is not finite"

    def end_epoch(self, losses: list[float], sizes: list[int]) -> dict[str, Any]:
        if not self._members:
            return super().end_epoch(losses, sizes)
        per_member = (torch.stack(self._members).sum(0) / self._rows).tolist()
        return {"loss": sum(per_member) / len(per_member), "member_loss": per_member}


def _params_finite(module: torch.nn.Module) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in module.parameters())


def _diverged(module: torch.nn.Module, err: Exception) -> bool:
    """Is ``err`` (raised by a step) a divergence? A :class:`TrainingDivergedError`, any error
    once the parameters are non-finite, or a distribution refusing a NaN/inf value (Pyro's
    validation: "found invalid values: tensor([nan])") -- e.g. a learned noise scale that
    overflowed on a huge target."""
    if isinstance(err, TrainingDivergedError) or not _params_finite(module):
        return True
    text = str(err)
    refused = isinstance(err, ValueError) and "invalid values" in text
    return refused and _NON_FINITE.search(text) is not None


def _what(err: Exception) -> str:
    if isinstance(err, TrainingDivergedError):
        return str(err)
    if "invalid values" in str(err):
        return "a distribution was given a NaN or infinite value (the parameters overflowed)"
    return f"{type(err).__name__} once the parameters were non-finite"


def train(
    module: torch.nn.Module,
    step: TrainingStep,
    batches: Callable[[], Iterable[Batch]],
    *,
    epochs: int,
    callbacks: Iterable[Callback] = (),
    validation: Callable[[], dict[str, float]] | None = None,
    progress: bool = True,
    desc: str = "fit",
    lr_schedule: LRScheduleSpec = None,
    average: float | None = None,
    resume: Any = None,
) -> History:
    """Run ``epochs`` passes of ``step`` over ``batches()``; return the :class:`History`.

    What a failure leaves behind:

    - a divergence (a step raising :class:`~bnn_pyro.TrainingDivergedError`, any error once
      the parameters are non-finite, or a distribution refusing a NaN/inf value) stops training
      with a ``TrainingDivergedError`` naming the epoch and step; if the parameters became
      non-finite, the last finite snapshot (at most a second old, taken at an epoch boundary)
      is restored, so the module stays usable (a method's ``fit`` then puts the whole method
      back as it was before the call: see :class:`~bnn_pyro.BaseBayesianMethod`);
    - any other exception (a bad minibatch, a callback that raises, ...) restores the state
      ``module`` had when ``train`` was called, then propagates unchanged;
    - ``KeyboardInterrupt`` keeps the progress made (restoring the last finite snapshot only if
      the parameters are non-finite).

    Args:
        module: the model being trained (snapshots and callbacks see it).
        step: one optimisation step (see :class:`TrainingStep`).
        batches: called once per epoch; yields ``(x (B, ...), y (B, ...))`` minibatches.
        epochs: number of passes (``>= 0``).
        callbacks: ``fn(module, epoch, history)`` after each epoch; ``True`` stops training.
        validation: returns extra history entries after each epoch (e.g. ``{"val_nll": ...}``).
        progress: show a tqdm bar.
        desc: the bar's label.
        lr_schedule: the learning rate over the epochs (see
            :func:`~bnn_pyro.training.schedules.make_lr_schedule`): ``None``/``"constant"``,
            ``"cosine"``, ``"step"``, ``"warmup_cosine"``, a callable ``progress -> factor`` or a
            torch scheduler class; needs ``step.optimizer``.
        average: if given, a fraction in (0, 1]: the parameters end at the mean of their
            iterates over that last share of the epochs (every step; see
            :class:`~bnn_pyro.training.schedules.IterateAverage`).
        resume: a :class:`~bnn_pyro.training.resume.Resume`: restores a saved run before the
            first epoch and writes the resume file after each (see that module).

    Returns:
        The :class:`History`: one row per epoch with ``epoch``, the step's entries (``loss``
        ...), ``lr`` (when a schedule runs), the validation entries and ``seconds`` since the
        start.

    Example:
        >>> w = torch.nn.Linear(1, 1)
        >>> step = LossStep(lambda x, y: ((w(x) - y) ** 2).mean(), torch.optim.SGD(w.parameters(), lr=0.1))
        >>> x = torch.randn(32, 1)
        >>> history = train(w, step, lambda: [(x, 3 * x)], epochs=200, progress=False)
        >>> history["loss"][-1] < 1e-6
        True
    """  # noqa: E501
    history = History()
    callbacks = list(callbacks)
    if resume is not None and distributed.active():
        raise ValueError(
            "resume is not supported under torch.distributed yet: pass resume=None (use the "
            "Checkpoint callback, which writes from rank 0)"
        )
    distributed.broadcast_module(module)  # every rank starts from rank 0's parameters
    distributed.rank_noise_seed()  # and draws its own noise
    set_epoch = make_lr_schedule(lr_schedule, step.optimizer, epochs)
    averager = None if average is None else IterateAverage(module, average, epochs)
    first = 0
    if resume is not None:
        first, history, skip = resume.begin(module, step, batches, set_epoch, averager, epochs)
        if skip:
            return history
    start = time.perf_counter() - (history["seconds"][-1] if history.get("seconds") else 0.0)
    shown_here = progress and distributed.rank() == 0
    bar = tqdm(range(first, epochs), desc=desc, unit="epoch", disable=not shown_here, leave=False)
    snapshot, snapshot_time = state_copy(module), time.perf_counter()
    initial = snapshot
    guard = BlowUpGuard(module) if step.minimizes else None
    if guard is not None:
        for past in range(len(history.get("loss", []))):  # a resumed run's epochs so far
            guard.after_epoch({k: v[past] for k, v in history.items() if len(v) > past}, False)
    try:
        for epoch in bar:
            if time.perf_counter() - snapshot_time > _SNAPSHOT_SECONDS:
                snapshot, snapshot_time = state_copy(module), time.perf_counter()
            if set_epoch is not None:
                set_epoch(epoch)
            step.start_epoch(epoch)
            losses: list[float] = []
            sizes: list[int] = []
            for i, (xb, yb) in enumerate(batches()):
                try:
                    losses.append(step(xb, yb))
                except Exception as err:
                    if not _diverged(module, err):
                        raise
                    if not _params_finite(module):
                        module.load_state_dict(snapshot)
                    raise TrainingDivergedError(
                        f"{_what(err)} at epoch {epoch}, step {i}: training stopped (a method's "
                        "fit leaves the model as it was before the call). A lower learning rate "
                        "(a smaller lr), a smaller init_scale or standardised inputs and targets "
                        "usually help."
                    ) from None
                sizes.append(len(xb))
                if averager is not None:
                    averager.update(epoch)
            if not losses:
                raise ValueError("the training data yielded no minibatch")
            row: dict[str, float] = {"epoch": epoch, **step.end_epoch(losses, sizes)}
            if set_epoch is not None:
                row["lr"] = step.optimizer.param_groups[0]["lr"]  # type: ignore[union-attr]
            if validation is not None:
                row.update(validation())
            row["seconds"] = time.perf_counter() - start
            history.append(**distributed.mean_row(row))  # the same row on every rank
            if guard is not None:
                guard.after_epoch({k: v[-1] for k, v in history.items()})
            shown = {k: f"{row[k]:.4g}" for k in ("loss", "kl") if k in row}
            bar.set_postfix(shown, refresh=False)
            stop = any([bool(cb(module, epoch, history)) for cb in callbacks])
            if resume is not None:
                resume.end_epoch(epoch, stop)
            if stop:
                break
    except TrainingDivergedError:
        raise
    except Exception:
        module.load_state_dict(initial)  # an error that is not a divergence: as before train
        raise
    except BaseException:  # KeyboardInterrupt: keep the progress, if it is finite
        if not _params_finite(module):
            module.load_state_dict(snapshot)
        raise
    finally:
        bar.close()
    if averager is not None:
        averager.apply()
    history.blowups = [] if guard is None else guard.finish()  # type: ignore[attr-defined]
    return history
