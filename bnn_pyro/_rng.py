"""Seeded blocks that leave the caller's random stream untouched."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["seeded", "seed_from"]


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
    return int(torch.randint(0, 2**62, (1,), generator=generator))
