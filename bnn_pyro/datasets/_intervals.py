"""Draws uniform over a union of intervals: the inputs of the 1-D toy problems."""

from __future__ import annotations

import torch

from bnn_pyro._checks import check_int

__all__ = ["uniform_on_intervals"]


def uniform_on_intervals(
    support: tuple[tuple[float, float], ...], n: int, generator: torch.Generator
) -> torch.Tensor:
    """``n`` draws ``(n, 1)`` float64, uniform over the union of the increasing, disjoint
    intervals ``support`` (one uniform on their total length, mapped piece by piece).

    Example:
        >>> x = uniform_on_intervals(((-3.0, -1.0), (1.0, 3.0)), 500, torch.Generator())
        >>> x.shape, bool((x.abs() >= 1).all() and (x.abs() <= 3).all())
        (torch.Size([500, 1]), True)
    """
    check_int("n", n, minimum=1)
    lengths = [hi - lo for lo, hi in support]
    if not support or any(length <= 0 for length in lengths):
        raise ValueError(f"support must hold intervals (low, high) with low < high, got {support}")
    u = torch.rand(n, 1, generator=generator, dtype=torch.float64) * sum(lengths)
    x = torch.full_like(u, support[-1][1])  # u at the very end (rand < 1: never, but defined)
    start = 0.0
    for (lo, _hi), length in zip(support, lengths, strict=True):
        inside = (u >= start) & (u < start + length)
        x = torch.where(inside, lo + (u - start), x)
        start += length
    return x
