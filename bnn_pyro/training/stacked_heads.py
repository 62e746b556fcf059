"""K modules of one kind (a method's own head beside its net) trained stacked, called under
``vmap``.

:class:`~bnn_pyro.training.stacked.StackedModels` stacks the nets a method trains, whose layers
have batched twins. A method that trains a module of its own beside the net (VBLL's ``q(W)``)
has no such twin, and needs none: its parameters are held as ``(K, *shape)`` tensors and each
call runs the module's own code on member ``k``'s slice under :func:`torch.func.vmap`, through
:func:`torch.func.functional_call`. Each slice's gradient is then that member's own, and an
elementwise optimizer moves it as it would move the member alone.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn as nn
from torch.func import functional_call, vmap

from bnn_pyro.training.stacked import copy_slices, member_tensors

__all__ = ["StackedHeads"]


class _Call(nn.Module):
    """``forward(fn, *args) = fn(head, *args)``: what ``functional_call`` runs."""

    def __init__(self, head: nn.Module) -> None:
        super().__init__()
        self.head = head

    def forward(self, fn: Callable[..., torch.Tensor], *args: Any) -> torch.Tensor:
        return fn(self.head, *args)


class StackedHeads(nn.Module):
    """K modules of one class and one parameter layout as one: parameter ``name`` of member
    ``k`` is slice ``k`` of ``stacked[name]`` ``(K, *shape)``.

    Buffers are stacked the same way (fixed per member, e.g. random features drawn from its
    own seed) and passed to each call with the parameters.

    Args:
        heads: the members (of one class, with the same parameter and buffer names and
            shapes, the same parameters trained), which :meth:`write_back` and
            :meth:`read_from` copy to and from. Their other settings (plain attributes) are
            read from the first: the caller checks that they agree.

    Raises:
        ValueError: fewer than two, or members that differ in class or tensors (named).

    Example:
        >>> heads = [nn.Linear(3, 2) for _ in range(4)]
        >>> stacked = StackedHeads(heads)
        >>> out = stacked.map(lambda head, x: head(x).sum(), torch.randn(4, 5, 3))
        >>> out.shape  # one value per member
        torch.Size([4])
        >>> torch.allclose(stacked.tensors()["weight"][2], heads[2].weight)
        True
    """

    def __init__(self, heads: Sequence[nn.Module]) -> None:
        super().__init__()
        heads = list(heads)
        if len(heads) < 2:
            raise ValueError("StackedHeads needs at least two members")
        layout = [
            [(k, v.shape, v.dtype, v.device, v.requires_grad) for k, v in member_tensors(h)]
            for h in heads
        ]
        if any(type(h) is not type(heads[0]) for h in heads) or any(s != layout[0] for s in layout):
            raise ValueError(
                "the heads differ in their class or tensors (names, shapes or which are trained)"
            )
        self.names = [name for name, _ in heads[0].named_parameters()]
        self.stacked = nn.ParameterDict()
        for i, name in enumerate(self.names):
            values = [h.get_parameter(name) for h in heads]
            param = nn.Parameter(torch.stack([v.detach() for v in values]).contiguous())
            param.requires_grad_(values[0].requires_grad)
            self.stacked[str(i)] = param
        self.buffer_names = [name for name, _ in heads[0].named_buffers()]
        for i, name in enumerate(self.buffer_names):
            self.register_buffer(f"buffer_{i}", torch.stack([h.get_buffer(name) for h in heads]))
        # the code each call runs, every tensor of it replaced by a member's slice, and the
        # members themselves (what write_back and read_from copy to and from): kept out of the
        # module's registry, so their tensors are neither trained nor saved here
        self.__dict__["_call"] = _Call(copy.deepcopy(heads[0]))
        self.__dict__["_members"] = heads

    def tensors(self) -> dict[str, torch.Tensor]:
        """``{member parameter name: (K, *shape)}``, the stacked parameters themselves."""
        return {name: self.stacked[str(i)] for i, name in enumerate(self.names)}

    def _all(self) -> dict[str, torch.Tensor]:
        buffers = {name: self.get_buffer(f"buffer_{i}") for i, name in enumerate(self.buffer_names)}
        return {**self.tensors(), **buffers}

    def map(self, fn: Callable[..., torch.Tensor], *args: torch.Tensor) -> torch.Tensor:
        """``fn(head_k, *args_k)`` for every member, stacked: ``args`` are ``(K, ...)``, one
        slice per member, and ``fn`` returns a tensor per member (``(K, ...)`` in all). ``fn``
        must not draw random numbers (``vmap`` refuses them)."""
        params = {f"head.{name}": tensor for name, tensor in self._all().items()}

        def one(p: dict[str, torch.Tensor], *a: torch.Tensor) -> torch.Tensor:
            return functional_call(self._call, p, (fn, *a))

        return vmap(one, randomness="error")(params, *args)

    def write_back(self) -> None:
        """Copy slice ``k`` of every stacked parameter and buffer into member ``k``."""
        copy_slices(self._all(), self._members, to_members=True)

    def read_from(self) -> None:
        """Copy member ``k``'s parameters and buffers into slice ``k`` (the inverse of
        :meth:`write_back`: a member changed from outside, e.g. by a callback)."""
        copy_slices(self._all(), self._members, to_members=False)
