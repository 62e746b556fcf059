"""The Gaussian head of a deep ensemble's member: a mean and a variance from one output."""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["VAR_FLOOR", "split_heads"]

#: The least variance of a member's Gaussian head (and the Gaussian NLL's ``eps``).
VAR_FLOOR = 1e-6


def split_heads(out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A Gaussian-NLL member's output ``(..., 2O)`` as its mean ``(..., O)`` and variance
    ``softplus(raw) + VAR_FLOOR`` ``(..., O)``.

    Example:
        >>> mean, var = split_heads(torch.tensor([[1.0, 0.0]]))
        >>> float(mean), round(float(var), 4)  # softplus(0) = log 2
        (1.0, 0.6931)
    """
    o = out.shape[-1] // 2
    return out[..., :o], F.softplus(out[..., o:]) + VAR_FLOOR
