"""What ``fit`` records and what can stop it: the :class:`History`, :class:`EarlyStopping`,
:class:`Checkpoint` and the :func:`linear_annealing` schedule of ``kl_weight``."""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import torch

from bnn_pyro.training import distributed

if TYPE_CHECKING:
    import matplotlib.axes

__all__ = [
    "History",
    "EarlyStopping",
    "Checkpoint",
    "check_callbacks",
    "linear_annealing",
    "state_copy",
    "SeenAs",
]


def state_copy(module: torch.nn.Module) -> dict[str, Any]:
    """A detached copy of ``module.state_dict()`` (tensors cloned, extra state deep-copied).

    Example:
        >>> state_copy(torch.nn.Linear(2, 1))["weight"].shape
        torch.Size([1, 2])
    """
    return {
        k: v.detach().clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v)
        for k, v in module.state_dict().items()
    }


class History(dict):
    """Per-epoch training record: ``history["loss"][e]`` etc.

    Keys: ``epoch``; ``loss`` (the negative ELBO for the whole training set, averaged over the
    epoch's minibatch estimates); ``nll`` (its expected negative log-likelihood part, same
    scaling); ``kl`` (its KL part, ``(loss - nll) / kl_weight``: exact under
    ``elbo="meanfield"``, a Monte Carlo estimate under ``"trace"``); ``kl_weight``; ``seconds``
    (wall time since ``fit`` started); and ``val_nll`` (mean negative log predictive density per
    validation point) when ``validation_data`` is given. Mean-field SVI fits add, per weight site,
    ``kl/<site>`` (its exact KL to the prior) and ``std/<site>`` (its mean posterior std): see
    :mod:`bnn_pyro.methods.vi.diagnostics`; ``plot(keys=("kl/net.0.weight",))`` draws them.

    Example:
        >>> history = History()
        >>> history.append(epoch=0, loss=3.0); history.append(epoch=1, loss=2.5)
        >>> history["loss"]
        [3.0, 2.5]
    """

    def append(self, **values: float) -> None:
        for key, value in values.items():
            self.setdefault(key, []).append(value)

    def plot(
        self, keys: Iterable[str] = ("loss", "nll", "kl"), ax: matplotlib.axes.Axes | None = None
    ) -> matplotlib.axes.Axes:
        """Plot the given keys against the epoch (log scale); returns the matplotlib Axes."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(6, 3.5))
        for key in keys:
            if key in self:
                ax.plot(self["epoch"], self[key], label=key)
        ax.set_xlabel("epoch")
        ax.set_yscale("symlog")
        ax.legend()
        return ax


def linear_annealing(warmup_epochs: int, start: float = 0.0) -> Callable[[int], float]:
    """A ``kl_weight`` schedule rising linearly from ``start`` to 1 over ``warmup_epochs``.

    Example:
        >>> schedule = linear_annealing(4)
        >>> [schedule(e) for e in range(6)]
        [0.0, 0.25, 0.5, 0.75, 1.0, 1.0]
    """
    if not isinstance(warmup_epochs, int) or warmup_epochs < 1:
        raise ValueError(f"warmup_epochs must be an int >= 1, got {warmup_epochs!r}")
    if not 0.0 <= start <= 1.0:
        raise ValueError(f"start must be in [0, 1], got {start!r}")

    def schedule(epoch: int) -> float:
        return min(1.0, start + (1.0 - start) * epoch / warmup_epochs)

    return schedule


class EarlyStopping:
    """Callback: stop when ``monitor`` has not improved by ``min_delta`` for ``patience`` epochs.

    Args:
        monitor: a history key (``"loss"``, or ``"val_nll"`` with validation data).
        patience: epochs without improvement before stopping.
        min_delta: the smallest decrease that counts as an improvement.
        restore_best: put back the parameters of the best epoch when stopping.

    Example:
        >>> import bnn_pyro as bp
        >>> X = torch.randn(40, 2); y = X.sum(-1)
        >>> bnn = bp.VariationalBNN(bp.nn.mlp(2, [], 1), bp.Gaussian(scale=0.1))
        >>> stop = EarlyStopping(monitor="val_nll", patience=2, min_delta=1e9)
        >>> history = bnn.fit(X, y, epochs=50, validation_data=(X, y), callbacks=[stop],
        ...                   progress=False, seed=0)
        >>> len(history["val_nll"])  # stopped after 2 epochs without a 1e9 improvement
        3
    """

    def __init__(
        self,
        monitor: str = "loss",
        patience: int = 10,
        min_delta: float = 0.0,
        restore_best: bool = False,
    ) -> None:
        if not isinstance(patience, int) or patience < 1:
            raise ValueError(f"patience must be an int >= 1, got {patience!r}")
        if min_delta < 0:
            raise ValueError(f"min_delta must be >= 0, got {min_delta!r}")
        self.monitor, self.patience, self.min_delta = monitor, patience, float(min_delta)
        self.restore_best = restore_best
        self.best = math.inf
        self.best_epoch = -1
        self._best_state: dict[str, torch.Tensor] | None = None

    def check_before_fit(self, has_validation: bool) -> None:
        """Refuse a validation monitor (``val_*``) when ``fit`` has no ``validation_data``:
        called by :func:`check_callbacks` before the first step, so nothing has moved yet."""
        if self.monitor.startswith("val_") and not has_validation:
            raise ValueError(
                f"validation_data is required: EarlyStopping monitors {self.monitor!r}, which "
                "only fit(..., validation_data=(X_val, y_val)) records"
            )

    def __call__(self, bnn: Any, epoch: int, history: History) -> bool:
        if self.monitor not in history:
            raise ValueError(
                f"EarlyStopping monitors {self.monitor!r}, which the history does not have "
                f"(keys: {sorted(history)}); pass validation_data to fit for 'val_nll'"
            )
        value = history[self.monitor][-1]
        if value < self.best - self.min_delta:
            self.best, self.best_epoch = value, epoch
            if self.restore_best:
                self._best_state = state_copy(bnn)
            return False
        if epoch - self.best_epoch >= self.patience:
            if self.restore_best and self._best_state is not None:
                bnn.load_state_dict(self._best_state)
            return True
        return False


class Checkpoint:
    """Callback: ``bnn.save(path)`` every ``every`` epochs (each write is atomic).

    Args:
        path: the checkpoint file.
        every: epochs between saves.

    Example:
        >>> import os, tempfile, bnn_pyro as bp
        >>> X = torch.randn(20, 2); y = X.sum(-1)
        >>> path = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
        >>> _ = bp.VariationalBNN(bp.nn.mlp(2, [], 1), bp.Gaussian(0.1)).fit(
        ...     X, y, epochs=2, callbacks=[Checkpoint(path)], progress=False)
        >>> os.path.exists(path)
        True
    """

    def __init__(self, path: str | os.PathLike, every: int = 1) -> None:
        if not isinstance(path, str | os.PathLike):
            raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
        folder = os.path.dirname(os.path.abspath(os.fspath(path)))
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"path {os.fspath(path)!r}: its folder does not exist")
        if os.path.isdir(path):
            raise IsADirectoryError(f"path {os.fspath(path)!r} is a folder, not a file name")
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be an int >= 1, got {every!r}")
        self.path, self.every = os.fspath(path), every

    def __call__(self, bnn: Any, epoch: int, history: History) -> bool:
        if (epoch + 1) % self.every == 0 and distributed.rank() == 0:  # one writer
            bnn.save(self.path)
        return False


def check_callbacks(callbacks: Iterable[Any], has_validation: bool) -> list[Any]:
    """``callbacks`` as a list, each checked before the first step: it must be callable as
    ``fn(model, epoch, history)``, and a callback with ``check_before_fit(has_validation)``
    (e.g. :class:`EarlyStopping` on ``"val_nll"``) checks that what it needs will be there.

    Raises:
        TypeError: ``callbacks`` is not an iterable of callables (the message names the index).
        ValueError: from a callback's own ``check_before_fit``.

    Example:
        >>> len(check_callbacks([EarlyStopping("loss")], has_validation=False))
        1
        >>> check_callbacks([42], has_validation=False)
        Traceback (most recent call last):
          ...
        TypeError: callbacks[0] must be callable as fn(model, epoch, history), got int
    """
    if isinstance(callbacks, str | bytes) or not isinstance(callbacks, Iterable):
        raise TypeError(f"callbacks must be a list of callables, got {type(callbacks).__name__}")
    out = list(callbacks)
    for i, cb in enumerate(out):
        if not callable(cb):
            raise TypeError(
                f"callbacks[{i}] must be callable as fn(model, epoch, history), "
                f"got {type(cb).__name__}"
            )
        check = getattr(cb, "check_before_fit", None)
        if callable(check):
            check(has_validation)
    return out


class SeenAs:
    """A callback called with ``owner`` in place of the model its loop hands it; every other
    attribute (``check_before_fit``, ``state_dict``) is the callback's own.

    Example:
        >>> seen = SeenAs(lambda model, epoch, history: print(type(model).__name__, epoch),
        ...               torch.nn.ModuleList())
        >>> seen(torch.nn.Linear(1, 1), 3, History())
        ModuleList 3
        >>> SeenAs(EarlyStopping("val_nll"), None).check_before_fit(has_validation=True)
    """

    def __init__(self, callback: Callable[..., Any], owner: Any) -> None:
        self.callback, self.owner = callback, owner

    def __call__(self, model: Any, epoch: int, history: History) -> Any:
        return self.callback(self.owner, epoch, history)

    def __getattr__(self, name: str) -> Any:
        if name in ("callback", "owner"):  # not set yet (a copy being made)
            raise AttributeError(name)
        return getattr(self.callback, name)
