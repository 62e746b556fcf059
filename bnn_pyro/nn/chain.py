"""An MLP evaluated for S weight samples in blocks of samples: the prediction kernel.

For a net that is a chain of ``nn.Linear`` layers and elementwise activations (what
:func:`bnn_pyro.nn.mlp` builds), :class:`LinearChain` computes the ``(S, N, O)`` outputs of S
parameter sets without a loop over samples and without the per-chunk Python of the generic twin:

* activations are held feature-major, ``(s, H, r)`` (units before rows), so every product has
  the rows as its long dimension: a narrow layer (one output unit) is a row of matrix products,
  not a column of matrix-vector ones;
* the first layer of a block of ``s`` samples is one tall matrix product,
  ``W (s·H, D) @ x.T (D, r)`` with the biases in the same call (``addmm``), its activation in
  place;
* each later layer is one batched product over the block, ``W (s, O, H) @ h (s, H, r)``
  (``baddbmm``), activation in place; the last is written to the ``(S, N, O)`` output;
* blocks hold about ``budget`` elements (all rows and as many samples as fit; rows are split
  only when one sample's activations of every row exceed it), so memory stays bounded whatever
  N and S are and each block's activations stay in cache; the budget is the device's
  (:func:`chain_budget`).

``benchmarks/step_time.py`` times the whole of ``predict`` (draws, this kernel, the reduction)
against a plain torch loop over samples (``benchmarks/results/step_time.md``). The layout and
the budget are measured choices: the row-major layout it replaced (``x @ W (D, s·H)``, then
``baddbmm`` on ``(s, r, H)``) was slower than that loop, mostly in its narrow last layer, and
larger blocks than the budget leave the L2 cache.
Measured: ``benchmarks/results/library_measurements.md``, section 'Prediction kernel layout'.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
import torch.nn as nn
import torch.nn.functional as F

from bnn_pyro.nn.batched import device_budget

__all__ = ["LinearChain", "chain_budget"]

#: Elements of one block's widest activation on a CPU (1 MB in float32: the L2 cache).
CHAIN_BUDGET = 1 << 18


def chain_budget(device: torch.device) -> int:
    """Elements of one block's widest activation on ``device``: :data:`CHAIN_BUDGET` on a CPU,
    :data:`~bnn_pyro.nn.batched.GPU_BUDGET_SCALE` times that on a CUDA device.

    Example:
        >>> chain_budget(torch.device("cpu")), chain_budget(torch.device("cuda"))
        (262144, 33554432)
    """
    return device_budget(CHAIN_BUDGET, device)


def _in_place(act: nn.Module) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The activation applied in place, or ``None`` for a module that is not a known one."""
    kind = type(act)
    if kind is nn.Identity:
        return lambda h: h
    if kind is nn.ReLU:
        return torch.relu_
    if kind is nn.Tanh:
        return torch.tanh_
    if kind is nn.Sigmoid:
        return torch.sigmoid_
    if kind is nn.LeakyReLU:
        return lambda h: F.leaky_relu_(h, act.negative_slope)
    if kind is nn.ELU:
        return lambda h: F.elu_(h, act.alpha)
    if kind is nn.SiLU:
        return lambda h: F.silu(h, inplace=True)
    if kind in (nn.GELU, nn.Softplus, nn.Softsign, nn.Mish, nn.Hardtanh, nn.ReLU6):
        return act  # a new tensor: still elementwise
    return None


class LinearChain:
    """``chain.run(tensors, x) -> (S, N, O)`` for a net of linear layers and activations.

    Built with :meth:`of`, which returns ``None`` for any other net. ``tensors`` maps the net's
    parameter names (``"0.weight"``) to ``(S, *shape)`` samples or to shared ``(*shape)``
    tensors; at least one must be sampled.

    Example:
        >>> net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
        >>> chain = LinearChain.of(net)
        >>> tensors = {k: torch.stack([v, 2 * v]) for k, v in net.named_parameters()}
        >>> out = chain.run(tensors, torch.randn(5, 3))
        >>> out.shape
        torch.Size([2, 5, 2])
    """

    def __init__(self, steps: list[tuple[str, object]], widest: int) -> None:
        self.steps = steps  # ("linear", "0") or ("act", in-place function)
        self.widest = widest

    @classmethod
    def of(cls, net: nn.Module) -> LinearChain | None:
        """The chain of ``net`` (an ``nn.Sequential`` of ``nn.Linear`` and elementwise
        activations, starting with a linear layer), or ``None``."""
        if type(net) is not nn.Sequential or len(net) == 0:
            return None
        steps: list[tuple[str, object]] = []
        widths = []
        for name, module in net.named_children():
            if isinstance(module, nn.Linear):  # a subclass with its own forward fails the probe
                steps.append(("linear", name))
                widths.append(module.out_features)
                continue
            act = _in_place(module)
            if act is None or not steps:
                return None
            steps.append(("act", act))
        return cls(steps, max(widths))

    @torch.no_grad()
    def run(
        self, tensors: Mapping[str, torch.Tensor], x: torch.Tensor, max_rows: int | None = None
    ) -> torch.Tensor:
        """``(S, N, O)`` outputs for ``x (N, D)``; ``max_rows``: at most that many rows per
        block."""
        layers = [
            _Layer(tensors[f"{name}.weight"], tensors.get(f"{name}.bias"))
            for kind, name in self.steps
            if kind == "linear"
        ]
        num = next(layer.samples for layer in layers if layer.samples)
        n = x.shape[0]
        budget = chain_budget(x.device)
        s_block = max(1, min(num, budget // max(1, n * self.widest)))
        r_block = n if s_block > 1 else max(1, budget // self.widest)
        if max_rows is not None:
            r_block = min(r_block, max_rows)
        layers[0].widen(num)
        out: torch.Tensor | None = None
        for r0 in range(0, n, r_block):
            xr = x[r0 : r0 + r_block]
            for s0 in range(0, num, s_block):
                s1 = min(s0 + s_block, num)
                h = self._block(layers, xr, s0, s1)  # (s, O, r)
                if out is None:
                    out = h.new_empty((num, n, h.shape[1]))
                out[s0:s1, r0 : r0 + xr.shape[0]] = h.transpose(1, 2)
        assert out is not None
        return out

    def _block(self, layers: list[_Layer], xr: torch.Tensor, s0: int, s1: int) -> torch.Tensor:
        """Samples ``s0:s1`` on rows ``xr``, feature-major: ``(s1 - s0, O, r)``."""
        h: torch.Tensor | None = None
        layer = iter(layers)
        for kind, item in self.steps:
            if kind == "act":
                h = item(h)  # type: ignore[operator]
            elif h is None:
                h = next(layer).first(xr, s0, s1)
            else:
                h = next(layer).later(h, s0, s1)
        assert h is not None
        return h


class _Layer:
    """One linear layer's weight ``(S, out, in)`` or ``(out, in)`` and bias (or ``None``)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        self.weight, self.bias = weight, bias
        if weight.dim() == 3:
            self.samples = weight.shape[0]
        elif bias is not None and bias.dim() == 2:
            self.samples = bias.shape[0]
        else:
            self.samples = 0  # shared by every sample
        self.wide: torch.Tensor | None = None
        self.flat_bias: torch.Tensor | None = None
        self.units = weight.shape[-2]
        self.buffer: torch.Tensor | None = None  # this layer's outputs, reused by every block

    def space(self, s: int, r: int, like: torch.Tensor) -> torch.Tensor:
        """A contiguous ``(s, out, r)`` view of the layer's buffer, allocated by the first (the
        largest) block: blocks write their outputs in place instead of new tensors."""
        size = s * self.units * r
        if self.buffer is None or self.buffer.numel() < size:
            self.buffer = like.new_empty(size)
        return self.buffer[:size].view(s, self.units, r)

    def widen(self, num: int) -> None:
        """For a first layer: the weights as one ``(S·out, in)`` matrix (sample s's units in
        rows ``s·out ...``) and the biases as an ``(S·out, 1)`` column."""
        w, b = self.weight, self.bias
        if w.dim() == 2 and (b is None or b.dim() == 1):
            return  # shared: one product for every sample
        w = w if w.dim() == 3 else w.expand(num, *w.shape)
        self.wide = w.reshape(num * self.units, w.shape[2])
        if b is not None:
            b = b if b.dim() == 2 else b.expand(num, self.units)
            self.flat_bias = b.reshape(-1, 1)

    def first(self, xr: torch.Tensor, s0: int, s1: int) -> torch.Tensor:
        """``(s, out, r)`` for the rows ``xr (r, in)`` shared by samples ``s0:s1``."""
        s, units = s1 - s0, self.units
        out = self.space(s, xr.shape[0], xr)
        if self.wide is None:
            h = F.linear(xr, self.weight, self.bias).T
            return out.copy_(h.expand(s, *h.shape))
        rows = self.wide[s0 * units : s1 * units]
        flat = out.view(s * units, xr.shape[0])
        if self.flat_bias is None:
            torch.mm(rows, xr.T, out=flat)
        else:
            torch.addmm(self.flat_bias[s0 * units : s1 * units], rows, xr.T, out=flat)
        return out

    def later(self, h: torch.Tensor, s0: int, s1: int) -> torch.Tensor:
        """``(s, out, r)`` from the previous layer's ``h (s, in, r)``."""
        w, b = self.weight, self.bias
        s = s1 - s0
        w = w.expand(s, *w.shape) if w.dim() == 2 else w[s0:s1]
        out = self.space(s, h.shape[2], h)
        if b is None:
            return torch.bmm(w, h, out=out)
        bias = b[s0:s1] if b.dim() == 2 else b.expand(s, b.shape[-1])
        return torch.baddbmm(bias.unsqueeze(2), w, h, out=out)
