"""Which rows of a large data set a bounded computation reads: at most ``limit``, evenly spaced.

The learned noise's start (:func:`bnn_pyro.likelihoods.noise_init.residual_scale`) and the
in-sample check after a fit (:func:`bnn_pyro.training.in_sample.check_in_sample_fit`) each need
a fixed-cost look at the training rows; both take these.
"""

from __future__ import annotations

import torch

__all__ = ["spread_rows"]


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
