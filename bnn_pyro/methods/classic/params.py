"""Functional-call helpers: flat parameter vectors and a net run once per stacked parameter set."""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.func import functional_call, jvp, vmap

from bnn_pyro.exceptions import warn_user
from bnn_pyro.nn.batched import StackedCall


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


_STACKED = StackedCall()


def batched_call(
    model: nn.Module, stacked: dict[str, torch.Tensor], x: torch.Tensor
) -> torch.Tensor:
    """Run ``model(x)`` once per leading index of the stacked tensors: ``(S, N, ...)``.

    ``stacked`` maps parameter (or buffer) names to ``(S, *shape)`` tensors; tensors not named
    keep the module's own values. The S calls run at once: as one batched pass through
    sample-dimension-aware twins of the linear/conv layers when that gives the same numbers
    (:class:`bnn_pyro.nn.batched.StackedCall`), else under ``torch.func.vmap``. If the net
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
        return _STACKED(model, stacked, x)
    except RuntimeError as err:
        warn_user(
            f"{type(model).__name__} could not be vmapped over parameter samples ({err}); "
            "falling back to a loop over samples",
            RuntimeWarning,
        )
    num = next(iter(stacked.values())).shape[0]
    return torch.stack([call({k: v[s] for k, v in stacked.items()}, x) for s in range(num)])


def linearized_call(
    model: nn.Module,
    mean: dict[str, torch.Tensor],
    stacked: dict[str, torch.Tensor],
    x: torch.Tensor,
) -> torch.Tensor:
    """The net linearised at ``mean``, ``f(x, θ*) + J(x) (θ_s - θ*)``, for each sample.

    Args:
        model: the net (parameters not in ``mean`` stay fixed).
        mean: ``{name: (*shape)}`` the expansion point θ*.
        stacked: ``{name: (S, *shape)}`` the samples θ_s.
        x: ``(N, ...)`` inputs.

    Returns:
        ``(S, N, ...)``: one Jacobian-vector product per sample, under ``vmap``.
    """

    def f(p: dict[str, torch.Tensor]) -> torch.Tensor:
        return functional_call(model, p, (x,))

    def one(sample: dict[str, torch.Tensor]) -> torch.Tensor:
        out, tangent = jvp(f, (mean,), ({k: sample[k] - mean[k] for k in mean},))
        return out + tangent

    return vmap(one)(stacked)


def last_linear(net: nn.Module, who: str) -> tuple[str, nn.Linear]:
    """The name and module of the last ``nn.Linear`` in ``net.named_modules()`` order, which
    ``who`` (a method's name, for the message) makes its last layer.

    Raises:
        ValueError: a net without an ``nn.Linear``.

    Example:
        >>> last_linear(nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 1)), "VBLL")[0]
        '2'
        >>> last_linear(nn.Tanh(), "SNGP")
        Traceback (most recent call last):
          ...
        ValueError: SNGP makes the net's last nn.Linear its last layer, and this net has none: ...
    """
    linears = [(name, m) for name, m in net.named_modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise ValueError(
            f"{who} makes the net's last nn.Linear its last layer, and this net has none: end "
            "the net with an nn.Linear"
        )
    return linears[-1]


def last_layer_parameters(model: nn.Module) -> dict[str, torch.nn.Parameter]:
    """``{name: parameter}`` of the last ``nn.Linear`` in ``model.named_modules()`` order."""
    linears = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise ValueError("subset='last_layer' needs an nn.Linear in model, found none")
    prefix = f"{linears[-1]}." if linears[-1] else ""
    return {
        n: p
        for n, p in model.named_parameters()
        if n.startswith(prefix) and "." not in n[len(prefix) :]
    }
