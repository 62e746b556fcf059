"""``fit(compile=True)``: a step's loss compiled by ``torch.compile``, forward and backward, with
its random draws (weight noise, dropout masks) made by torch's generator in the eager order.

Inductor's own random numbers are a different stream from eager torch's; ``fallback_random``
keeps the eager operators for them, so a compiled fit draws what the eager fit draws under one
seed and follows it to float rounding (the eager fit stays the reference). ``dynamic=False``:
one static graph per batch shape (a last, smaller batch is a second graph), compiled on its
first call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch

__all__ = ["compile_loss"]

F = TypeVar("F", bound=Callable[..., Any])


def compile_loss(fn: F) -> F:
    """``fn`` compiled by ``torch.compile`` as ``fit(compile=True)`` compiles its loss.

    Args:
        fn: a loss of tensors (``(xb, yb) -> scalar`` or a method's own).

    Returns:
        The compiled callable: the first call of each batch shape compiles (seconds), later
        calls run the graph.

    Example:
        >>> loss = compile_loss(lambda x: (x * x).sum())
        >>> float(loss(torch.ones(3)))  # compiles here
        3.0
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    return torch.compile(fn, dynamic=False, options={"fallback_random": True})
