"""Run a torch net once for S stacked parameter sets, without a loop and without vmap when the
net's layers allow it.

``torch.func.vmap`` + ``functional_call`` works for any net but, on a CPU, it runs a linear
layer as S small matrix products plus a separate bias add. A *twin* of the net whose
``nn.Linear``/``nn.Conv2d`` layers are the sample-dimension-aware layers of
:mod:`bnn_pyro.nn.layers` takes ``(S, out, in)`` weights directly: the first layer becomes one
wide GEMM for all S parameter sets. Whether the twin computes exactly what vmap computes is
checked once per net on a small probe; if not (pooling, flatten, reshapes on the batch dim...),
the twin is tried once more with the samples folded into the batch dim
(:mod:`bnn_pyro.nn.folding`, ``BatchedTwin.fold``), and if that does not match either, vmap is
used.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable, Mapping

import torch
import torch.nn as nn
from torch.func import functional_call, vmap

from bnn_pyro._checks import check_int
from bnn_pyro._rows import fill_rows
from bnn_pyro.nn.folding import folded_call, needs_folded_input
from bnn_pyro.nn.layers import BATCHED_REPLACEMENTS

__all__ = [
    "BatchedTwin",
    "StackedCall",
    "chunk_rows",
    "device_budget",
    "distinct_probe",
    "has_hooks",
    "same_results",
]

# Elements of one (S, rows, width) activation per pass: 256K floats (1 MB), so memory stays
# bounded whatever N is. The size trades the two costs of a pass: much smaller blocks pay Python
# overhead per pass, much larger ones fresh pages of memory on every pass (the timings behind it:
# benchmarks/results/library_measurements.md).
ACTIVATION_BUDGET = 1 << 18
#: A GPU's budgets are this many times a CPU's. A GPU has no cache for a block to stay inside;
#: what costs there is a kernel launch (microseconds) per layer per block, so a block should
#: stream tens of MB (tens of microseconds at a few TB/s) to make the launches few, while memory
#: stays bounded by the block, not by N × S (128 MB per float32 activation at the CPU's 1 MB).
GPU_BUDGET_SCALE = 128
#: ... and at most this many elements (256 MB in float32), so a block fits a small GPU too.
GPU_BUDGET_MAX = 1 << 26


def device_budget(budget: int, device: torch.device | str | None) -> int:
    """``budget`` (elements per block, a CPU's) for ``device``: times :data:`GPU_BUDGET_SCALE`
    (at most :data:`GPU_BUDGET_MAX`) on a CUDA device, unchanged elsewhere.

    Example:
        >>> device_budget(1000, "cpu"), device_budget(1000, torch.device("cuda"))
        (1000, 128000)
        >>> device_budget(1 << 22, "cuda") == GPU_BUDGET_MAX
        True
        >>> device_budget(0, "cpu")
        Traceback (most recent call last):
          ...
        ValueError: budget must be an int >= 1, got 0
    """
    budget = check_int("budget", budget)
    if device is None or torch.device(device).type != "cuda":
        return budget
    return min(budget * GPU_BUDGET_SCALE, max(budget, GPU_BUDGET_MAX))


def chunk_rows(
    net: nn.Module,
    num_samples: int,
    budget: int = ACTIVATION_BUDGET,
    device: torch.device | None = None,
) -> int:
    """Rows per pass so that one ``(num_samples, rows, widest layer)`` activation fits ``budget``
    elements (at least 8 rows), the budget scaled for ``device`` (:func:`device_budget`).

    Example:
        >>> chunk_rows(nn.Sequential(nn.Linear(13, 50), nn.ReLU(), nn.Linear(50, 1)), 100)
        52
    """
    widths = [m.out_features for m in net.modules() if isinstance(m, nn.Linear)]
    widths += [m.out_channels for m in net.modules() if isinstance(m, nn.modules.conv._ConvNd)]
    budget = device_budget(budget, device)
    return max(8, budget // (max(1, num_samples) * max(widths or [1024])))


def batched_class(cls: type[nn.Module]) -> type[nn.Module] | None:
    """The class a twin gives a layer of class ``cls`` so that it takes weights with leading
    sample dimensions (``None``: the layer is kept as it is). A layer with a parametrized weight
    (``torch.nn.utils.parametrize``: ``Parametrized<Layer>``, a subclass made for it) keeps its
    parametrization over the batched layer.

    Example:
        >>> batched_class(nn.Linear).__module__
        'bnn_pyro.nn.layers'
        >>> from torch.nn.utils import parametrize
        >>> layer = nn.Linear(2, 2)
        >>> _ = parametrize.register_parametrization(layer, "weight", nn.Identity())
        >>> [c.__name__ for c in batched_class(type(layer)).__mro__[:3]]
        ['ParametrizedLinear', 'ParametrizedLinear', 'Linear']
    """
    replacement = BATCHED_REPLACEMENTS.get(cls)
    if replacement is not None or cls.__module__ != "torch.nn.utils.parametrize":
        return replacement
    base = BATCHED_REPLACEMENTS.get(cls.__bases__[0]) if len(cls.__bases__) == 1 else None
    if base is None:
        return None
    if cls not in _PARAMETRIZED:
        _PARAMETRIZED[cls] = type(cls.__name__, (cls, base), {})
    return _PARAMETRIZED[cls]


#: The batched classes made for parametrized layers, one per class.
_PARAMETRIZED: dict[type[nn.Module], type[nn.Module]] = {}


class BatchedTwin:
    """A plain-torch copy of a net whose linear/conv layers take leading sample dims, and whose
    tensors are set per call.

    ``run(tensors, stacked, x, chunk)`` gives the twin the caller's tensors by name — ``tensors``
    (parameters and buffers shared as they are, e.g. a trained net's point estimates) and
    ``stacked`` (``(S, *shape)`` sample tensors, set as plain attributes) — once, then runs
    ``chunk`` rows at a time. The twin's own copied values are never used, so it cannot go
    stale while the original keeps training. With ``fold`` set, ``run`` folds the S samples into
    the batch dim (:func:`~bnn_pyro.nn.folding.folded_call`), for nets that flatten or reshape;
    ``load`` leaves the module as it is, for callers that pass ``(S, N, ...)`` inputs themselves.

    Args:
        net: the net to copy (plain torch; its parameters are copied once, then replaced).
        stacked_names: the dotted names (``"0.weight"``) that will come stacked.
        fold: the initial ``fold`` (default ``False``).

    Example:
        >>> net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
        >>> twin = BatchedTwin(net, ["0.weight", "2.weight"])
        >>> stacked = {"0.weight": torch.randn(5, 4, 3), "2.weight": torch.randn(5, 2, 4)}
        >>> rest = {"0.bias": net[0].bias, "2.bias": net[2].bias}
        >>> twin.run(rest, stacked, torch.randn(7, 3), chunk=4).shape
        torch.Size([5, 7, 2])
    """

    def __init__(self, net: nn.Module, stacked_names: list[str], fold: bool = False) -> None:
        self.fold = fold
        self.module = copy.deepcopy(net)
        for module in self.module.modules():
            replacement = batched_class(type(module))
            if replacement is not None:
                module.__class__ = replacement
        self._by_name = dict(self.module.named_modules())
        self.stacked_names = list(stacked_names)
        for name in self.stacked_names:
            path, _, attr = name.rpartition(".")
            module = self._by_name[path]
            module._parameters.pop(attr, None)
            module._buffers.pop(attr, None)

    def load(
        self,
        tensors: Mapping[str, torch.Tensor],
        stacked: Mapping[str, torch.Tensor],
        training: bool | None = None,
    ) -> nn.Module:
        """Set the tensors on the twin (``tensors`` shared, ``stacked`` as attributes) and, where
        ``training`` is given, its mode (its dropout layers): the twin is copied in whatever mode
        its net had then."""
        if training is not None and any(m.training != training for m in self._by_name.values()):
            self.module.train(training)
        for name, tensor in tensors.items():
            path, _, attr = name.rpartition(".")
            module = self._by_name[path]
            if attr in module._parameters:
                module._parameters[attr] = tensor
            elif attr in module._buffers:
                module._buffers[attr] = tensor
        for name in self.stacked_names:
            path, _, attr = name.rpartition(".")
            self._by_name[path].__dict__[attr] = stacked[name]
        return self.module

    def run(
        self,
        tensors: Mapping[str, torch.Tensor],
        stacked: Mapping[str, torch.Tensor],
        x: torch.Tensor,
        chunk: int | None = None,
        training: bool = False,
    ) -> torch.Tensor:
        """``(S, N, ...)`` outputs for the ``(N, ...)`` inputs ``x``, ``chunk`` rows per pass."""
        module = self.load(tensors, stacked, training)
        if self.fold and stacked:
            samples = next(iter(stacked.values())).shape[:1]
            samples = samples if needs_folded_input(module) else None
            return fill_rows(
                lambda a, b: folded_call(module, x[a:b], samples), x.shape[0], chunk or x.shape[0]
            )
        return fill_rows(lambda a, b: module(x[a:b]), x.shape[0], chunk or x.shape[0])


def has_hooks(net: nn.Module) -> bool:
    """Whether forward or backward hooks would see ``net``'s modules run (a twin, which runs
    copies of them, would not call them), counting torch's global module hooks.

    Example:
        >>> net = nn.Linear(2, 1)
        >>> has_hooks(net)
        False
        >>> _ = net.register_forward_hook(lambda module, inputs, output: None)
        >>> has_hooks(net)
        True
    """
    from torch.nn.modules import module as torch_module

    global_hooks = (
        torch_module._global_forward_hooks,
        torch_module._global_forward_pre_hooks,
        torch_module._global_backward_hooks,
    )
    if any(global_hooks):
        return True
    return any(
        m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks
        for m in net.modules()
    )


def distinct_probe(stacked: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Two different parameter sets from the first one (the second's floats halved), to check a
    batched path against vmap: ``{name: (S, *shape)}`` in, ``{name: (2, *shape)}`` out.

    Example:
        >>> distinct_probe({"w": torch.ones(5, 3)})["w"]
        tensor([[1.0000, 1.0000, 1.0000],
                [0.5000, 0.5000, 0.5000]])
    """
    out = {}
    for k, v in stacked.items():
        v = v[:1].expand(2, *v.shape[1:]) + 0
        if v.is_floating_point():
            v = v * torch.tensor([1.0, 0.5], dtype=v.dtype, device=v.device).view(
                -1, *[1] * (v.dim() - 1)
            )
        out[k] = v
    return out


def same_results(fast: Callable[[], torch.Tensor], reference: Callable[[], torch.Tensor]) -> bool:
    """Whether ``fast()`` runs and matches ``reference()`` (shape, and values to 1e-4).

    Example:
        >>> same_results(lambda: torch.ones(2), lambda: torch.ones(2))
        True
    """
    expected = reference()
    try:
        got = fast()
    except (RuntimeError, ValueError, IndexError, TypeError, KeyError):
        return False
    return got.shape == expected.shape and bool(torch.allclose(got, expected, rtol=1e-4, atol=1e-5))


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
        self._twins: weakref.WeakKeyDictionary[nn.Module, dict] = weakref.WeakKeyDictionary()

    @staticmethod
    def vmapped(net: nn.Module, stacked: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """The reference: ``vmap`` over the leading dim of ``stacked``."""

        def call(params: dict[str, torch.Tensor]) -> torch.Tensor:
            return functional_call(net, params, (x,))

        return vmap(call)(stacked)

    @staticmethod
    def _shared(net: nn.Module, stacked: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        named = {**dict(net.named_parameters()), **dict(net.named_buffers())}
        return {k: v for k, v in named.items() if k not in stacked}

    def _usable_twin(
        self, net: nn.Module, stacked: dict[str, torch.Tensor], x: torch.Tensor
    ) -> BatchedTwin | None:
        per_net = self._twins.setdefault(net, {})
        key = tuple(sorted(stacked))
        if key not in per_net:
            twin = BatchedTwin(net, list(key))
            probe = distinct_probe(stacked)
            with torch.no_grad():
                expected = self.vmapped(net, probe, x[:3])
                ok = False
                for fold in (False, True):  # as it is, then with the samples folded
                    twin.fold = fold
                    ok = same_results(
                        lambda: twin.run(
                            self._shared(net, probe), probe, x[:3], None, net.training
                        ),
                        lambda: expected,
                    )
                    if ok:
                        break
            per_net[key] = twin if ok else None
        return per_net[key]

    def __call__(
        self, net: nn.Module, stacked: dict[str, torch.Tensor], x: torch.Tensor
    ) -> torch.Tensor:
        twin = self._usable_twin(net, stacked, x)
        if twin is None:
            return self.vmapped(net, stacked, x)
        chunk = chunk_rows(net, next(iter(stacked.values())).shape[0], device=x.device)
        return twin.run(self._shared(net, stacked), stacked, x, chunk, net.training)
