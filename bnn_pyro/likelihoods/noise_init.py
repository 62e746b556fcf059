"""The initial value of a learned Gaussian noise scale, read from the training data.

A constant start (the scale prior's median, 1) is right only for standardised targets, and even
there it says "the net explains nothing": the likelihood term then weighs little against the
KL at the start of training, which pushes mean-field VI toward its under-fitting optimum (the
posterior collapses onto the prior while a large noise explains the data).

The rule: the residual standard deviation of an ordinary least-squares fit of ``y`` on the
flattened inputs (with an intercept), with the unbiased ``N - D - 1`` denominator — the noise a
*linear* model leaves. A net can do at least as well, so it is an upper bound that is usually
far below ``std(y)`` (see ``tests/likelihoods/test_noise_init.py`` for how it is checked). With
too few rows for a linear fit (``N <= D + 1``) it is ``std(y)``. Floored at ``1e-3 std(y)`` (a
perfectly linear target must not start the scale at 0, where its log is -inf).
Measured: ``benchmarks/results/library_measurements.md``, section 'Noise-scale start'.
"""

from __future__ import annotations

import torch

from bnn_pyro._rows import spread_rows

__all__ = ["MAX_ROWS", "residual_scale"]

#: At most this many rows (evenly spaced) enter the least-squares fit: the estimate of one
#: variance per output needs few rows, and its cost stays bounded for large data sets.
MAX_ROWS = 10_000


def residual_scale(X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The residual std of a least-squares linear fit, per output column.

    Args:
        X: ``(N, *features)`` inputs (flattened to ``(N, D)``).
        y: ``(N, O)`` targets.

    Returns:
        ``(O,)`` positive scales, on ``y``'s device and dtype.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> X = torch.randn(500, 2, generator=g)
        >>> y = X @ torch.tensor([1.0, -2.0]) + 0.3 * torch.randn(500, generator=g)
        >>> s = residual_scale(X, y.unsqueeze(-1))
        >>> bool(abs(s.item() - 0.3) < 0.03)  # the noise std, not std(y) = 2.26
        True
    """
    if X.shape[0] != y.shape[0] or y.dim() != 2:
        raise ValueError(
            f"X (N, ...) and y (N, O) must have the same rows, got {tuple(X.shape)} and "
            f"{tuple(y.shape)}"
        )
    with torch.no_grad():  # (a with-block, not a decorator: mutation testing reaches it)
        n = X.shape[0]
        rows = spread_rows(n, MAX_ROWS, X.device)
        x = (X if rows is None else X[rows]).reshape(min(n, MAX_ROWS), -1).double()
        t = (y if rows is None else y[rows.to(y.device)]).double()
        m, d = x.shape
        spread = t.std(dim=0) if m > 1 else torch.ones(t.shape[1], dtype=t.dtype, device=t.device)
        if m > d + 1:
            design = torch.cat([x, torch.ones(m, 1, dtype=x.dtype, device=x.device)], dim=1)
            # gelsd (SVD): the CPU default, gelsy, pivots from a workspace torch leaves
            # uninitialised, so its last bits depended on what the heap held before the call
            coef = torch.linalg.lstsq(design.cpu(), t.cpu(), driver="gelsd").solution.to(t.device)
            scale = ((t - design @ coef) ** 2).sum(0).div(m - d - 1).sqrt()
        else:
            scale = spread
        floor = torch.clamp(1e-3 * spread, min=1e-6)
        return torch.maximum(scale, floor).to(y.dtype)
