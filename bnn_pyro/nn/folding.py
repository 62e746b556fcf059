"""A net run on weights with leading sample dims, with those dims folded into the batch dim.

Under ``Predictive(parallel=True)``, vectorized ELBO particles or a stack of posterior draws, the
Bayesian layers get weights of shape ``(*S, out, in)``. Were every activation then
``(*S, B, ...)``, the net's own reshapes would count the sample dims as features: ``nn.Flatten()``,
``nn.Unflatten(1, ...)``, ``x.view(x.size(0), -1)``, ``x.flatten(1)``, a ``MaxPool2d`` that takes
4-D inputs only. Inside :func:`folded_call` the net runs on ``n * B`` rows instead,
``n = prod(S)``, row ``s * B + b`` holding row ``b`` under sample ``s``: every op of its forward
sees a plain batch of the rank it was written for. A layer with sampled weights
(:class:`bnn_pyro.nn.Linear`, :class:`bnn_pyro.nn.Conv2d`) unfolds its input to ``(*S, B, ...)``
(:meth:`SampleFold.unfold`), computes, and folds its output again (:meth:`SampleFold.fold`);
:func:`folded_call` unfolds the net's output to ``(*S, B, ...)``.

When the sample shape is known before the pass (the plates around a Pyro model, the stacked
tensors of a twin) and the net's ``forward`` is user code (:func:`needs_folded_input`), the
input itself is folded: ``x`` repeated to ``n * B`` rows, so that a
``forward`` that reads ``x.size(0)`` or adds ``x`` to an activation sees the rows the activations
have. A layer that takes that input as it is gets the ``B`` rows once, shared by every sample (one
matrix product for all samples). Otherwise (a chain of torch layers, or weights conditioned on
stacked values with no plate) the input stays ``B`` rows, shared, and only the activations are
folded; a
``forward`` that combines ``x`` with an activation then fails in torch for ``B > 1``, and
:func:`folded_call` adds a note naming the cause to that error. An op that mixes rows
(``x.mean(0)``) mixes samples either way.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
from pyro.poutine.runtime import get_plates

__all__ = [
    "ELEMENTWISE",
    "SampleFold",
    "active_fold",
    "folded_call",
    "in_pass",
    "keeps_sample_dims",
    "needs_folded_input",
    "plate_sample_shape",
]

#: Layers that act elementwise or on the trailing dims alone, whatever the input's rank: between
#: linear layers they take ``(*S, B, ...)`` activations as they are (:func:`keeps_sample_dims`).
ELEMENTWISE: tuple[type[nn.Module], ...] = (
    nn.Identity,
    nn.Dropout,
    nn.LayerNorm,
    nn.ReLU,
    nn.ReLU6,
    nn.LeakyReLU,
    nn.ELU,
    nn.GELU,
    nn.SiLU,
    nn.Mish,
    nn.Tanh,
    nn.Sigmoid,
    nn.Softplus,
    nn.Softsign,
    nn.Hardtanh,
)

_STATE = threading.local()


def _squeezed(shape: torch.Size) -> tuple[int, ...]:
    return tuple(d for d in shape if d != 1)


@dataclass
class SampleFold:
    """The fold of one forward pass: ``batch`` rows ``B``; ``sample_shape``, the sample dims
    ``S`` its layers found on their weights (``None`` until a layer with sampled weights ran);
    ``expected``, the sample dims known before the pass, and then ``shared`` and ``folded``,
    the net's input as given (``(B, ...)``) and repeated to ``(n * B, ...)``.

    Example:
        >>> fold = SampleFold(batch=3)
        >>> h = fold.fold(torch.zeros(2, 3, 5), torch.Size([2]))  # (S, B, 5) -> (S * B, 5)
        >>> h.shape, fold.unfold(h, torch.Size([2])).shape
        (torch.Size([6, 5]), torch.Size([2, 3, 5]))
        >>> fold.unfold(torch.zeros(3, 5), torch.Size([2])).shape  # shared by every sample
        torch.Size([3, 5])
    """

    batch: int
    sample_shape: torch.Size | None = None
    expected: torch.Size | None = None
    shared: torch.Tensor | None = None
    folded: torch.Tensor | None = None

    @property
    def num_samples(self) -> int:
        """``n = prod(S)`` (1 while no sample dims are known)."""
        shape = self.sample_shape if self.sample_shape is not None else self.expected
        return math.prod(shape) if shape is not None else 1

    def record(self, sample_shape: torch.Size) -> int:
        """Note a layer's sample dims ``S`` and return ``prod(S)``. Every layer of a pass must
        have the same (up to dims of size 1), and the ones expected if any: a ``ValueError``
        otherwise."""
        sample_shape = torch.Size(sample_shape)
        known = self.sample_shape if self.sample_shape is not None else self.expected
        if known is not None and _squeezed(sample_shape) != _squeezed(known):
            raise ValueError(
                f"a layer's weights carry the sample dims {tuple(sample_shape)}, but the net runs "
                f"on {tuple(known)} (the plates around it, or its other layers)"
            )
        if self.sample_shape is None:
            self.sample_shape = sample_shape
        return math.prod(sample_shape)

    def unfold(self, x: torch.Tensor, sample_shape: torch.Size) -> torch.Tensor:
        """A layer's input for its weights of sample dims ``S``: folded rows ``(n * B, ...)`` as
        ``(*S, B, ...)``; the net's own input, or ``(B, ...)`` rows, as ``(B, ...)`` (shared by
        every sample)."""
        n = self.record(sample_shape)
        if self.folded is not None and x is self.folded:
            return self.shared
        rows = x.shape[0] if x.dim() else None
        if rows == n * self.batch:
            return x.reshape(*sample_shape, self.batch, *x.shape[1:])
        if rows == self.batch:
            return x
        raise ValueError(
            f"a layer with {n} weight samples got an input of shape {tuple(x.shape)}: with the "
            f"samples folded into the batch of {self.batch} rows, it takes {n * self.batch} rows "
            f"or {self.batch} (shared by every sample)"
        )

    def fold(self, out: torch.Tensor, sample_shape: torch.Size) -> torch.Tensor:
        """A layer's output ``(*S, B, ...)`` as ``(n * B, ...)`` rows."""
        lead = len(sample_shape) + 1
        return out.reshape(math.prod(out.shape[:lead]), *out.shape[lead:])

    def unfold_output(self, out: Any) -> Any:
        """The net's output: ``(n * B, ...)`` as ``(*S, B, ...)``, ``(B, ...)`` (no sampled
        weight reached it) as it is; tuples, lists and dicts element by element."""
        if isinstance(out, (tuple, list)):
            return type(out)(self.unfold_output(o) for o in out)
        if isinstance(out, dict):
            return {k: self.unfold_output(v) for k, v in out.items()}
        shape = self.sample_shape if self.sample_shape is not None else self.expected
        if shape is None or not isinstance(out, torch.Tensor):
            return out
        n = self.num_samples
        rows = out.shape[0] if out.dim() else None
        if rows == n * self.batch:
            return out.reshape(*shape, self.batch, *out.shape[1:])
        if rows == self.batch and self.folded is None:
            return out
        raise ValueError(
            f"the net's output has shape {tuple(out.shape)}: with {n} weight samples folded into "
            f"the batch of {self.batch} rows its rows must stay rows ({n * self.batch} of them)"
        )


def plate_sample_shape() -> torch.Size | None:
    """The leading sample dims ``S`` that a global weight site drawn here gets from the
    enclosing plates (after :func:`~bnn_pyro.nn.layers.sample_dims` drops the data dim's
    placeholder), or ``None`` outside any vectorized plate.

    Example:
        >>> import pyro
        >>> plate_sample_shape() is None
        True
        >>> with pyro.plate("samples", 4, dim=-2):  # Predictive(parallel=True)'s layout
        ...     plate_sample_shape()
        torch.Size([4])
    """
    frames = [f for f in get_plates() if f.vectorized]
    if not frames:
        return None
    shape = [1] * max(-f.dim for f in frames)
    for f in frames:
        shape[f.dim] = f.size
    if shape[-1] == 1:
        shape.pop()
    return torch.Size(shape)


def _is_layer(module: nn.Module, kinds: tuple[type[nn.Module], ...]) -> bool:
    forward = type(module).forward
    return any(isinstance(module, k) and forward is k.forward for k in kinds)


def keeps_sample_dims(net: nn.Module) -> bool:
    """Whether ``net`` is a ``Sequential`` (nested ones too) of linear layers and
    :data:`ELEMENTWISE` layers, an MLP: it runs on weights with sample dims as it is, its
    activations ``(*S, B, ...)``, and needs no fold (a fold would cost a copy of the first
    layer's output).

    Example:
        >>> keeps_sample_dims(torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU()))
        True
        >>> keeps_sample_dims(torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Flatten()))
        False
    """
    if not _is_layer(net, (nn.Sequential,)):
        return False
    for module in net.children():
        linear = isinstance(module, nn.Linear) and (
            type(module).forward.__module__ == "bnn_pyro.nn.layers"
            or _is_layer(module, (nn.Linear,))
        )
        if not (linear or _is_layer(module, ELEMENTWISE) or keeps_sample_dims(module)):
            return False
    return True


def needs_folded_input(net: nn.Module) -> bool:
    """Whether ``net``'s forward may read its input other than through its first layer: some
    module of it runs a ``forward`` that is neither a ``Sequential``'s nor a torch or
    :mod:`bnn_pyro.nn.layers` layer's without submodules (user code, a torch block with inner
    residuals). Only then is the input repeated to the folded rows, a copy of ``n`` times ``x``.

    Example:
        >>> needs_folded_input(torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.Flatten()))
        False
        >>> class Skip(torch.nn.Module):
        ...     def forward(self, x: torch.Tensor) -> torch.Tensor:
        ...         return x + torch.tanh(x)
        >>> needs_folded_input(torch.nn.Sequential(Skip()))
        True
    """
    for module in net.modules():
        forward = type(module).forward
        if forward is nn.Sequential.forward:
            continue
        layer = forward.__module__.startswith("torch.nn.modules.") or (
            forward.__module__ == "bnn_pyro.nn.layers"
        )
        if not layer or next(module.children(), None) is not None:
            return True
    return False


def active_fold() -> SampleFold | None:
    """The fold of the forward pass running in this thread, or ``None`` outside a folded
    :func:`folded_call` (the layers then take ``(*S, B, ...)`` inputs as they are).

    Example:
        >>> active_fold() is None
        True
        >>> folded_call(lambda x: active_fold().batch, torch.zeros(5, 2))
        5
    """
    fold = getattr(_STATE, "fold", None)
    return fold if isinstance(fold, SampleFold) else None


def in_pass() -> bool:
    """Whether a :func:`folded_call` runs in this thread, folded or not: a net's submodules,
    called inside it, start no pass of their own.

    Example:
        >>> in_pass(), folded_call(lambda x: in_pass(), torch.zeros(5, 2), fold=False)
        (False, True)
    """
    return getattr(_STATE, "fold", None) is not None


def folded_call(
    fn: Callable[[torch.Tensor], Any],
    x: torch.Tensor,
    sample_shape: torch.Size | None = None,
    fold: bool = True,
) -> Any:
    """``fn(x)`` with the weights' sample dims folded into the batch dim of ``x``.

    Inside a pass (a net calling its submodules) this is ``fn(x)`` itself; so is it, as one
    pass, with ``fold=False`` or a 1-D ``x`` (one row, no batch dim): the layers then take the
    sample dims as leading dims.

    Args:
        fn: a net (or any callable of its batch).
        x: ``(B, *features)``, the same for every weight sample.
        sample_shape: the weights' sample dims ``S``, where known before the pass: ``x`` is then
            repeated to ``(n * B, *features)`` for ``fn``. ``None``: found by the layers, ``x``
            passed as it is (see the module docstring).
        fold: ``False`` runs ``fn(x)`` unfolded (an MLP, :func:`keeps_sample_dims`).

    Returns:
        What ``fn`` returns, each tensor with the weights' sample dims in front:
        ``(*S, B, ...)``; unchanged where no sample dims were found.

    Example:
        >>> from bnn_pyro.nn.layers import Linear
        >>> net = torch.nn.Sequential(Linear(3, 8), torch.nn.Unflatten(1, (2, 4)),
        ...                           torch.nn.Flatten(), Linear(8, 2))
        >>> net[0].weight = torch.nn.Parameter(torch.randn(5, 8, 3))  # 5 samples of its weight
        >>> folded_call(net, torch.randn(7, 3)).shape
        torch.Size([5, 7, 2])
        >>> folded_call(net, torch.randn(7, 3), torch.Size([5])).shape
        torch.Size([5, 7, 2])
    """
    if in_pass():
        return fn(x)
    if not fold or x.dim() < 2:
        _STATE.fold = _UNFOLDED
        try:
            return fn(x)
        finally:
            _STATE.fold = None
    state = SampleFold(batch=x.shape[0])
    if sample_shape is not None and math.prod(sample_shape) > 1:
        n = math.prod(sample_shape)
        state.expected, state.shared = torch.Size(sample_shape), x
        x = state.folded = x.unsqueeze(0).expand(n, *x.shape).reshape(n * x.shape[0], *x.shape[1:])
    _STATE.fold = state
    try:
        out = fn(x)
    except RuntimeError as err:
        if state.num_samples > 1:
            err.add_note(_note(state))
        raise
    finally:
        _STATE.fold = None
    return state.unfold_output(out)


#: The state of a pass that runs unfolded.
_UNFOLDED = object()


def _note(fold: SampleFold) -> str:
    """What a torch error inside a folded pass may come from."""
    n, b = fold.num_samples, fold.batch
    note = (
        f"(the net ran with {n} weight samples folded into its batch dim: {n * b} rows for a "
        f"batch of {b}, see bnn_pyro.nn.folding"
    )
    if fold.folded is not None:
        return note + ")"
    return note + (
        f"; its input x stayed {b} rows, shared by the samples: combining x with an activation "
        "needs the samples' plate around the call (as in Predictive(parallel=True)) or one "
        "sample at a time (Predictive(parallel=False)))"
    )
