"""Local reparameterization and flipout in the plain-torch VI objective
(:mod:`bnn_pyro.methods.vi.objective`), for one model or K stacked.

:func:`reparameterized_forward` runs the twin net with its layers sampling pre-activations. One
model's layers use :class:`~bnn_pyro.poutine.LocalReparameterization`'s own hook, so they draw
what the effect handler draws under Pyro's ELBO. K stacked members' linear layers run the one
model's estimators, :func:`bnn_pyro.poutine.estimators.local_reparam_linear` and
``flipout_linear``, handed a noise source that draws member ``k``'s slice from
``generators[k]`` with the shapes and in the order its own fit draws it from the global
generator: so a stacked fit ends where the K fits end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn as nn

from bnn_pyro.nn.layers import LAYER_HOOKS
from bnn_pyro.poutine.estimators import Noise, draw_noise, flipout_linear, local_reparam_linear
from bnn_pyro.poutine.local_reparameterization import LocalReparameterization

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
    values: dict[str, torch.Tensor],
    guide: dict[str, tuple[torch.Tensor, torch.Tensor]],
    estimator: str,
    generators: Sequence[torch.Generator] | None = None,
) -> torch.Tensor:
    """``net(x)`` with its layers sampling pre-activations by local reparameterization
    (``"local"``) or flipout from the guide's ``(loc, scale)`` of each drawn weight.

    One model (``generators=None``): the layer hook of
    :class:`~bnn_pyro.poutine.LocalReparameterization`, fed the guide's parameters directly
    instead of from Pyro's effect stack, so the same estimator draws the same noise from the
    global generator (linear and conv layers). K stacked members: the linear layers' noise of
    member ``k`` from ``generators[k]``.

    Args:
        net: the twin net, its weights set to the drawn values (one model's, or ``(K, ...)``).
        x: ``(B, in)`` for one model, ``(K, B, in)`` for K members.
        values: ``{site: drawn value}``, the tensors the net's layers hold.
        guide: ``{site: (loc, scale)}``, each broadcastable against the site's value.
        estimator: ``"local"`` or ``"flipout"``.
        generators: one per member, or ``None`` for one model.

    Returns:
        ``(B, O)``, or ``(K, B, O)``.

    Example:
        >>> from bnn_pyro.nn.layers import Linear
        >>> net = nn.Sequential(Linear(3, 2))
        >>> loc, scale = torch.zeros(2, 2, 3), torch.ones(2, 2, 3)
        >>> w = loc + scale * torch.randn(2, 2, 3)
        >>> net[0].__dict__["weight"] = w; net[0]._parameters.pop("weight")  # doctest: +ELLIPSIS
        Parameter...
        >>> gens = [torch.Generator().manual_seed(s) for s in (0, 1)]
        >>> reparameterized_forward(net, torch.ones(2, 4, 3), {"w": w}, {"w": (loc, scale)},
        ...                         "local", gens).shape
        torch.Size([2, 4, 2])
    """
    if generators is None:
        handler = LocalReparameterization(estimator)
        for name, (loc, scale) in guide.items():
            handler.register_weight(values[name], name, loc, scale)
        hook: Any = handler.forward_layer
    else:
        hook = _member_hook({id(values[n]): p for n, p in guide.items()}, estimator, generators)
    LAYER_HOOKS.append(hook)
    try:
        return net(x)
    finally:
        LAYER_HOOKS.remove(hook)


def _member_hook(
    guide: dict[int, tuple[torch.Tensor, torch.Tensor]],
    estimator: str,
    generators: Sequence[torch.Generator],
) -> Any:
    """The layer hook of K stacked members: ``guide`` keyed by the identity of each drawn
    weight, member ``k``'s noise from ``generators[k]``."""
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

    return hook
