"""The maths of local reparameterization and flipout for linear and convolutional layers.

For a layer whose weights are ``W ~ Normal(loc, scale)`` (independent entries) and an input
``x``:

* **local reparameterization** (Kingma, Salimans & Welling 2015) samples the pre-activation
  ``x @ W.T + b`` directly: Gaussian with mean ``x @ loc.T + b_loc`` and variance
  ``x² @ (scale²).T + b_scale²``, fresh noise per example and unit. For a linear layer this is
  the exact distribution of each example's pre-activations (the units of one example use
  distinct weights, so they are independent under weight sampling too). For a convolution
  it is exact per output element, but it drops the correlation between the positions of one
  example (they share a kernel), as in Molchanov et al. (2017).
* **flipout** (Wen et al. 2018) keeps the sampled perturbation ``dW = W - loc`` and decorrelates
  the examples with random signs: ``x @ loc.T + b + ((x ∘ s_in) @ dW.T) ∘ s_out``. Exact per
  example for linear and convolutional layers alike (``diag(s_out) dW diag(s_in)`` has the law of
  ``dW`` for any symmetric perturbation).

All functions accept leading sample dimensions on ``x`` and on the weights (``(*S, out, in)``,
the ``(S, 1, out, in)`` particle layout included) and return what
:func:`bnn_pyro.nn.batched_linear`/:func:`~bnn_pyro.nn.batched_conv2d` would return for a
sampled weight: ``(*S, N, out)`` / ``(*S, N, out, H', W')``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn
from torch.autograd.function import once_differentiable

from bnn_pyro.nn.layers import batched_conv2d, batched_linear, sample_dims

__all__ = [
    "Noise",
    "draw_noise",
    "preactivation_std",
    "local_reparam_linear",
    "flipout_linear",
    "local_reparam_conv2d",
    "flipout_conv2d",
]


# Weight matrices from this many entries use the custom backward (one (D, H) buffer instead of
# three, which pays off on large layers). Below it autograd's own ops win: the Python overhead
# of an autograd.Function outweighs the saved buffers.
_CUSTOM_BACKWARD_MIN = 1 << 16

_FLOORS: dict[torch.dtype, float] = {}


def _floor(dtype: torch.dtype) -> float:
    """``sqrt(tiny)`` as computed in ``dtype``: the value of a clamped standard deviation."""
    if dtype not in _FLOORS:
        _FLOORS[dtype] = float(torch.tensor(torch.finfo(dtype).tiny, dtype=dtype).sqrt())
    return _FLOORS[dtype]


class _PreactivationStd(torch.autograd.Function):
    """``sqrt(X² @ S² [+ b²])`` without keeping ``S²`` or an extra ``(D, H)`` gradient buffer."""

    @staticmethod
    def forward(ctx, X, S, b):  # noqa: D102
        var = torch.matmul(X.square(), S.square())
        if b is not None:
            b2 = b.square()
            same = torch.broadcast_shapes(var.shape, b2.shape) == var.shape
            var = var.add_(b2) if same else var + b2
        # clamp: a zero input row with no bias has variance 0, where sqrt'(0) is infinite
        std = var.clamp_min_(torch.finfo(var.dtype).tiny).sqrt_()
        ctx.save_for_backward(X, S, b, std)
        ctx.floor = _floor(var.dtype)
        return std

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):  # noqa: D102
        X, S, b, std = ctx.saved_tensors
        # d std / d var = 1 / (2 std); d var / d S = 2 S X²  =>  grad_S = S ∘ (X²ᵀ @ (grad / std))
        g = (grad / std).masked_fill_(std <= ctx.floor, 0.0)
        grad_X = grad_S = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_X = (X * torch.matmul(g, S.square().transpose(-1, -2))).sum_to_size(X.shape)
        if ctx.needs_input_grad[1]:
            grad_S = torch.matmul(X.square().transpose(-1, -2), g).sum_to_size(S.shape)
            grad_S = grad_S.mul_(S) if grad_S.shape == S.shape else grad_S * S
        if b is not None and ctx.needs_input_grad[2]:
            grad_b = (g * b).sum_to_size(b.shape)
        return grad_X, grad_S, grad_b


def preactivation_std(
    X: torch.Tensor, A_scale: torch.Tensor, bias_scale: torch.Tensor | None = None
) -> torch.Tensor:
    """Standard deviation of ``X @ A`` (+ ``b``) for independent ``A ~ Normal(., A_scale)``.

    ``sqrt(X² @ A_scale² + bias_scale²)`` as two matmuls and no ``(B, D, H)`` intermediate; for
    large ``A_scale`` the backward pass allocates one ``(D, H)`` buffer (the gradient itself).
    Zero variances (an all-zero input row and no bias) give a zero gradient instead of NaN.

    Args:
        X: ``(*S, B, D)``.
        A_scale: ``(*S, D, H)``.
        bias_scale: ``None`` or a tensor broadcastable to ``(*S, B, H)``, e.g. ``(H,)``.

    Returns:
        ``(*S, B, H)``.

    Example:
        >>> X, S = torch.ones(2, 3), torch.full((3, 4), 2.0)
        >>> preactivation_std(X, S)[0]
        tensor([3.4641, 3.4641, 3.4641, 3.4641])
    """
    if A_scale.shape[-2:].numel() < _CUSTOM_BACKWARD_MIN:
        var = torch.matmul(X.square(), A_scale.square())
        if bias_scale is not None:
            var = var + bias_scale.square()
        return var.clamp_min(torch.finfo(var.dtype).tiny).sqrt()
    return _PreactivationStd.apply(X, A_scale, bias_scale)


def _base(t: torch.Tensor, base_dim: int) -> torch.Tensor:
    """Drop leading dims that are size 1 or broadcast (stride 0): an expanded guide parameter
    ``(P, 1, out, in)`` becomes its ``(out, in)`` storage, so the mean costs one matmul."""
    while t.dim() > base_dim and (t.shape[0] == 1 or t.stride(0) == 0):
        t = t[0]
    return t


#: ``noise(shape, like, signs)``: standard normal draws of ``shape`` (random signs where
#: ``signs``) in ``like``'s dtype and device. The estimators draw theirs through it: by default
#: from the global generator (:func:`draw_noise`); K stacked models pass their own
#: (:mod:`bnn_pyro.methods.vi.stacked_lrt`: member ``k``'s slice from its generator).
Noise = Callable[[torch.Size, torch.Tensor, bool], torch.Tensor]


def draw_noise(
    shape: torch.Size, like: torch.Tensor, signs: bool, generator: torch.Generator | None = None
) -> torch.Tensor:
    """The estimators' default :data:`Noise`: standard normals, or random signs ``±1``, drawn
    from ``generator`` (default: the global generator).

    Example:
        >>> draw_noise(torch.Size((2, 3)), torch.zeros(1), signs=True).abs().unique()
        tensor([1.])
    """
    if signs:
        return (
            torch.randint(0, 2, shape, generator=generator, dtype=like.dtype, device=like.device)
            .mul_(2)
            .sub_(1)
        )
    return torch.randn(shape, generator=generator, dtype=like.dtype, device=like.device)


def _gaussian_draw(
    mean: torch.Tensor,
    std: torch.Tensor,
    sample_shape: torch.Size | None,
    event_dim: int,
    noise: Noise = draw_noise,
) -> torch.Tensor:
    """The local reparameterization's draw of the pre-activations: ``mean + eps * std``, with
    standard normals ``eps`` from ``noise`` over ``mean`` and ``std`` broadcast, with
    ``sample_shape`` in front.

    Args:
        mean, std: broadcastable, ``(*S, N, out)`` (linear) or ``(*S, N, out, H', W')`` (conv).
        sample_shape: leading dims of the draw (``None``/empty: those of ``mean`` and ``std``).
        event_dim: the dims of one sample's output: 2 (linear) or 4 (conv).
        noise: what draws ``eps`` (:data:`Noise`).

    Returns:
        ``(*sample_shape, N, out[, H', W'])``, fresh noise for every entry.

    Example:
        >>> _gaussian_draw(torch.zeros(4, 2), torch.ones(2), torch.Size([3]), 2).shape
        torch.Size([3, 4, 2])
    """
    shape = mean.shape if mean.shape == std.shape else torch.broadcast_shapes(mean.shape, std.shape)
    if sample_shape:  # torch.broadcast_shapes is slow: only when there are sample dims
        shape = torch.broadcast_shapes(torch.Size(sample_shape) + shape[-event_dim:], shape)
    return mean + noise(shape, mean, False) * std


def _linear_shape(x: torch.Tensor, weight: torch.Tensor, out: int) -> torch.Size:
    lead = torch.broadcast_shapes(x.shape[:-2], sample_dims(weight, 2).shape[:-2])
    return lead + (x.shape[-2], out)


def local_reparam_linear(
    x: torch.Tensor,
    loc: torch.Tensor,
    scale: torch.Tensor,
    bias_loc: torch.Tensor | None = None,
    bias_scale: torch.Tensor | None = None,
    sample_shape: torch.Size | None = None,
    noise: Noise = draw_noise,
) -> torch.Tensor:
    """Sample ``x @ W.T + b`` for ``W ~ Normal(loc, scale)``, ``b ~ Normal(bias_loc, bias_scale)``.

    Args:
        x: ``(*S, N, in)``.
        loc, scale: ``(out, in)`` or ``(*S, out, in)``.
        bias_loc: ``None``, ``(out,)`` or ``(*S, out)``; a point-estimate bias when
            ``bias_scale`` is ``None``.
        bias_scale: ``None`` or the shape of ``bias_loc``.
        sample_shape: the leading dims of the output (default: those of ``x`` and ``loc``);
            pass the sample dims of the drawn weight to get one draw per particle.
        noise: what draws the ``(*S, N, out)`` standard normals (:data:`Noise`).

    Returns:
        ``(*S, N, out)``, fresh noise for every entry.

    Example:
        >>> out = local_reparam_linear(torch.ones(5, 3), torch.zeros(2, 3), torch.ones(2, 3))
        >>> out.shape
        torch.Size([5, 2])
    """
    loc, scale = _base(loc, 2), _base(scale, 2)
    if bias_loc is not None:
        bias_loc = _base(bias_loc, 1)
    mean = batched_linear(x, loc, bias_loc)
    b_scale = None
    if bias_scale is not None:
        b_scale = _base(bias_scale, 1)
        b_scale = b_scale.unsqueeze(-2) if b_scale.dim() > 1 else b_scale
    std = preactivation_std(x, scale.transpose(-1, -2), b_scale)
    return _gaussian_draw(mean, std, sample_shape, 2, noise)


def flipout_linear(
    x: torch.Tensor,
    loc: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    noise: Noise = draw_noise,
) -> torch.Tensor:
    """Flipout: ``x @ loc.T + b + ((x ∘ s_in) @ (weight - loc).T) ∘ s_out`` with random signs.

    Args:
        x: ``(*S, N, in)``.
        loc: ``(out, in)`` (or ``(*S, out, in)``), the weight mean.
        weight: the drawn weight ``(out, in)`` or ``(*S, out, in)`` (one per particle).
        bias: ``None`` or the drawn bias, ``(out,)``/``(*S, out)``.
        noise: what draws the input signs, then the output signs (:data:`Noise`).

    Returns:
        ``(*S, N, out)``: each example sees a perturbation with the law of ``weight - loc``.

    Example:
        >>> w = torch.randn(2, 3)
        >>> flipout_linear(torch.ones(5, 3), torch.zeros(2, 3), w).shape
        torch.Size([5, 2])
    """
    loc = _base(loc, 2)
    delta = sample_dims(weight, 2) - loc
    shape = _linear_shape(x, weight, loc.shape[-2])
    s_in = noise(shape[:-1] + (x.shape[-1],), x, True)
    s_out = noise(shape, x, True)
    return batched_linear(x, loc, bias) + batched_linear(x * s_in, delta) * s_out


def _conv(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, conv: nn.Conv2d
) -> torch.Tensor:
    """``conv(x, weight)`` for ``x: (*S, N, C, H, W)`` and a weight with or without sample dims."""
    if weight.dim() == 4 and x.dim() > 4:
        lead = x.shape[:-3]
        out = conv._conv_forward(x.reshape(-1, *x.shape[-3:]), weight, None)
        out = out.reshape(*lead, *out.shape[1:])
    elif weight.dim() == 4:
        out = conv._conv_forward(x, weight, None)
    else:
        out = batched_conv2d(x, weight, None, conv)
    if bias is not None:
        bias = sample_dims(bias, 1)
        if bias.dim() > 1:  # (S, out) against (S, N, out, H', W')
            bias = bias.unsqueeze(-2)
        out = out + bias[..., None, None]
    return out


def local_reparam_conv2d(
    x: torch.Tensor,
    loc: torch.Tensor,
    scale: torch.Tensor,
    bias_loc: torch.Tensor | None,
    bias_scale: torch.Tensor | None,
    conv: nn.Conv2d,
    sample_shape: torch.Size | None = None,
) -> torch.Tensor:
    """Local reparameterization of ``conv(x, W) + b`` (per output element; see module docstring).

    Args:
        x: ``(N, C, H, W)`` or ``(*S, N, C, H, W)``.
        loc, scale: ``(out, C/groups, kh, kw)`` (or with leading sample dims).
        bias_loc, bias_scale: as in :func:`local_reparam_linear`.
        conv: the layer whose stride, padding, dilation and groups are used.
        sample_shape: leading dims of the output (one draw per particle).

    Returns:
        ``(*S, N, out, H', W')``.

    Example:
        >>> conv = nn.Conv2d(1, 2, 3)
        >>> w_loc, w_scale = torch.zeros(2, 1, 3, 3), torch.ones(2, 1, 3, 3)
        >>> local_reparam_conv2d(torch.randn(4, 1, 5, 5), w_loc, w_scale, None, None, conv).shape
        torch.Size([4, 2, 3, 3])
    """
    loc, scale = _base(loc, 4), _base(scale, 4)
    mean = _conv(x, loc, None if bias_loc is None else _base(bias_loc, 1), conv)
    b_var = None if bias_scale is None else _base(bias_scale, 1).square()
    var = _conv(x.square(), scale.square(), b_var, conv)
    std = var.clamp_min(torch.finfo(var.dtype).tiny).sqrt()
    return _gaussian_draw(mean, std, sample_shape, 4)


def flipout_conv2d(
    x: torch.Tensor,
    loc: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    conv: nn.Conv2d,
) -> torch.Tensor:
    """Flipout of ``conv(x, weight) + bias``: signs per example and input/output channel.

    Args:
        x: ``(N, C, H, W)`` or ``(*S, N, C, H, W)``.
        loc: the kernel mean ``(out, C/groups, kh, kw)``.
        weight: the drawn kernel, ``(out, ...)`` or ``(*S, out, ...)``.
        bias: ``None`` or the drawn bias.
        conv: the layer (stride, padding, dilation, groups).

    Returns:
        ``(*S, N, out, H', W')``.

    Example:
        >>> conv = nn.Conv2d(1, 2, 3)
        >>> loc = torch.zeros(2, 1, 3, 3)
        >>> flipout_conv2d(torch.randn(4, 1, 5, 5), loc, loc + 0.1, None, conv).shape
        torch.Size([4, 2, 3, 3])
    """
    loc = _base(loc, 4)
    delta = sample_dims(weight, 4) - loc
    lead = torch.broadcast_shapes(x.shape[:-4], delta.shape[:-4])
    s_in = draw_noise(lead + (x.shape[-4], x.shape[-3], 1, 1), x, True)
    s_out = draw_noise(lead + (x.shape[-4], loc.shape[0], 1, 1), x, True)
    mean = _conv(x, loc, bias, conv)
    return mean + _conv(x * s_in, delta, None, conv) * s_out
