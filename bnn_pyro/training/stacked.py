"""K models of one architecture trained as one stacked model, in one pass of the one loop.

A small net's training step is mostly fixed cost per call (Python, the optimizer, autograd's
bookkeeping), paid once per model when K models train one after the other. Stacked, member
``k``'s tensors are slice ``k`` of ``(K, *shape)`` parameters and the net runs once on a
``(K, B, ...)`` block of minibatches, one per member (a plain-torch twin whose linear/conv
layers take leading sample dimensions, :class:`~bnn_pyro.nn.batched.BatchedTwin`). The loss is
the sum of the members' mean losses, so slice ``k`` of every gradient is member ``k``'s own
gradient; an elementwise optimizer (Adam, AdamW, SGD, RMSprop, ...) then moves each slice as
it would move that member alone, with its own state. Each member draws its minibatch order
from a generator seeded as its one-by-one run would be seeded, so the result is the one-by-one
result up to float rounding (tested).

Covered: nets whose forward is deterministic, or random through ``nn.Dropout`` layers only
(given the members' generators, each member's masks come from its own), that hold no buffers
(batch norm's running statistics would be shared) except those of modules that take them
stacked (``stacks_buffers = True``: SNGP's spectral bound, each member's power iteration its
own), and carry no hooks, checked on a probe against the members' own forward passes.
:func:`stackable` says why a net is not.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn as nn
from torch.func import stack_module_state

from bnn_pyro._checks import check_module
from bnn_pyro.nn.batched import BatchedTwin, has_hooks
from bnn_pyro.nn.modes import modes
from bnn_pyro.training.member_dropout import swap_member_dropout

__all__ = [
    "ELEMENTWISE_OPTIMIZERS",
    "StackedModels",
    "copy_slices",
    "elementwise_optimizer",
    "member_tensors",
    "same_layers",
    "stackable",
]

#: Optimizers whose update of an element depends on that element's own gradient history only:
#: on stacked parameters they move each member's slice as they would move the member alone.
ELEMENTWISE_OPTIMIZERS = (
    torch.optim.Adam,
    torch.optim.AdamW,
    torch.optim.SGD,
    torch.optim.RMSprop,
    torch.optim.Adagrad,
    torch.optim.Adamax,
    torch.optim.NAdam,
    torch.optim.RAdam,
)

_RANDOM_LAYERS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout)


def elementwise_optimizer(spec: Any) -> bool:
    """Whether the optimizer spec of a ``fit`` (see :func:`bnn_pyro.training.make_optimizer`)
    builds an elementwise optimizer: ``None``, ``"adam"``, ``"sgd"`` or one of
    :data:`ELEMENTWISE_OPTIMIZERS` (instances and factories are not known to be).

    Example:
        >>> elementwise_optimizer("adam"), elementwise_optimizer(torch.optim.LBFGS)
        (True, False)
    """
    if spec is None or (isinstance(spec, str) and spec in ("adam", "sgd")):
        return True
    return isinstance(spec, type) and issubclass(spec, ELEMENTWISE_OPTIMIZERS)


def same_layers(nets: Sequence[nn.Module]) -> bool:
    """Whether ``nets`` (K >= 1 modules) are built of the same layers: a layer of the same
    type in each place, and the same settings (``extra_repr``) for each layer without tensors
    of its own. A stacked or vmapped call runs the first net's ``forward`` with every net's
    parameters, so nets that differ in such a layer (an activation, a dropout rate) cannot
    share one, though their parameters stack. (The layers with tensors are compared by their
    shapes, where the tensors are stacked; their ``extra_repr`` is not read: it may show a
    tensor's value, and on a Pyro net it would draw the weights from the prior.)

    Example:
        >>> tanh = nn.Sequential(nn.Linear(1, 2), nn.Tanh())
        >>> same_layers([tanh, nn.Sequential(nn.Linear(1, 2), nn.Tanh())])
        True
        >>> same_layers([tanh, nn.Sequential(nn.Linear(1, 2), nn.ReLU())])
        False
        >>> same_layers([nn.Dropout(0.1), nn.Dropout(0.2)])
        False
        >>> same_layers([])
        Traceback (most recent call last):
          ...
        ValueError: nets must hold at least one net, got none
    """
    if not nets:
        raise ValueError("nets must hold at least one net, got none")
    for i, net in enumerate(nets):
        check_module(f"nets[{i}]", net)
    first = _layers(nets[0])
    return all(_layers(net) == first for net in nets[1:])


def _layers(net: nn.Module) -> list[tuple[str, str, str | None]]:
    """Each submodule's name, type name and, for one without parameters, buffers or Pyro sites
    of its own, its settings."""
    layers = []
    for name, module in net.named_modules():
        own = (
            any(True for _ in module.parameters(recurse=False))
            or any(True for _ in module.buffers(recurse=False))
            or any(getattr(module, key, None) for key in ("_pyro_samples", "_pyro_params"))
        )
        kind = type(module)  # by name: a parametrized layer's class is made per instance
        layers.append(
            (name, f"{kind.__module__}.{kind.__qualname__}", None if own else module.extra_repr())
        )
    return layers


def stackable(nets: list[nn.Module], dropout: bool = False) -> str | None:
    """``None`` when ``nets`` can train stacked, else the reason they cannot; ``dropout``: their
    ``nn.Dropout`` layers will draw each member's masks from its own generator.

    Example:
        >>> stackable([nn.Linear(2, 1), nn.Linear(2, 1)]) is None
        True
        >>> stackable([nn.Linear(2, 1), nn.Linear(3, 1)])
        'the members differ in their parameters (names or shapes)'
    """
    if len(nets) < 2:
        return "fewer than two members"
    shapes = [[(k, v.shape, v.dtype, v.device) for k, v in n.named_parameters()] for n in nets]
    if any(s != shapes[0] for s in shapes[1:]) or any(type(n) is not type(nets[0]) for n in nets):
        return "the members differ in their parameters (names or shapes)"
    if not same_layers(nets):
        return "the members differ in their layers (an activation, a dropout rate, ...)"
    if any(
        not getattr(m, "stacks_buffers", False)
        for n in nets
        for m in n.modules()
        if any(True for _ in m.buffers(recurse=False))
    ):
        return "the members hold buffers (e.g. batch norm statistics)"
    allowed = (nn.Dropout,) if dropout else ()
    if any(
        isinstance(m, _RANDOM_LAYERS) and type(m) not in allowed for n in nets for m in n.modules()
    ):
        return "the members have random layers (dropout)"
    if any(has_hooks(n) for n in nets):
        return "the members have forward or backward hooks (the stacked copy would skip them)"
    if not any(p.requires_grad for p in nets[0].parameters()):
        return "the members have no trainable parameters"
    return None


class StackedModels(nn.Module):
    """K nets of one architecture as one module: ``forward(x (K, B, ...)) -> (K, B, O)``.

    Its parameters are copies of the members' stacked on a leading ``K`` dimension
    (``stacked.<name with dots as underscores>``; linear weights as ``(K, in, out)``, see
    :meth:`tensors` for the members' layout); :meth:`write_back` copies them into the members.

    Args:
        nets: the members (see :func:`stackable`).
        example: ``(n, ...)`` inputs for the one-time check that the stacked forward pass is
            the members' own.

    Raises:
        ValueError: the members cannot be stacked (the reason is in the message).

    Example:
        >>> nets = [nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1)) for _ in range(2)]
        >>> stacked = StackedModels(nets, torch.randn(5, 3))
        >>> stacked(torch.randn(2, 6, 3)).shape
        torch.Size([2, 6, 1])
    """

    def __init__(
        self,
        nets: list[nn.Module],
        example: torch.Tensor,
        generators: list[torch.Generator] | None = None,
    ) -> None:
        super().__init__()
        reason = stackable(nets, dropout=generators is not None)
        if reason is not None:
            raise ValueError(f"these models cannot be trained stacked: {reason}")
        self.num_models = len(nets)
        params, buffers = stack_module_state(nets)
        self.names = list(params)
        self.buffer_names = list(buffers)  # of modules that take them stacked (stackable)
        self.buffers_of = nn.Module()
        for name, value in buffers.items():
            self.buffers_of.register_buffer(_key(name), value.contiguous())
        # 2-D (linear) weights are held as (K, in, out): the batched matmul's gradient then comes
        # out in the parameter's own layout (no transposed copy per step, which made the backward
        # pass of the (K, out, in) layout slower than K separate layers)
        # Measured: ``benchmarks/results/library_measurements.md``, section 'Stacked weight layout'.
        self._transposed = {k for k, v in params.items() if v.dim() == 3}
        self.stacked = nn.ParameterDict(
            {
                _key(k): nn.Parameter(
                    (v.transpose(-1, -2) if k in self._transposed else v).detach().contiguous()
                )
                for k, v in params.items()
            }
        )
        for name, p in nets[0].named_parameters():
            self.stacked[_key(name)].requires_grad_(p.requires_grad)
        self._twin = BatchedTwin(nets[0], self.names + self.buffer_names)
        if generators is not None:  # each member's masks from its own generator
            swap_member_dropout(self._twin.module, generators)
        probe = example[:3].unsqueeze(0).expand(self.num_models, *example[:3].shape)
        with contextlib.ExitStack() as stack:  # the check in eval mode: no masks, no draws
            for net in [*nets, self._twin.module]:
                stack.enter_context(modes(net, lambda m: False))
            with torch.no_grad():
                ok = _same(lambda: self(probe), _loop(nets, probe))
        if not ok:
            raise ValueError(
                "these models cannot be trained stacked: their stacked forward pass differs from "
                "their own (a layer without leading-sample-dimension support)"
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(K, B, ...)`` inputs, one block per member → ``(K, B, O)`` outputs."""
        return self._twin.load({}, {**self.tensors(), **self._buffers_by_name()})(x)

    def train(self, mode: bool = True) -> StackedModels:
        """Set the mode of the stacked net (its dropout layers) as ``nn.Module.train`` does."""
        super().train(mode)
        self._twin.module.train(mode)
        return self

    def tensors(self) -> dict[str, torch.Tensor]:
        """``{member parameter name: (K, *shape)}``, views of the stacked parameters."""
        return {
            name: self.stacked[_key(name)].transpose(-1, -2)
            if name in self._transposed
            else self.stacked[_key(name)]
            for name in self.names
        }

    def _buffers_by_name(self) -> dict[str, torch.Tensor]:
        """``{member buffer name: (K, *shape)}``, the stacked buffers themselves."""
        return {name: self.buffers_of.get_buffer(_key(name)) for name in self.buffer_names}

    def write_back(self, nets: list[nn.Module]) -> None:
        """Copy slice ``k`` of every stacked parameter (and buffer) into ``nets[k]``."""
        copy_slices({**self.tensors(), **self._buffers_by_name()}, nets, to_members=True)

    def read_from(self, nets: list[nn.Module]) -> None:
        """Copy ``nets[k]``'s parameters (and buffers) into slice ``k`` of the stacked ones (the
        inverse of :meth:`write_back`: a member changed from outside, e.g. restored to its best
        epoch)."""
        copy_slices({**self.tensors(), **self._buffers_by_name()}, nets, to_members=False)


def member_tensors(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """A member's parameters, then its buffers, by name: what a stack holds of it."""
    return [*module.named_parameters(), *module.named_buffers()]


@torch.no_grad()
def copy_slices(
    stacked: dict[str, torch.Tensor], members: Sequence[nn.Module], *, to_members: bool
) -> None:
    """Copy between slice ``k`` of each ``(K, *shape)`` tensor of ``stacked`` (by member tensor
    name) and the tensor of that name in ``members[k]``: into the members, or (``to_members``
    false) out of them.

    Example:
        >>> nets = [nn.Linear(2, 1), nn.Linear(2, 1)]
        >>> stacked = {n: torch.zeros(2, *p.shape) for n, p in member_tensors(nets[0])}
        >>> copy_slices(stacked, nets, to_members=False)
        >>> torch.equal(stacked["weight"][1], nets[1].weight)
        True
    """
    for k, member in enumerate(members):
        for name, tensor in member_tensors(member):
            if to_members:
                tensor.copy_(stacked[name][k])
            else:
                stacked[name][k].copy_(tensor)


def _key(name: str) -> str:
    return name.replace(".", "_")


def _same(stacked: Callable[[], torch.Tensor], expected: torch.Tensor) -> bool:
    """Whether the stacked pass runs and matches (NaN where a member's own pass gives NaN)."""
    try:
        got = stacked()
    except (RuntimeError, ValueError, IndexError, TypeError, KeyError):
        return False
    return got.shape == expected.shape and bool(
        torch.allclose(got, expected, rtol=1e-4, atol=1e-5, equal_nan=True)
    )


def _loop(nets: list[nn.Module], x: torch.Tensor) -> torch.Tensor:
    return torch.stack([net(x[k]) for k, net in enumerate(nets)])
