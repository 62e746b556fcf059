"""Functional-call helpers: flat parameter vectors and a net run once per stacked parameter set."""

from __future__ import annotations

import warnings

import torch
import torch.nn as nn
from torch.func import functional_call, vmap


def flatten(tensors: dict[str, torch.Tensor], batch_dims: int = 0) -> torch.Tensor:
    """Concatenate ``{name: (*batch, *shape)}`` into ``(*batch, D)`` in dict order."""
    return torch.cat(
        [t.reshape(*t.shape[:batch_dims], -1) for t in tensors.values()], dim=batch_dims
    )


def unflatten(flat: torch.Tensor, shapes: dict[str, torch.Size]) -> dict[str, torch.Tensor]:
    """Split ``(*batch, D)`` into ``{name: (*batch, *shape)}`` (views, dict order)."""
    batch = flat.shape[:-1]
    out, start = {}, 0
    for name, shape in shapes.items():
        size = shape.numel()
        out[name] = flat[..., start : start + size].reshape(*batch, *shape)
        start += size
    if start != flat.shape[-1]:
        raise ValueError(f"flat must have {start} entries in its last dim, got {flat.shape[-1]}")
    return out


def batched_call(
    model: nn.Module, stacked: dict[str, torch.Tensor], x: torch.Tensor
) -> torch.Tensor:
    """Run ``model(x)`` once per leading index of the stacked tensors: ``(S, N, ...)``.

    ``stacked`` maps parameter (or buffer) names to ``(S, *shape)`` tensors; tensors not named
    keep the module's own values. The S calls run at once under ``torch.func.vmap``. If the net
    cannot be vmapped (an in-place update of an unbatched buffer, such as BatchNorm in train
    mode, or data-dependent Python control flow), a :class:`RuntimeWarning` says why and the S
    calls run in a Python loop instead, with the same results.

    Args:
        model: the net, in the mode the caller wants (usually eval).
        stacked: ``{name: (S, *shape)}``.
        x: ``(N, ...)`` inputs shared by all S calls.

    Returns:
        ``(S, N, ...)`` outputs.
    """

    def call(params: dict[str, torch.Tensor], inputs: torch.Tensor) -> torch.Tensor:
        return functional_call(model, params, (inputs,))

    try:
        return vmap(call, in_dims=(0, None))(stacked, x)
    except RuntimeError as err:
        warnings.warn(
            f"{type(model).__name__} could not be vmapped over parameter samples ({err}); "
            "falling back to a loop over samples",
            RuntimeWarning,
            stacklevel=3,
        )
    num = next(iter(stacked.values())).shape[0]
    return torch.stack([call({k: v[s] for k, v in stacked.items()}, x) for s in range(num)])
