"""Rows of a large data set, a bounded piece at a time: which rows a fixed-cost look reads
(:func:`spread_rows`), and one output filled piece by piece (:func:`fill_rows`).

The learned noise's start (:func:`bnn_pyro.likelihoods.noise_init.residual_scale`) and the
in-sample check after a fit (:func:`bnn_pyro.training.in_sample.check_in_sample_fit`) each need
a fixed-cost look at the training rows; both take :func:`spread_rows`. The nets run on sample
stacks (:mod:`bnn_pyro.nn.batched`, the VI posterior's and ``HiddenLayer``'s predictive) take
their rows in chunks through :func:`fill_rows`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["fill_rows", "spread_rows"]


def spread_rows(n: int, limit: int, device: torch.device | str) -> torch.Tensor | None:
    """The indices ``(limit,)`` of ``limit`` rows evenly spaced over ``0 .. n - 1`` (first and
    last included), on ``device``; ``None`` when ``n <= limit`` (every row, in order).

    The positions are computed on the CPU and rounded, then moved, so every device reads the
    same rows: in float32 while it holds every row index exactly (``n - 1 < 2**24``, the rows
    every figure so far was made with), in float64 beyond, where float32 would round the last
    position past the last row.

    Example:
        >>> spread_rows(10, 4, "cpu").tolist(), spread_rows(3, 4, "cpu")
        ([0, 3, 6, 9], None)
        >>> n = 2**24 + 4; spread_rows(n, 3, "cpu").tolist()[-1] == n - 1
        True
    """
    if n <= limit:
        return None
    dtype = torch.float32 if n - 1 < 2**24 else torch.float64
    return torch.linspace(0, n - 1, limit, dtype=dtype, device="cpu").round().long().to(device)


def fill_rows(
    fn: Callable[[int, int], torch.Tensor], num_rows: int, rows: int, dim: int = 1
) -> torch.Tensor:
    """``torch.cat([fn(i, i + rows) for i in ...], dim)`` without the list: each piece is
    written into one output allocated once, then freed.

    Keeping hundreds of small pieces alive between large transient activations fragments the
    allocator's heap: its peak then grows by about one activation per piece.

    Args:
        fn: ``fn(start, stop)``, the piece for rows ``start:stop`` (along ``dim``).
        num_rows: the total number of rows.
        rows: rows per piece.
        dim: the dimension of the rows in the pieces.

    Returns:
        The pieces joined along ``dim``.

    Example:
        >>> x = torch.arange(10.0).reshape(2, 5)
        >>> bool(torch.equal(fill_rows(lambda a, b: x[:, a:b] * 2, 5, 2), x * 2))
        True
    """
    if rows >= num_rows:
        return fn(0, num_rows)
    out = None
    for start in range(0, num_rows, rows):
        stop = min(start + rows, num_rows)
        piece = fn(start, stop)
        if out is None:
            shape = list(piece.shape)
            shape[dim] = num_rows
            out = piece.new_empty(shape)
        out.narrow(dim, start, stop - start).copy_(piece)
        del piece
    return out
