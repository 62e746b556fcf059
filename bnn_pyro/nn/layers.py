"""Layers whose weights may carry leading sample dimensions.

A Bayesian net evaluated under Pyro sees weights with extra leading dimensions: ``S`` particles
(``Trace_ELBO(num_particles=S, vectorize_particles=True)``) or ``S`` posterior draws
(``Predictive(parallel=True)``, :meth:`bnn_pyro.VariationalBNN.predict`). ``torch.nn.Linear``
passes its weight to ``F.linear``, which accepts only a 2-D weight. The layers here accept
``weight: (*S, out, in)`` and return ``(*S, N, out)`` in one batched matmul, with no Python loop
over the samples.

Pyro lays a global site out against the data plate: under a plate of S particles at dim -2 a
weight of shape ``(out, in)`` is drawn as ``(S, 1, out, in)``, where the trailing ``1`` stands for
the data plate (dim -1) that the weight does not vary over. That placeholder is dropped, so
``(S, out, in)`` and ``(S, 1, out, in)`` give the same ``(S, N, out)``.

Inside :func:`bnn_pyro.nn.folding.folded_call` (how a net made Bayesian runs) the layers take and
give ``(n * N, ...)`` rows, the sample dims folded into the batch dim, so that the net's own
flatten and view calls see a plain batch (see :mod:`bnn_pyro.nn.folding`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from bnn_pyro.nn.folding import active_fold

__all__ = [
    "Linear",
    "Conv2d",
    "batched_linear",
    "batched_conv2d",
    "sample_dims",
    "sample_shape",
    "LAYER_HOOKS",
]

#: Interceptors of :func:`batched_linear`/:func:`batched_conv2d`, innermost last: while active,
#: :class:`bnn_pyro.poutine.LocalReparameterization` pushes one. Called as
#: ``hook(x, weight, bias, conv_or_None)``, it returns the output, or ``None`` to let the layer
#: compute as usual. Empty (the default), it costs one list check per call.
LAYER_HOOKS: list[Callable[..., torch.Tensor | None]] = []


def sample_dims(param: torch.Tensor, base_dim: int) -> torch.Tensor:
    """Drop the data-plate placeholder from a parameter's leading sample dimensions.

    Args:
        param: ``(*S, *shape)`` parameter, ``len(shape) == base_dim``.
        base_dim: number of dimensions of the unbatched parameter (2 for a linear weight).

    Returns:
        The parameter with a trailing size-1 sample dimension removed: ``(S, 1, *shape)`` becomes
        ``(S, *shape)``; anything else is returned unchanged.

    Example:
        >>> sample_dims(torch.zeros(4, 1, 3, 2), base_dim=2).shape
        torch.Size([4, 3, 2])
    """
    if param.dim() > base_dim and param.shape[-base_dim - 1] == 1:
        return param.squeeze(-base_dim - 1)
    return param


def sample_shape(weight: torch.Tensor, base_dim: int, bias: torch.Tensor | None) -> torch.Size:
    """The leading sample dims ``S`` of a layer's ``weight (*S, *shape)`` and ``bias (*S, out)``
    (placeholders dropped, see :func:`sample_dims`), broadcast; ``()`` for unbatched weights.

    Example:
        >>> sample_shape(torch.zeros(4, 1, 3, 2), 2, torch.zeros(3))
        torch.Size([4])
    """
    shape = sample_dims(weight, base_dim).shape[:-base_dim]
    if bias is None:
        return shape
    return torch.broadcast_shapes(shape, sample_dims(bias, 1).shape[:-1])


def batched_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """``x @ weight.T + bias`` for weights with leading sample dimensions.

    Args:
        x: ``(N, in)`` or ``(*S, N, in)`` inputs.
        weight: ``(out, in)`` or ``(*S, out, in)`` (a ``(*S, 1, out, in)`` placeholder layout is
            accepted, see :func:`sample_dims`).
        bias: ``None``, ``(out,)`` or ``(*S, out)``.

    Returns:
        ``(*S, N, out)``: the sample dimensions of ``x``, ``weight`` and ``bias`` broadcast.

    Example:
        >>> batched_linear(torch.ones(5, 3), torch.ones(10, 2, 3)).shape
        torch.Size([10, 5, 2])
    """
    if LAYER_HOOKS:
        out = LAYER_HOOKS[-1](x, weight, bias, None)
        if out is not None:
            return out
    if weight.dim() == 2 and (bias is None or bias.dim() == 1):
        return F.linear(x, weight, bias)
    weight = sample_dims(weight, 2)
    if bias is not None:
        bias = sample_dims(bias, 1)
    if weight.dim() == 3 and x.dim() == 2 and (bias is None or bias.dim() in (1, 2)):
        # One GEMM for all S samples: (N, in) @ (in, S*out), then view as (S, N, out). Twice as
        # fast as S small matmuls when `in` is small (the first layer of a tabular net).
        s, out_features, in_features = weight.shape
        flat_weight = weight.reshape(s * out_features, in_features).t()
        if bias is None:
            flat = x @ flat_weight
        else:
            flat = torch.addmm(bias.expand(s, out_features).reshape(-1), x, flat_weight)
        return flat.view(x.shape[0], s, out_features).transpose(0, 1)
    if weight.dim() == 3 and x.dim() == 3 and x.shape[0] == weight.shape[0] and bias is not None:
        if bias.dim() == 2 and bias.shape[0] == weight.shape[0]:
            return torch.baddbmm(bias.unsqueeze(-2), x, weight.transpose(-1, -2))
    out = torch.matmul(x, weight.transpose(-1, -2))
    if bias is not None:
        out = out + bias.unsqueeze(-2)
    return out


class Linear(nn.Linear):
    """``torch.nn.Linear`` that also accepts weights with leading sample dimensions.

    Identical to ``nn.Linear`` (same parameters, same init, same ``state_dict``) for 2-D
    weights; see :func:`batched_linear` for the batched case.

    Shapes:
        x: ``(N, in)`` or ``(*S, N, in)``; weight ``(*S, out, in)``; output ``(*S, N, out)``.
        Inside :func:`~bnn_pyro.nn.folding.folded_call`: x ``(N, ..., in)`` or folded
        ``(n * N, ..., in)``, output ``(n * N, ..., out)`` with ``n = prod(S)``.

    Example:
        >>> layer = Linear(3, 2)
        >>> layer(torch.randn(5, 3)).shape
        torch.Size([5, 2])
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias, fold = self.weight, self.bias, active_fold()
        shape = sample_shape(weight, 2, bias) if fold is not None else None
        if not shape:  # outside a fold, or unbatched weights: rows are rows
            return batched_linear(x, weight, bias)
        # folded rows (n*N, *mid, in) -> (*S, N * mid, in), or shared ones (N * mid, in)
        rows = fold.unfold(x, shape)
        lead = rows.dim() - x.dim()
        out = batched_linear(rows.reshape(*rows.shape[:lead], -1, x.shape[-1]), weight, bias)
        out = out.reshape(*shape, fold.batch, *x.shape[1:-1], out.shape[-1])
        return fold.fold(out, shape)


def batched_conv2d(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, conv: nn.Conv2d
) -> torch.Tensor:
    """2-D convolution with weights that may carry one leading sample dimension.

    The S weight samples become S groups of one grouped convolution, so the S convolutions run
    as one call.

    Args:
        x: ``(N, C, H, W)`` or ``(S, N, C, H, W)``.
        weight: ``(out, C/groups, kh, kw)`` or ``(S, out, C/groups, kh, kw)`` (``(S, 1, ...)``
            accepted).
        bias: ``None``, ``(out,)`` or ``(S, out)``.
        conv: the layer whose stride, padding, dilation and groups are used.

    Returns:
        ``(N, out, H', W')`` or ``(S, N, out, H', W')``.

    Example:
        >>> conv = nn.Conv2d(1, 2, 3)
        >>> batched_conv2d(torch.randn(4, 1, 5, 5), torch.randn(6, 2, 1, 3, 3), None, conv).shape
        torch.Size([6, 4, 2, 3, 3])
    """
    if LAYER_HOOKS:
        out = LAYER_HOOKS[-1](x, weight, bias, conv)
        if out is not None:
            return out
    if weight.dim() == 4 and x.dim() == 4 and (bias is None or bias.dim() == 1):
        return conv._conv_forward(x, weight, bias)
    weight = sample_dims(weight, 4)
    if bias is not None:
        bias = sample_dims(bias, 1)
    if weight.dim() != 5:
        raise ValueError(
            "Conv2d supports one leading sample dimension, got weight of shape "
            f"{tuple(weight.shape)}"
        )
    s = weight.shape[0]
    if x.dim() == 4:
        x = x.unsqueeze(0).expand(s, *x.shape)
    if x.dim() != 5 or x.shape[0] not in (1, s):
        raise ValueError(
            f"Conv2d input must be (N, C, H, W) or ({s}, N, C, H, W), got {tuple(x.shape)}"
        )
    x = x.expand(s, *x.shape[1:])
    n, c, h, w = x.shape[1:]
    folded = x.permute(1, 0, 2, 3, 4).reshape(n, s * c, h, w)
    out = F.conv2d(
        folded,
        weight.reshape(s * weight.shape[1], *weight.shape[2:]),
        None,
        conv.stride,
        conv.padding,
        conv.dilation,
        conv.groups * s,
    )
    out = out.reshape(n, s, -1, *out.shape[-2:]).permute(1, 0, 2, 3, 4)
    if bias is not None:
        out = out + bias.expand(s, -1)[:, None, :, None, None]
    return out


class Conv2d(nn.Conv2d):
    """``torch.nn.Conv2d`` that also accepts weights with one leading sample dimension.

    Shapes:
        x: ``(N, C, H, W)`` or ``(S, N, C, H, W)``; weight ``(S, out, C/groups, kh, kw)``;
        output ``(S, N, out, H', W')``; inside :func:`~bnn_pyro.nn.folding.folded_call`, x
        ``(N, C, H, W)`` or ``(S * N, C, H, W)`` and output ``(S * N, out, H', W')``.
        ``padding_mode`` other than ``"zeros"`` is supported only for unbatched weights.

    Example:
        >>> conv = Conv2d(1, 4, 3)
        >>> conv(torch.randn(2, 1, 8, 8)).shape
        torch.Size([2, 4, 6, 6])
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.padding_mode != "zeros" and self.weight.dim() > 4:
            raise ValueError("Conv2d with sampled weights supports padding_mode='zeros' only")
        weight, bias, fold = self.weight, self.bias, active_fold()
        shape = sample_shape(weight, 4, bias) if fold is not None else None
        if not shape:  # outside a fold, or unbatched weights: rows are rows
            return batched_conv2d(x, weight, bias, self)
        out = batched_conv2d(fold.unfold(x, shape), weight, bias, self)
        return fold.fold(out, shape)


#: torch layers replaced by their sample-dimension-aware twins when a net becomes Bayesian.
BATCHED_REPLACEMENTS: dict[type[nn.Module], type[nn.Module]] = {
    nn.Linear: Linear,
    nn.Conv2d: Conv2d,
}
