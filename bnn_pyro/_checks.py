"""Argument checks shared across the package: clear errors before any work starts."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # torch is imported where a check needs it: the CLI checks its options first
    import torch

__all__ = [
    "as_tensor",
    "check_bool",
    "check_choice",
    "check_finite",
    "check_float",
    "check_instance",
    "check_int",
    "check_module",
    "check_seed",
    "check_tensor",
]

# Every check takes the argument's name first, then its value, and returns the value (as the
# plain Python type where one is checked) or raises TypeError/ValueError naming the argument,
# the expected and the received value.


def check_int(name: str, value: Any, minimum: int = 1) -> int:
    """Return ``value`` if it is an int (not a bool) ``>= minimum``, else raise naming ``name``.

    Example:
        >>> check_int("epochs", 3)
        3
        >>> check_int("epochs", 0)
        Traceback (most recent call last):
          ...
        ValueError: epochs must be an int >= 1, got 0
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value}")
    return int(value)


def check_float(
    name: str,
    value: Any,
    *,
    minimum: float = -math.inf,
    strict: bool = False,
    maximum: float = math.inf,
) -> float:
    """Return ``float(value)`` if it is a finite real ``>= minimum`` (``>`` when ``strict``) and
    ``< maximum``, else raise naming ``name``.

    Example:
        >>> check_float("lr", 0.01, minimum=0.0, strict=True)
        0.01
        >>> check_float("lr", 0, minimum=0.0, strict=True)
        Traceback (most recent call last):
          ...
        ValueError: lr must be a finite float > 0.0, got 0.0
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(f"{name} must be a float, got {type(value).__name__} ({value!r})")
    value = float(value)
    below = value <= minimum if strict else value < minimum
    if below or value >= maximum or not math.isfinite(value):
        if maximum < math.inf:
            bounds = f" in {'(' if strict else '['}{minimum}, {maximum})"
        elif minimum > -math.inf:
            bounds = f" {'>' if strict else '>='} {minimum}"
        else:
            bounds = ""
        raise ValueError(f"{name} must be a finite float{bounds}, got {value}")
    return value


def check_bool(name: str, value: Any) -> bool:
    """Return ``value`` if it is a bool, else raise ``TypeError`` naming ``name``.

    Example:
        >>> check_bool("progress", False)
        False
    """
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} ({value!r})")
    return bool(value)


def check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """Return ``value`` if it is one of ``choices``, else raise ``ValueError`` naming them.

    Example:
        >>> check_choice("hessian", "ggn", ("fisher", "ggn"))
        'ggn'
    """
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value


def check_seed(name: str, value: Any) -> int | None:
    """``None``, or an int ``>= 0``.

    Example:
        >>> check_seed("seed", None), check_seed("seed", 7)
        (None, 7)
    """
    return None if value is None else check_int(name, value, minimum=0)


def check_module(name: str, value: Any) -> torch.nn.Module:
    """Return ``value`` if it is a ``torch.nn.Module``, else raise ``TypeError``.

    Example:
        >>> import torch
        >>> check_module("net", torch.nn.Linear(1, 1)).out_features
        1
    """
    import torch

    return check_instance(name, value, torch.nn.Module, "a torch.nn.Module")


def check_instance(name: str, value: Any, cls: type | tuple[type, ...], what: str) -> Any:
    """Return ``value`` if it is an instance of ``cls``, else raise ``TypeError`` saying
    ``what`` is expected (e.g. ``"a bnn_pyro Likelihood (e.g. bp.Gaussian(), bp.Categorical())"``).

    Example:
        >>> import torch
        >>> check_instance("net", 3, torch.nn.Module, "a torch.nn.Module")
        Traceback (most recent call last):
          ...
        TypeError: net must be a torch.nn.Module, got int
    """
    if not isinstance(value, cls):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__}")
    return value


def check_tensor(name: str, value: Any, floating: bool = True) -> torch.Tensor:
    """Return ``value`` if it is a tensor (a floating one when ``floating``), else raise.

    Example:
        >>> import torch
        >>> check_tensor("x", torch.zeros(2)).shape
        torch.Size([2])
    """
    import torch

    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor, got {type(value).__name__}; convert with "
            "torch.as_tensor"
        )
    if floating and not value.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {value.dtype}")
    return value


def check_finite(name: str, tensor: torch.Tensor) -> torch.Tensor:
    """Raise ``ValueError`` naming ``name`` if ``tensor`` holds NaN or inf; return it.

    Example:
        >>> import torch
        >>> check_finite("y", torch.tensor([1.0, float("nan")]))
        Traceback (most recent call last):
          ...
        ValueError: y must be finite, got 1 NaN or infinite value(s)
    """
    import torch

    if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
        bad = int((~torch.isfinite(tensor)).sum())
        raise ValueError(f"{name} must be finite, got {bad} NaN or infinite value(s)")
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
    import torch

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


def check_device(name: str, value: Any) -> torch.device | None:
    """Return ``value`` as a ``torch.device`` if it names one this machine has (``None`` stays
    ``None``), else raise naming ``name``: ``TypeError`` for a non-device, ``ValueError`` for an
    unknown or unavailable one (``"cuda"`` without CUDA, ``"cuda:3"`` on a 1-GPU machine).

    Example:
        >>> check_device("device", "cpu")
        device(type='cpu')
        >>> check_device("device", "gpu")
        Traceback (most recent call last):
          ...
        ValueError: device must be a torch device such as 'cpu' or 'cuda', got 'gpu'
    """
    if value is None:
        return None
    import torch

    if isinstance(value, bool) or not isinstance(value, str | torch.device | int):
        raise TypeError(
            f"{name} must be a str, int or torch.device such as 'cpu' or 'cuda', got "
            f"{type(value).__name__} ({value!r})"
        )
    try:
        device = torch.device(value)
    except (RuntimeError, ValueError):
        if isinstance(value, int):
            raise ValueError(
                f"{name}={value!r} (an accelerator index) is not available on this machine; "
                "use 'cpu'"
            ) from None
        raise ValueError(
            f"{name} must be a torch device such as 'cpu' or 'cuda', got {value!r}"
        ) from None
    if device.type in ("cpu", "meta"):
        return device
    backend = getattr(torch, device.type, None)
    if device.type == "mps":
        backend = getattr(torch.backends, "mps", None)
    available = backend is not None and bool(getattr(backend, "is_available", lambda: False)())
    if not available:
        raise ValueError(f"{name}={str(value)!r} is not available on this machine; use 'cpu'")
    count = getattr(backend, "device_count", None)
    if device.index is not None and callable(count) and device.index >= count():
        raise ValueError(
            f"{name}={str(value)!r} does not exist: this machine has {count()} {device.type} "
            "device(s)"
        )
    return device
