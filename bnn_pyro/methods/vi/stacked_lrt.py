"""Local reparameterization and flipout for K stacked models, each member's noise its own.

:func:`reparameterized_forward` runs a stacked twin net (:mod:`bnn_pyro.methods.vi.stacked`)
with its linear layers sampling pre-activations, as
:func:`bnn_pyro.poutine.estimators.local_reparam_linear` and ``flipout_linear`` do for one model,
except that member ``k``'s noise comes from ``generators[k]`` with the shapes and in the order
its own fit draws it from the global generator: so a stacked fit ends where the K fits end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn as nn

from bnn_pyro.nn.layers import LAYER_HOOKS, batched_linear
from bnn_pyro.poutine.estimators import preactivation_std

__all__ = ["reparameterized_forward"]


def _noise(
    shape: torch.Size, like: torch.Tensor, generators: Sequence[torch.Generator], signs: bool
) -> torch.Tensor:
    """``(K, *shape)``: standard normal draws, or random signs, one generator per member."""
    if signs:
        draws = [
            torch.randint(0, 2, shape, generator=g, dtype=like.dtype, device=like.device)
            for g in generators
        ]
        return torch.stack(draws).mul_(2).sub_(1)
    draws = [
        torch.randn(shape, generator=g, dtype=like.dtype, device=like.device) for g in generators
    ]
    return torch.stack(draws)


def reparameterized_forward(
    net: nn.Module,
    x: torch.Tensor,
    guide: dict[int, tuple[torch.Tensor, torch.Tensor]],
    estimator: str,
    generators: Sequence[torch.Generator],
) -> torch.Tensor:
    """``net(x)`` for ``x (K, B, in)`` with local reparameterization (``"local"``) or flipout.

    Args:
        net: the stacked twin, its weights set to the drawn ``(K, ...)`` values.
        x: ``(K, B, in)`` inputs, one block per member.
        guide: ``{id(drawn value): (loc (K, ...), scale (K, ...))}`` of each Bayesian tensor.
        estimator: ``"local"`` or ``"flipout"``.
        generators: one per member.

    Returns:
        ``(K, B, O)``.

    Example:
        >>> from bnn_pyro.nn.layers import Linear
        >>> net = nn.Sequential(Linear(3, 2))
        >>> loc, scale = torch.zeros(2, 2, 3), torch.ones(2, 2, 3)
        >>> w = loc + scale * torch.randn(2, 2, 3)
        >>> net[0].__dict__["weight"] = w; net[0]._parameters.pop("weight")  # doctest: +ELLIPSIS
        Parameter...
        >>> gens = [torch.Generator().manual_seed(s) for s in (0, 1)]
        >>> reparameterized_forward(net, torch.ones(2, 4, 3), {id(w): (loc, scale)}, "local",
        ...                         gens).shape
        torch.Size([2, 4, 2])
    """

    def hook(
        h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, conv: Any
    ) -> torch.Tensor | None:
        w = guide.get(id(weight))
        if w is None or conv is not None:
            return None
        b = None if bias is None else guide.get(id(bias))
        rows, out = h.shape[1], weight.shape[1]
        if estimator == "flipout":  # per member: the input signs, then the output signs
            s_in = _noise(torch.Size((rows, h.shape[-1])), h, generators, True)
            s_out = _noise(torch.Size((rows, out)), h, generators, True)
            return batched_linear(h, w[0], bias) + batched_linear(h * s_in, weight - w[0]) * s_out
        bias_loc, bias_scale = (bias, None) if b is None else b
        mean = batched_linear(h, w[0], bias_loc)
        b_scale = None if bias_scale is None else bias_scale.unsqueeze(-2)
        std = preactivation_std(h, w[1].transpose(-1, -2), b_scale)
        return mean + _noise(torch.Size((rows, out)), mean, generators, False) * std

    LAYER_HOOKS.append(hook)
    try:
        return net(x)
    finally:
        LAYER_HOOKS.remove(hook)
