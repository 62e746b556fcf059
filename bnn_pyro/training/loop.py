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
    """Minimise ``batch_loss(xb, yb)`` with a torch optimizer.

    Args:
        batch_loss: the mean loss of a minibatch, differentiable in the parameters.
        optimizer: a ``torch.optim.Optimizer`` over the trainable parameters.
        desc: the method's name, for the divergence error.

    Example:
        >>> w = torch.nn.Parameter(torch.zeros(1))
        >>> step = LossStep(lambda x, y: ((x * w - y) ** 2).mean(), torch.optim.SGD([w], lr=0.1))
        >>> x = torch.ones(4); losses = [step(x, 2 * x) for _ in range(50)]
        >>> round(w.detach().item(), 3)
        2.0
    """

    def __init__(
        self,
        batch_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        optimizer: torch.optim.Optimizer,
        desc: str = "fit",
    ) -> None:
        self.batch_loss = batch_loss
        self.optimizer = optimizer
        self.desc = desc

    def __call__(self, xb: torch.Tensor, yb: torch.Tensor) -> float:
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.batch_loss(xb, yb)
        value = loss.item()
        finite = math.isfinite(value)
        if finite:
            loss.backward()
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        if not distributed.average_gradients(params, finite):  # (a no-op in one process)
            self.optimizer.zero_grad(set_to_none=True)
            raise TrainingDivergedError(f"{self.desc}: the loss is {value}")
        self.optimizer.step()
        return value


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
