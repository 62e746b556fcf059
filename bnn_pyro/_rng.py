"""Seeded blocks that leave the caller's random stream untouched."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["seeded", "seed_from", "global_rng_state", "order_generators", "noise_generators"]


@contextlib.contextmanager
def seeded(seed: int | None, device: torch.device) -> Iterator[None]:
    """Run the block on a forked global RNG seeded with ``seed`` (no-op for ``None``).

    The caller's RNG state (CPU, and ``device`` if it is a CUDA device) is restored afterwards,
    so a seeded ``fit``/``predict`` neither depends on nor changes the global random stream.

    Example:
        >>> _ = torch.manual_seed(1); a = torch.rand(1)
        >>> _ = torch.manual_seed(1)
        >>> with seeded(0, torch.device("cpu")):
        ...     _ = torch.rand(5)
        >>> bool(torch.equal(torch.rand(1), a))
        True
    """
    if seed is None:
        yield
        return
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def seed_from(generator: torch.Generator | None) -> int | None:
    """Draw a seed for :func:`seeded` from ``generator`` (``None`` stays ``None``).

    Example:
        >>> a, b = (seed_from(torch.Generator().manual_seed(0)) for _ in range(2))
        >>> a == b
        True
    """
    if generator is None:
        return None
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    return int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device))


def global_rng_state(device: torch.device) -> torch.Tensor:
    """The state of the global generator that draws ``device``'s tensors: the CPU's, or the
    CUDA device's (a ``torch.Generator(device=device)`` takes it with ``set_state``).

    Example:
        >>> g = torch.Generator(device="cpu")
        >>> _ = g.set_state(global_rng_state(torch.device("cpu")))
        >>> bool(torch.equal(torch.rand(2, generator=g), torch.rand(2)))
        True
    """
    if device.type == "cuda":
        return torch.cuda.get_rng_state(device)
    return torch.get_rng_state()


def order_generators(seeds: list[int]) -> list[torch.Generator]:
    """One CPU generator per run, seeded with its seed: what draws each run's minibatch order.

    The order is drawn on the CPU whatever the model's device (a seeded ``fit`` draws it from the
    CPU's global generator), so a run's rows come in the same order on every device; the
    indices are then moved to the data. The runs' noise comes from :func:`noise_generators`.

    Example:
        >>> a, b = order_generators([0, 0])
        >>> bool(torch.equal(torch.randperm(5, generator=a), torch.randperm(5, generator=b)))
        True
    """
    return [torch.Generator(device="cpu").manual_seed(int(s)) for s in seeds]


def noise_generators(
    order: list[torch.Generator], seeds: list[int], device: torch.device
) -> list[torch.Generator]:
    """The generators that draw each run's noise (dropout masks) on ``device``, beside
    ``order``, the CPU generators of the runs' minibatch orders.

    A seeded run draws its minibatch order from the CPU's global generator and its noise from
    its device's: on the CPU that is one stream (so ``order`` itself is returned), on a GPU a
    second one, which ``torch.manual_seed(seed)`` seeds too (so a generator of ``device`` seeded
    with each run's seed is returned). Stacked runs then draw what their one-by-one runs draw.

    Args:
        order: ``K`` CPU generators, run ``k``'s seeded with ``seeds[k]``.
        seeds: the ``K`` runs' seeds.
        device: where the runs' tensors live.

    Returns:
        ``K`` generators on ``device``.

    Example:
        >>> order = [torch.Generator().manual_seed(s) for s in (0, 1)]
        >>> noise_generators(order, [0, 1], torch.device("cpu")) == order
        True
    """
    if len(order) != len(seeds):
        raise ValueError(f"one seed per generator: {len(order)} generators, {len(seeds)} seeds")
    if device.type == "cpu":
        return list(order)
    return [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]
