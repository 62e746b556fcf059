"""The minibatches of the one loop: ``batches()`` callables, called once per epoch."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader

from bnn_pyro.training import distributed

__all__ = [
    "Batches",
    "gather_loader",
    "loader_batches",
    "permuted_batches",
    "shuffled_batches",
    "validation_nll",
    "validation_pair",
]

Batches = Callable[[], Iterable[tuple[torch.Tensor, torch.Tensor]]]


def shuffled_batches(
    X: torch.Tensor, y: torch.Tensor, batch_size: int, shuffle: bool, seed: int | None
) -> Batches:
    """Minibatches of ``(X (N, ...), y (N, ...))`` in an order drawn from a generator of their
    own (seeded with ``seed``; drawn from the global RNG when ``None``), reshuffled each epoch;
    ``batch_size >= N`` gives the whole data set as one batch.

    Example:
        >>> batches = shuffled_batches(torch.arange(5.0), torch.arange(5.0), 2, True, seed=0)
        >>> [len(xb) for xb, _ in batches()]
        [2, 2, 1]
    """
    n = X.shape[0]
    generator = torch.Generator(device="cpu")
    generator.manual_seed(distributed.shared_seed(seed))  # the same order on every rank
    sharded = distributed.active()

    def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if batch_size >= n and not sharded:
            yield X, y
            return
        order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
        order = distributed.shard(n, order).to(X.device)  # this rank's rows (all in one process)
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            yield X[idx], y[idx]

    batches.generator = generator  # type: ignore[attr-defined] # saved by a resumable run
    return batches


def permuted_batches(x: torch.Tensor, y: torch.Tensor, batch_size: int) -> Batches:
    """Minibatches in an order of ``torch.randperm`` from the *global* RNG, which the classic
    methods fork and seed around their loop (so dropout masks and order share one stream).

    Example:
        >>> batches = permuted_batches(torch.zeros(5, 1), torch.zeros(5), 4)
        >>> [len(xb) for xb, _ in batches()]
        [4, 1]
    """
    n = len(x)
    # under torch.distributed: one order for every rank, from a generator of its own
    shared = (
        torch.Generator(device="cpu").manual_seed(distributed.shared_seed(None))
        if distributed.active()
        else None
    )

    def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        perm = torch.randperm(n) if shared is None else torch.randperm(n, generator=shared)
        perm = distributed.shard(n, perm).to(x.device)
        for start in range(0, len(perm), batch_size):
            idx = perm[start : start + batch_size]
            yield x[idx], y[idx]

    return batches


def loader_batches(
    loader: DataLoader,
    inputs: Callable[[Any, str], torch.Tensor],
    targets: Callable[[Any, torch.Tensor, str], torch.Tensor],
) -> tuple[Batches, int, torch.Tensor, torch.Tensor]:
    """The batches of a ``DataLoader`` of ``(x, y)`` pairs, each checked by ``inputs(x, name)``
    and ``targets(y, x, name)``; also ``N`` (the dataset's length) and the first batch.

    Example:
        >>> from torch.utils.data import TensorDataset
        >>> loader = DataLoader(TensorDataset(torch.zeros(6, 2), torch.ones(6)), batch_size=4)
        >>> batches, n, x0, y0 = loader_batches(loader, lambda x, _: x, lambda y, x, _: y)
        >>> n, x0.shape, [len(xb) for xb, _ in batches()]
        (6, torch.Size([4, 2]), [4, 2])
    """
    try:
        n = len(loader.dataset)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError("the DataLoader's dataset must have a length (N)") from None
    first = next(iter(loader))
    if not (isinstance(first, (tuple, list)) and len(first) == 2):
        raise ValueError("the DataLoader must yield (x, y) pairs")
    first_x = inputs(first[0], "x batch")
    first_y = targets(first[1], first_x, "y batch")

    epoch = [0]

    def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if hasattr(loader.sampler, "set_epoch"):  # a DistributedSampler: reshuffled per epoch
            loader.sampler.set_epoch(epoch[0])
        epoch[0] += 1
        for xb, yb in loader:
            xb = inputs(xb, "x batch")
            yield xb, targets(yb, xb, "y batch")

    batches.generator = loader.generator  # type: ignore[attr-defined] # saved on resume
    return batches, n, first_x, first_y


def validation_pair(
    data: Any,
    check_x: Callable[[Any, str], torch.Tensor],
    check_y: Callable[[Any, torch.Tensor], torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    """``fit``'s ``validation_data`` checked: a pair ``(x_val, y_val)``, ``x_val`` through
    ``check_x(x_val, "x_val")`` (``(N, ...)``), ``y_val`` through ``check_y(y_val, x_val)``.

    Example:
        >>> xv, yv = validation_pair((torch.zeros(3, 2), torch.ones(3)), lambda x, n: x,
        ...                          lambda y, x: y.unsqueeze(-1))
        >>> xv.shape, yv.shape
        (torch.Size([3, 2]), torch.Size([3, 1]))
        >>> validation_pair([1, 2, 3], None, None)
        Traceback (most recent call last):
          ...
        ValueError: validation_data must be a pair (x_val, y_val)
    """
    if not (isinstance(data, (tuple, list)) and len(data) == 2):
        raise ValueError("validation_data must be a pair (x_val, y_val)")
    x_val = check_x(data[0], "x_val")
    return x_val, check_y(data[1], x_val)


def validation_nll(model: Any, data: Any) -> Callable[[], float]:
    """``fit``'s ``validation_data=(X_val, y_val)`` as a score for the loop: the mean negative
    log predictive density per point (20 draws, seed 0) of ``model``, an SVI-trained BNN whose
    ``prepare_inputs``/``prepare_targets`` check the pair first (:func:`validation_pair`).

    Example:
        >>> validation_nll(None, [1, 2, 3])
        Traceback (most recent call last):
          ...
        ValueError: validation_data must be a pair (x_val, y_val)
    """
    x_val, y_val = validation_pair(
        data,
        lambda x, name: model.prepare_inputs(x, name),
        lambda y, x: model.prepare_targets(y, x, "y_val"),
    )
    return lambda: -model.log_predictive_density(x_val, y_val, num_samples=20, seed=0)


def gather_loader(
    loader: DataLoader, y: Any, check_x: Callable[[Any, str], torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``(x, y)`` batches of ``loader`` concatenated: ``(N, ...)`` and ``(N, ...)``, each
    ``x`` passed through ``check_x(x, name)`` and each ``y`` checked to be a tensor. ``y`` is the
    caller's own ``y`` argument, which must be ``None`` beside a loader.

    Example:
        >>> from torch.utils.data import TensorDataset
        >>> loader = DataLoader(TensorDataset(torch.zeros(5, 2), torch.ones(5)), batch_size=2)
        >>> [t.shape for t in gather_loader(loader, None, lambda x, name: x)]
        [torch.Size([5, 2]), torch.Size([5])]
    """
    if y is not None:
        raise TypeError("y must be None when x is a DataLoader (it yields (x, y))")
    xs, ys = [], []
    for i, batch in enumerate(loader):
        if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
            raise ValueError(f"the DataLoader must yield (x, y) pairs, got {type(batch).__name__}")
        xs.append(check_x(batch[0], f"x of batch {i}"))
        if not isinstance(batch[1], torch.Tensor):
            raise TypeError(f"y of batch {i} must be a torch.Tensor, got {type(batch[1]).__name__}")
        ys.append(batch[1])
    if not xs:
        raise ValueError("the DataLoader yielded no batch")
    return torch.cat(xs), torch.cat(ys)
