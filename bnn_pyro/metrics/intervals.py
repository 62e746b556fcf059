"""Prediction intervals scored: coverage (PICP), mean width, and the interval (Winkler) score.

For a central interval ``[l, u]`` of nominal level ``1 - alpha`` and an outcome ``y``:

* coverage, the *prediction interval coverage probability*: the share of ``y`` in ``[l, u]``;
* mean width: the mean of ``u - l``;
* the interval score (Winkler 1972; Gneiting & Raftery 2007, eq. 43):
  ``(u - l) + (2 / alpha) (l - y) 1{y < l} + (2 / alpha) (y - u) 1{y > u}``, averaged over
  points; lower is better, and it is a proper score: in expectation it is lowest for the true
  ``alpha/2`` and ``1 - alpha/2`` quantiles.

Every function takes ``lower``, ``upper`` and ``y`` of one shape (``(N,)`` or ``(N, O)``) and
pools points and outputs.
"""

from __future__ import annotations

import torch

from bnn_pyro._checks import as_tensor, check_float

__all__ = ["interval_score", "mean_interval_width", "picp"]


def _checked(
    lower: object, upper: object, y: object | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    lo = as_tensor("lower", lower, dtype=torch.float64)
    hi = as_tensor("upper", upper, dtype=torch.float64)
    if lo.shape != hi.shape:
        raise ValueError(f"lower and upper must have one shape, got {tuple(lo.shape)} and "
                         f"{tuple(hi.shape)}")  # fmt: skip
    if bool((hi < lo).any()):
        raise ValueError("upper must be >= lower everywhere (an interval [lower, upper])")
    if y is None:
        return lo, hi, None
    yt = as_tensor("y", y, dtype=torch.float64)
    if yt.shape != lo.shape:
        raise ValueError(f"y must have the intervals' shape {tuple(lo.shape)}, got "
                         f"{tuple(yt.shape)}")  # fmt: skip
    return lo, hi, yt


def picp(lower: torch.Tensor, upper: torch.Tensor, y: torch.Tensor) -> float:
    """The share of ``y`` inside ``[lower, upper]`` (ends included).

    Args:
        lower, upper, y: ``(N,)`` or ``(N, O)``, one shape; tensors, arrays or lists.

    Returns:
        A float in ``[0, 1]``.

    Example:
        >>> picp(torch.tensor([0.0, 0.0, 0.0]), torch.tensor([1.0, 1.0, 1.0]),
        ...      torch.tensor([0.5, 1.0, 2.0]))
        0.6666666666666666
    """
    lo, hi, yt = _checked(lower, upper, y)
    return float(((yt >= lo) & (yt <= hi)).double().mean())


def mean_interval_width(lower: torch.Tensor, upper: torch.Tensor) -> float:
    """The mean of ``upper - lower``.

    Example:
        >>> mean_interval_width(torch.tensor([0.0, 1.0]), torch.tensor([2.0, 2.0]))
        1.5
    """
    lo, hi, _ = _checked(lower, upper)
    return float((hi - lo).mean())


def interval_score(
    lower: torch.Tensor, upper: torch.Tensor, y: torch.Tensor, alpha: float
) -> float:
    """The mean interval (Winkler) score of central ``1 - alpha`` intervals; lower is better.

    Args:
        lower, upper, y: ``(N,)`` or ``(N, O)``, one shape.
        alpha: the intervals' miss rate, in ``(0, 1)`` (``0.1`` for 90% intervals).

    Returns:
        ``mean((u - l) + 2/alpha (l - y)⁺ + 2/alpha (y - u)⁺)``.

    Example:
        >>> # widths 2 and 2; the second misses by 1 above: 2 + (2 / 0.1) * 1 = 22
        >>> interval_score(torch.tensor([-1.0, -1.0]), torch.tensor([1.0, 1.0]),
        ...                torch.tensor([0.0, 2.0]), alpha=0.1)
        12.0
    """
    alpha = check_float("alpha", alpha, minimum=0.0, strict=True, maximum=1.0)
    lo, hi, yt = _checked(lower, upper, y)
    below = (lo - yt).clamp_min(0)
    above = (yt - hi).clamp_min(0)
    return float((hi - lo + (2.0 / alpha) * (below + above)).mean())
