"""Local reparameterization and flipout for K stacked models, each member's noise its own.

:func:`reparameterized_forward` runs a stacked twin net (:mod:`bnn_pyro.methods.vi.stacked`)
with its linear layers sampling pre-activations by the one model's estimators,
:func:`bnn_pyro.poutine.estimators.local_reparam_linear` and ``flipout_linear``, handed a
noise source that draws member ``k``'s slice from ``generators[k]`` with the shapes and in the
order its own fit draws it from the global generator: so a stacked fit ends where the K fits
end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn as nn

from bnn_pyro.nn.layers import LAYER_HOOKS
from bnn_pyro.poutine.estimators import Noise, draw_noise, flipout_linear, local_reparam_linear

__all__ = ["reparameterized_forward"]


def _member_noise(generators: Sequence[torch.Generator]) -> Noise:
    """The estimators' :data:`~bnn_pyro.poutine.estimators.Noise` for K stacked members: a
    ``(K, *shape)`` draw is member ``k``'s ``shape`` draw from ``generators[k]``, stacked."""

    def noise(shape: torch.Size, like: torch.Tensor, signs: bool) -> torch.Tensor:
        return torch.stack([draw_noise(shape[1:], like, signs, g) for g in generators])

    return noise


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

    noise = _member_noise(generators)

    def hook(
        h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, conv: Any
    ) -> torch.Tensor | None:
        w = guide.get(id(weight))
        if w is None or conv is not None:
            return None
        if estimator == "flipout":  # per member: the input signs, then the output signs
            return flipout_linear(h, w[0], weight, bias, noise)
        b = None if bias is None else guide.get(id(bias))
        bias_loc, bias_scale = (bias, None) if b is None else b
        return local_reparam_linear(h, w[0], w[1], bias_loc, bias_scale, noise=noise)

    LAYER_HOOKS.append(hook)
    try:
        return net(x)
    finally:
        LAYER_HOOKS.remove(hook)
