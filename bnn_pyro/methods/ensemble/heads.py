"""The Gaussian head of a deep ensemble's member: a mean and a variance from one output."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from bnn_pyro.methods.classic.training import module_device
from bnn_pyro.training.in_sample import check_in_sample_fit

__all__ = ["VAR_FLOOR", "check_heads_in_sample", "split_heads"]

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


def check_heads_in_sample(
    members: Sequence[torch.nn.Module], x: torch.Tensor, yt: torch.Tensor
) -> None:
    """Each trained member's mean head held against its training rows: a member whose variance
    head grew over rows its mean left behind is named by a warning
    (:func:`bnn_pyro.training.in_sample.check_in_sample_fit`).

    Args:
        members: the ensemble's members, each ``(N, D) -> (N, 2 O)``.
        x: ``(N, D)`` training inputs; yt: ``(N, O)`` training targets.

    Example:
        >>> import warnings
        >>> x = torch.linspace(-1, 1, 8)[:, None]
        >>> with warnings.catch_warnings(record=True) as caught:  # an untrained member
        ...     warnings.simplefilter("always")
        ...     check_heads_in_sample([torch.nn.Linear(1, 2)], x, 100 + x)
        >>> str(caught[0].message).startswith("member 0 of the ensemble predicts")
        True
    """
    for i, member in enumerate(members):
        device = module_device(member)
        check_in_sample_fit(
            lambda rows, m=member, d=device: split_heads(m(rows.to(d)))[0].to(yt.device),
            x,
            yt,
            what=f"member {i} of the ensemble",
        )
