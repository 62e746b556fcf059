"""Run a torch net once for S stacked parameter sets, without a loop and without vmap when the
net's layers allow it.

``torch.func.vmap`` + ``functional_call`` works for any net but, on a CPU, it runs a linear
layer as S small matrix products plus a separate bias add. A *twin* of the net whose
``nn.Linear``/``nn.Conv2d`` layers are the sample-dimension-aware layers of
:mod:`bnn_pyro.nn.layers` takes ``(S, out, in)`` weights directly: the first layer becomes one
wide GEMM for all S parameter sets. Whether the twin computes exactly what vmap computes is
checked once per net on a small probe; if not (pooling, flatten, reshapes on the batch dim...),
vmap is used.
"""

from __future__ import annotations

import copy
import weakref

import torch
import torch.nn as nn
from torch.func import functional_call, vmap

from bnn_pyro.nn.layers import BATCHED_REPLACEMENTS

__all__ = ["StackedCall", "chunk_rows"]

# Elements of one (S, rows, width) activation per pass: 64K floats (256 KB), so a pass stays in
# a core's cache. Larger blocks are slower on a CPU, not faster (S=100, N=1000, width 50,
# measured side by side: 8 ms in 256 KB blocks, 17-20 ms in 1 MB blocks, 40 ms in one block),
# and memory stays bounded whatever N is.
ACTIVATION_BUDGET = 1 << 16


def chunk_rows(net: nn.Module, num_samples: int, budget: int = ACTIVATION_BUDGET) -> int:
    """Rows per pass so that one ``(num_samples, rows, widest layer)`` activation fits ``budget``
    elements (at least 8 rows).

    Example:
        >>> chunk_rows(nn.Sequential(nn.Linear(13, 50), nn.ReLU(), nn.Linear(50, 1)), 100)
        13
    """
    widths = [m.out_features for m in net.modules() if isinstance(m, nn.Linear)]
    widths += [m.out_channels for m in net.modules() if isinstance(m, nn.modules.conv._ConvNd)]
    return max(8, budget // (max(1, num_samples) * max(widths or [1024])))


def _twin(net: nn.Module) -> nn.Module:
    twin = copy.deepcopy(net)
    for module in twin.modules():
        replacement = BATCHED_REPLACEMENTS.get(type(module))
        if replacement is not None:
            module.__class__ = replacement
    return twin


class StackedCall:
    """``call(net, stacked, x) -> (S, N, ...)``: ``net(x)`` once per stacked parameter set.

    Args (of ``__call__``):
        net: the net, in the mode the caller wants (its mode is copied to the twin).
        stacked: ``{name: (S, *shape)}`` parameters or buffers; the others keep the net's values.
        x: ``(N, ...)`` inputs shared by the S calls.

    Example:
        >>> net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
        >>> stacked = {k: torch.stack([v, 2 * v]) for k, v in net.named_parameters()}
        >>> StackedCall()(net, stacked, torch.randn(5, 3)).shape
        torch.Size([2, 5, 2])
    """

    def __init__(self) -> None:
        self._twins: weakref.WeakKeyDictionary[nn.Module, nn.Module | None] = (
            weakref.WeakKeyDictionary()
        )

    @staticmethod
    def vmapped(net: nn.Module, stacked: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """The reference: ``vmap`` over the leading dim of ``stacked``."""

        def call(params: dict[str, torch.Tensor]) -> torch.Tensor:
            return functional_call(net, params, (x,))

        return vmap(call)(stacked)

    def _usable_twin(self, net: nn.Module, stacked: dict[str, torch.Tensor], x: torch.Tensor):
        if net in self._twins:
            return self._twins[net]
        twin = _twin(net)
        probe = {k: v[:1].expand(2, *v.shape[1:]) + 0 for k, v in stacked.items()}
        probe = {
            k: v * torch.tensor([1.0, 0.5], dtype=v.dtype).view(-1, *[1] * (v.dim() - 1))
            if v.is_floating_point()
            else v
            for k, v in probe.items()
        }
        try:
            with torch.no_grad():
                reference = self.vmapped(net, probe, x[:3])
                twin.train(net.training)
                fast = functional_call(twin, self._full(net, probe), (x[:3],))
            ok = fast.shape == reference.shape and bool(
                torch.allclose(fast, reference, rtol=1e-4, atol=1e-5)
            )
        except (RuntimeError, ValueError, IndexError, TypeError):
            ok = False
        self._twins[net] = twin if ok else None
        return self._twins[net]

    @staticmethod
    def _full(net: nn.Module, stacked: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        # every parameter and buffer passed explicitly: the twin's own (copied) values are never
        # used, so it cannot go stale when the net keeps training
        return {**dict(net.named_parameters()), **dict(net.named_buffers()), **stacked}

    def __call__(
        self, net: nn.Module, stacked: dict[str, torch.Tensor], x: torch.Tensor
    ) -> torch.Tensor:
        twin = self._usable_twin(net, stacked, x)
        if twin is None:
            return self.vmapped(net, stacked, x)
        twin.train(net.training)
        full = self._full(net, stacked)
        chunk = chunk_rows(net, next(iter(stacked.values())).shape[0])
        if chunk >= x.shape[0]:
            return functional_call(twin, full, (x,))
        return torch.cat(
            [functional_call(twin, full, (x[i : i + chunk],)) for i in range(0, len(x), chunk)],
            dim=1,
        )
