"""Argument checks shared across the package: clear errors before any work starts."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

__all__ = ["as_tensor", "check_int", "check_float", "check_finite"]


def check_int(name: str, value: Any, minimum: int = 1) -> int:
    """Return ``value`` if it is an int ``>= minimum``, else raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_float(
    name: str, value: Any, *, minimum: float = -math.inf, strict: bool = False
) -> float:
    """Return ``float(value)`` if finite and above ``minimum`` (``>`` when ``strict``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(f"{name} must be a float, got {type(value).__name__} ({value!r})")
    value = float(value)
    bad = value <= minimum if strict else value < minimum
    if bad or not math.isfinite(value):
        relation = ">" if strict else ">="
        raise ValueError(f"{name} must be finite and {relation} {minimum}, got {value}")
    return value


def check_finite(name: str, tensor: torch.Tensor) -> torch.Tensor:
    """Raise ``ValueError`` naming ``name`` if ``tensor`` holds NaN or inf."""
    if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
        bad = int((~torch.isfinite(tensor)).sum())
        raise ValueError(f"{name} contains {bad} NaN or infinite value(s)")
    return tensor


def as_tensor(
    name: str,
    value: Any,
    *,
    dtype: torch.dtype | None = None,
    device: torch.device | None = None,
    min_dim: int = 1,
) -> torch.Tensor:
    """Convert an array-like to a finite tensor (floating inputs cast to ``dtype``).

    Args:
        name: the argument's name, used in error messages.
        value: a tensor, numpy array or nested list.
        dtype: cast to this dtype (after the finiteness check); ``None`` keeps the dtype.
        device: target device.
        min_dim: the fewest dimensions accepted (``2`` for a design matrix ``(N, D)``).
    """
    if isinstance(value, torch.Tensor):
        tensor = value.detach()
    elif isinstance(value, (np.ndarray, list, tuple)) or np.isscalar(value):
        array = np.asarray(value)
        if array.dtype == object or not (
            np.issubdtype(array.dtype, np.number) or array.dtype == bool
        ):
            raise TypeError(f"{name} must be numeric, got an array of dtype {array.dtype}")
        tensor = torch.as_tensor(array)
    else:
        raise TypeError(f"{name} must be a torch.Tensor or numpy array, got {type(value).__name__}")
    if tensor.dim() < min_dim:
        hint = (
            " (for one feature use x.reshape(-1, 1))" if min_dim == 2 and tensor.dim() == 1 else ""
        )
        raise ValueError(
            f"{name} must have at least {min_dim} dimension(s), got shape "
            f"{tuple(tensor.shape)}{hint}"
        )
    check_finite(name, tensor)
    if dtype is not None:
        tensor = tensor.to(dtype)
    return tensor.to(device) if device is not None else tensor
