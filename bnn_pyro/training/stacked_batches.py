"""The members' minibatches of a stacked fit (:mod:`bnn_pyro.training.stacked`): each
member's rows in the order its own run would draw them, from a generator of its own, in
``(K, B, ...)`` blocks; and each member's part of data given to all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from bnn_pyro._checks import check_int

__all__ = ["check_member_sets", "member_data", "shuffled_member_batches", "stacked_batches"]


def stacked_batches(
    x: torch.Tensor,
    y: torch.Tensor,
    batch_size: int,
    generators: list[torch.Generator],
    per_member: bool = False,
    noise: list[torch.Generator] | None = None,
    shuffle: bool = True,
) -> Callable[[], Iterator[tuple[torch.Tensor, torch.Tensor]]]:
    """Per epoch, member ``k``'s rows in the order ``torch.randperm(N, generator=generators[k])``
    (what its one-by-one run draws), in ``(K, B, ...)`` blocks of ``batch_size`` rows.

    ``x (N, ...)``, ``y (N, ...)`` are shared by the members; with ``per_member``, ``x (K, N,
    ...)`` and ``y (K, N, ...)`` hold each member's own rows. ``noise``: the members' noise
    generators where they are not ``generators`` themselves (on a GPU, see
    :func:`bnn_pyro._rng.noise_generators`), saved and restored with them by a resumable run.
    ``shuffle=False``: every epoch the rows in their order (as a ``fit(shuffle=False)``).

    Example:
        >>> gens = [torch.Generator().manual_seed(s) for s in (0, 1)]
        >>> batches = stacked_batches(torch.arange(5.0), torch.arange(5.0), 2, gens)
        >>> [tuple(xb.shape) for xb, _ in batches()]
        [(2, 2), (2, 2), (2, 1)]
    """
    n = x.shape[1] if per_member else x.shape[0]
    member = torch.arange(len(generators), device=x.device).unsqueeze(-1)

    def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if shuffle:
            order = torch.stack([torch.randperm(n, generator=g) for g in generators])
        else:  # every member's rows in their order, nothing drawn
            order = torch.arange(n).expand(len(generators), n)
        order = order.to(x.device)
        for start in range(0, n, batch_size):
            idx = order[:, start : start + batch_size]
            if per_member:
                yield x[member, idx], y[member, idx]
            else:
                yield x[idx], y[idx]

    kept = list(generators) + [g for g in noise or [] if all(g is not o for o in generators)]
    batches.generator = _Generators(kept)  # type: ignore[attr-defined] # for resume
    return batches


def shuffled_member_batches(
    x: torch.Tensor,
    y: torch.Tensor,
    batch_size: int,
    generators: list[torch.Generator],
    noise: list[torch.Generator] | None = None,
    shuffle: bool = True,
) -> Callable[[], Iterable[tuple[torch.Tensor, torch.Tensor]]]:
    """What :func:`~bnn_pyro.training.batches.shuffled_batches` gives each member, stacked:
    member ``k``'s own rows ``x (K, N, ...)``, ``y (K, N, ...)`` in the order its generator
    draws (:func:`stacked_batches`; ``noise`` and ``shuffle`` as there), or, as there, the whole
    data set as one unshuffled batch when ``batch_size >= N``.

    Raises:
        ValueError: ``batch_size`` < 1, or not one generator per member.

    Example:
        >>> gens = [torch.Generator().manual_seed(s) for s in (0, 1)]
        >>> x = torch.arange(10.0).view(2, 5)
        >>> [tuple(xb.shape) for xb, _ in shuffled_member_batches(x, x, 2, gens)()]
        [(2, 2), (2, 2), (2, 1)]
        >>> [xb is x for xb, _ in shuffled_member_batches(x, x, 5, gens)()]
        [True]
    """
    check_int("batch_size", batch_size)
    if len(generators) != x.shape[0]:
        raise ValueError(f"one generator per member: {len(generators)} for {x.shape[0]} members")
    if batch_size < x.shape[1]:
        return stacked_batches(x, y, batch_size, generators, True, noise, shuffle)

    def whole() -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
        return [(x, y)]

    whole.generator = _Generators(list(noise or []))  # type: ignore[attr-defined] # for resume
    return whole


def check_member_sets(
    x: torch.Tensor, y: torch.Tensor, count: int, names: tuple[str, str] = ("X", "y")
) -> bool:
    """Whether ``x`` holds one set per member (three dimensions, ``(K, N, D)``, as
    ``fit_stacked`` reads it), checked to hold ``count`` of them, and ``y`` as many.

    Raises:
        ValueError: ``count`` members and another number of sets in ``x`` or ``y`` (``names``).

    Example:
        >>> check_member_sets(torch.zeros(2, 5, 3), torch.zeros(2, 5), 2)
        True
        >>> check_member_sets(torch.zeros(5, 3), torch.zeros(5), 2)
        False
        >>> check_member_sets(torch.zeros(3, 5, 3), torch.zeros(3, 5), 2)
        Traceback (most recent call last):
          ...
        ValueError: X holds 3 sets (K, N, D) for 2 models: pass one set per model, or one (N, D) set for all
        >>> check_member_sets(torch.zeros(2, 5, 3), torch.zeros(3, 5), 2)
        Traceback (most recent call last):
          ...
        ValueError: y holds 3 sets for the 2 sets of X: one set of targets per model
    """  # noqa: E501
    if x.dim() != 3:
        return False
    if x.shape[0] != count:
        raise ValueError(
            f"{names[0]} holds {x.shape[0]} sets (K, N, D) for {count} models: pass one set per "
            "model, or one (N, D) set for all"
        )
    sets = y.shape[0] if y.dim() > 0 else 0
    if sets != count:
        raise ValueError(
            f"{names[1]} holds {sets} sets for the {count} sets of {names[0]}: one set of "
            "targets per model"
        )
    return True


def member_data(data: Any, k: int, count: int) -> Any:
    """Member ``k``'s part of a stacked fit's ``(x, y)`` pair (validation data): its own slice
    where ``x`` has three dimensions ``(K, N, D)`` (one set per member, as ``fit_stacked``
    reads ``X``; checked to hold ``count``), else the pair itself, shared by the members
    (``None`` stays ``None``).

    Example:
        >>> x, y = torch.zeros(2, 5, 3), torch.ones(2, 5)
        >>> [t.shape for t in member_data((x, y), 1, 2)]
        [torch.Size([5, 3]), torch.Size([5])]
        >>> member_data((x[0], y[0]), 1, 2)[0].shape
        torch.Size([5, 3])
    """
    if data is None or not isinstance(data, tuple | list) or len(data) != 2:
        return data  # (the fit's own check of validation_data names what is wrong)
    x, y = (torch.as_tensor(t) for t in data)
    if not check_member_sets(x, y, count, ("x_val", "y_val")):
        return data
    return data[0][k], data[1][k]


class _Generators:
    """Generators saved and restored as one (what a resumable run does with its batches'): their
    states end to end (a CPU generator's state and a GPU's differ in length)."""

    def __init__(self, generators: list[torch.Generator]) -> None:
        self.generators = generators

    def get_state(self) -> torch.Tensor:
        return torch.cat([g.get_state() for g in self.generators])

    def set_state(self, state: torch.Tensor) -> None:
        sizes = [g.get_state().numel() for g in self.generators]
        if state.numel() != sum(sizes):
            raise ValueError(f"a state of {state.numel()} bytes for generators of {sizes}")
        for g, s in zip(self.generators, state.split(sizes), strict=True):
            g.set_state(s.clone())
