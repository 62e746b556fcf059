"""``LastLayerReader``: what the methods that put their own head in place of a net's last
``nn.Linear`` (VBLL, SNGP, DKL) share: finding that layer, reading what it reads, and refusing
a net that computes anything after it."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn as nn

from bnn_pyro.nn.modes import modes

__all__ = ["LastLayerReader", "same_values"]

Hook = Callable[[nn.Module, tuple[torch.Tensor, ...], Any], Any]


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """``a`` and ``b`` have the same shape and values, NaN equal to NaN (a net that has
    diverged still ends in its last layer: ``fit`` then names the step, not the net).

    Example:
        >>> nan = float("nan")
        >>> same_values(torch.tensor([1.0, nan]), torch.tensor([1.0, nan]))
        True
        >>> same_values(torch.tensor([1.0]), torch.tensor([1.0, 1.0]))
        False
    """
    return a.shape == b.shape and torch.allclose(a, b, rtol=0.0, atol=0.0, equal_nan=True)


class LastLayerReader:
    """A mixin for a method whose ``model`` ends in the ``nn.Linear`` named ``_last_name``
    (found by :func:`~bnn_pyro.methods.classic.params.last_linear`): ``_read(x)`` runs the net
    and returns what that layer read ``(N, H)``, what it returned and the net's output, and
    refuses, naming the method, a net whose output is not that layer's."""

    model: nn.Module
    _last_name: str

    def _last(self) -> nn.Linear:
        """The net's last ``nn.Linear``."""
        return self.model.get_submodule(self._last_name)

    @contextmanager
    def _on_last(self, hook: Hook) -> Iterator[None]:
        """``hook`` as the last layer's forward hook inside the block (removed after it, also
        on an error)."""
        handle = self._last().register_forward_hook(hook)
        try:
            yield
        finally:
            handle.remove()

    def _read(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The net on ``x``: the last layer's input ``(N, H)`` and output ``(N, O)``, and the
        net's output (checked to have the last layer's shape)."""
        seen: list[tuple[torch.Tensor, torch.Tensor]] = []
        with self._on_last(lambda m, i, o: seen.append((i[0], o))):
            out = self.model(x)
        phi, last_out = seen[-1]
        if phi.dim() != 2 or out.shape != last_out.shape:
            raise ValueError(self._not_last())
        return phi, last_out, out

    def _not_last(self) -> str:
        """The refusal of a net that computes something after its last ``nn.Linear``."""
        return (
            f"{type(self).__name__} needs a net whose output (N, O) is its last nn.Linear's "
            f"output on (N, H) features ({self._last_name!r} is not the last thing the net "
            "computes); end the net with that layer"
        )

    def without_last(self, x: torch.Tensor) -> nn.Module:
        """The net with its last ``nn.Linear`` as ``nn.Identity``: it returns the features
        ``(N, H)`` that layer reads (what a stacked fit trains, the head beside it). The net
        itself is left as it is: the modules on the way to that layer are shallow copies
        holding the net's own parameters (and every other submodule), the same objects.
        Checked on ``x``'s first rows, in eval mode: it must return what the layer read, or
        the net is refused (the layer is called more than once, or something computes after
        it).

        Raises:
            ValueError: the net cannot be read that way (the reason is named).

        Example:
            >>> import bnn_pyro as bp
            >>> m = bp.VBLL(bp.nn.mlp(3, [8], 2), "classification")
            >>> body = m.without_last(torch.randn(4, 3))
            >>> body(torch.randn(5, 3)).shape, m.model(torch.randn(5, 3)).shape
            (torch.Size([5, 8]), torch.Size([5, 2]))
            >>> body[0].weight is m.model[0].weight  # the net's own parameters
            True
        """
        if not self._last_name:
            raise ValueError(
                f"{type(self).__name__}'s net is its last nn.Linear alone: there is no body to "
                "train stacked; fit the models one by one"
            )
        rows = x[:3]
        with torch.no_grad(), modes(self.model, lambda m: False):
            phi = self._read(rows)[0]
            body = _without(self.model, self._last_name.split("."))
            features = body(rows)
        if not same_values(features, phi):
            raise ValueError(
                f"{type(self).__name__}'s net does not end with one call of its last nn.Linear "
                f"({self._last_name!r}): it cannot train stacked; fit the models one by one"
            )
        return body

    def _param_groups(self, own: Iterable[torch.Tensor]) -> list[dict[str, Any]]:
        """The optimizer's two groups: the net's body (its last layer, which the head stands
        in for, left out) under ``fit``'s weight decay, a point fit's Gaussian prior, and the
        head's trainable parameters ``own`` without it (the head has a prior of its own)."""
        last = {id(p) for p in self._last().parameters()}
        body = [p for p in self.model.parameters() if id(p) not in last]
        head = [p for p in own if p.requires_grad]
        return [{"params": body}, {"params": head, "weight_decay": 0.0}]

    def fit_probe(self, x: torch.Tensor) -> torch.Tensor:
        """``fit``'s look at the net on a few rows: its output must be the last layer's."""
        _, last_out, out = self._read(x)
        if not same_values(out, last_out):
            raise ValueError(self._not_last())
        return out


def _without(module: nn.Module, path: list[str]) -> nn.Module:
    """A shallow copy of ``module`` whose submodule at ``path`` is ``nn.Identity``: the copies
    on the way hold their own table of submodules, every other entry the original's."""
    twin = copy.copy(module)
    twin._modules = dict(module._modules)
    name, *rest = path
    twin._modules[name] = nn.Identity() if not rest else _without(module._modules[name], rest)
    return twin
