"""``modes``: set the train/eval flag of every submodule for the length of a ``with`` block,
each module's own flag given back afterwards (``net.train(was_training)`` would instead give
one flag to all of them, turning a layer the user holds in eval back to training)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch.nn as nn

__all__ = ["modes"]


@contextlib.contextmanager
def modes(module: nn.Module, train: Callable[[nn.Module], bool]) -> Iterator[None]:
    """Set each submodule's ``training`` flag to ``train(m)``; restore every flag afterwards.

    Args:
        module: the root; every module of ``module.modules()`` (itself included) is set.
        train: ``m -> bool``, the flag submodule ``m`` gets inside the block.

    Raises:
        TypeError: ``module`` is not a ``torch.nn.Module`` or ``train`` is not callable.

    Example:
        >>> net = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5))
        >>> net[0].eval()  # a layer the user holds in eval
        Linear(in_features=2, out_features=2, bias=True)
        >>> with modes(net, lambda m: isinstance(m, nn.Dropout)):
        ...     [m.training for m in net]
        [False, True]
        >>> with modes(net, lambda m: False):
        ...     [m.training for m in net]
        [False, False]
        >>> net.training, [m.training for m in net]
        (True, [False, True])
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    if not callable(train):
        raise TypeError(f"train must be a callable m -> bool, got {type(train).__name__}")
    # only the flags that change are set (and restored): nn.Module.__setattr__ is slow enough
    # to dominate a small predict otherwise
    changed = [(m, m.training) for m in module.modules() if m.training != bool(train(m))]
    try:
        for m, flag in changed:
            m.training = not flag
        yield
    finally:
        for m, flag in changed:
            m.training = flag
