"""Dropout for K stacked models: each member's masks from its own generator, drawn as its
one-by-one run draws them on any device.

A stacked run (:mod:`bnn_pyro.training.stacked`, :mod:`bnn_pyro.methods.vi.stacked`) passes
``(K, B, ...)`` blocks through one net; a plain ``nn.Dropout`` would draw one mask for the block
from the global stream. :class:`MemberDropout` draws member ``k``'s with ``F.dropout`` itself on
its ``(B, ...)`` block, from ``generators[k]`` lent to the device's global generator for the
call, so the masks are the ones member ``k``'s own fit draws: a CPU's ``bernoulli_`` and a GPU's
fused dropout kernel use their random numbers differently, and a mask drawn any other way
matched on the CPU only.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["MemberDropout", "member_dropout", "swap_member_dropout"]


def _default_generator(device: torch.device) -> torch.Generator:
    """The global generator that draws ``device``'s tensors (``F.dropout`` takes no other)."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return torch.cuda.default_generators[index]
    return torch.default_generator


def _checked(p: float, generators: list[torch.Generator]) -> tuple[float, list]:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be a probability in [0, 1], got {p!r}")
    if not generators or not all(isinstance(g, torch.Generator) for g in generators):
        raise TypeError(
            f"generators must be a non-empty list of torch.Generator, got {generators!r}"
        )
    return float(p), list(generators)


class MemberDropout(nn.Module):
    """``nn.Dropout`` for ``(K, B, ...)`` blocks: member ``k``'s mask drawn by ``F.dropout``
    itself on its ``(B, ...)`` block, from ``generators[k]`` lent to the device's global
    generator for the call. So each member's masks are what its one-by-one run draws on every
    device: a CPU's ``bernoulli_`` and a GPU's fused dropout kernel use their random numbers
    differently, and a mask drawn any other way matched on the CPU only.

    Args:
        p: the drop probability, in ``[0, 1]``.
        generators: ``K`` generators on the inputs' device, member ``k``'s at ``k``.

    Example:
        >>> gens = [torch.Generator().manual_seed(s) for s in (0, 1)]
        >>> out = MemberDropout(0.5, gens)(torch.ones(2, 3, 4))  # (K, B, features)
        >>> _ = torch.manual_seed(1)  # member 1's own run: F.dropout from its seeded stream
        >>> bool(torch.equal(out[1], torch.nn.functional.dropout(torch.ones(3, 4), 0.5)))
        True
    """

    def __init__(self, p: float, generators: list[torch.Generator]) -> None:
        super().__init__()
        self.p, self.generators = _checked(p, generators)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(K, B, ...)`` → ``(K, B, ...)``; the identity in eval mode."""
        if x.dim() < 1 or x.shape[0] != len(self.generators):
            raise ValueError(
                f"MemberDropout of {len(self.generators)} members needs (K={len(self.generators)}"
                f", B, ...) inputs, got shape {tuple(x.shape)}"
            )
        if not self.training or self.p == 0.0:
            return x
        default = _default_generator(x.device)
        own = default.get_state()
        outs = []
        try:
            for k, g in enumerate(self.generators):
                default.set_state(g.get_state())
                outs.append(F.dropout(x[k], self.p, training=True))
                g.set_state(default.get_state())
        finally:
            default.set_state(own)
        return torch.stack(outs)


def swap_member_dropout(
    module: nn.Module, generators: list[torch.Generator]
) -> list[tuple[nn.Module, str, nn.Dropout]]:
    """Replace every ``nn.Dropout`` in ``module`` (a stacked twin run on ``(K, B, ...)``
    blocks) by a :class:`MemberDropout` of the same ``p`` and mode, member ``k``'s masks from
    ``generators[k]``; return ``(parent, name, the replaced layer)`` of each, to put back.

    Example:
        >>> net = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5))
        >>> swapped = swap_member_dropout(net, [torch.Generator()])
        >>> type(net[1]).__name__, [name for _, name, _ in swapped]
        ('MemberDropout', ['1'])
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be an nn.Module, got {type(module).__name__}")
    _checked(0.0, generators)
    swapped = []
    for parent in module.modules():
        for name, child in list(parent.named_children()):
            if type(child) is nn.Dropout:
                member = MemberDropout(child.p, generators)
                member.training = child.training
                setattr(parent, name, member)
                swapped.append((parent, name, child))
    return swapped


@contextmanager
def member_dropout(module: nn.Module, generators: list[torch.Generator]) -> Iterator[None]:
    """Inside the block, every ``nn.Dropout`` in ``module`` draws member ``k``'s masks from
    ``generators[k]`` (:func:`swap_member_dropout`); the layers are put back afterwards, for a
    twin shared with a model's own forward (stacked VI). :class:`~bnn_pyro.training.stacked.
    StackedModels` swaps them for good in a twin of its own.

    Example:
        >>> net = nn.Sequential(nn.Dropout(0.5))
        >>> gens = [torch.Generator().manual_seed(s) for s in (0, 0)]
        >>> with member_dropout(net, gens):
        ...     out = net(torch.ones(2, 3, 4))
        >>> bool(torch.equal(out[0], out[1])), type(net[0]).__name__
        (True, 'Dropout')
    """
    swapped = swap_member_dropout(module, generators)
    try:
        yield
    finally:
        for parent, name, child in swapped:
            setattr(parent, name, child)
