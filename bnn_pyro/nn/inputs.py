"""The input shape a net expects, read from its first layer, and the one check of ``x`` against
it (before any vmap or matrix product, so a wrong width is named instead of torch's "mat1 and
mat2 shapes cannot be multiplied")."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

__all__ = ["EMBEDDINGS", "InputSpec", "input_spec", "takes_indices"]

#: Layers that take integer indices, not floats.
EMBEDDINGS = (nn.Embedding, nn.EmbeddingBag)


@dataclass(frozen=True)
class InputSpec:
    """What ``x`` must look like: ``x.shape[1 : 1 + len(features)] == features`` and, when
    ``ndim`` is set, ``x.dim() == ndim``.

    Attributes:
        features: the leading per-row dims (``(D,)`` for a linear first layer, ``(C,)`` for a
            conv, the whole ``x.shape[1:]`` seen by ``fit``).
        ndim: the number of dims of ``x`` (``2`` for a linear first layer), or None (any).

    Example:
        >>> spec = InputSpec((3,), 2)
        >>> spec.check("x", torch.zeros(5, 3)).shape
        torch.Size([5, 3])
        >>> spec.check("x", torch.zeros(5, 3, 3))
        Traceback (most recent call last):
          ...
        ValueError: x must have 3 feature(s) per row (shape (N, 3)), got shape (5, 3, 3)
    """

    features: tuple[int, ...]
    ndim: int | None = None

    @classmethod
    def exact(cls, shape: tuple[int, ...]) -> InputSpec:
        """The spec of inputs whose rows have exactly ``shape`` (what ``fit`` saw)."""
        return cls(tuple(shape), len(shape) + 1)

    def describe(self) -> str:
        """``"(N, 3)"`` or ``"(N, 3, ...)"``."""
        dims = ["N", *map(str, self.features)]
        if self.ndim is None or self.ndim > len(dims):
            dims.append("...")
        return f"({', '.join(dims)})"

    def check(self, name: str, x: torch.Tensor) -> torch.Tensor:
        """Return ``x`` if its shape fits, else raise ``ValueError`` naming ``name`` with both
        shapes."""
        ok = tuple(x.shape[1 : 1 + len(self.features)]) == self.features
        ok = ok and (
            x.dim() == self.ndim if self.ndim is not None else x.dim() > len(self.features)
        )
        if not ok:
            what = (
                f"{self.features[0]} feature(s) per row (shape {self.describe()})"
                if self.ndim == 2 and len(self.features) == 1
                else f"shape {self.describe()}"
            )
            raise ValueError(f"{name} must have {what}, got shape {tuple(x.shape)}")
        return x


def _first_module(net: nn.Module) -> nn.Module:
    module = net
    while isinstance(module, nn.Sequential) and len(module) > 0:
        module = module[0]
    return module


def input_spec(net: nn.Module) -> InputSpec | None:
    """The input shape of a net whose first step is known: the net itself or a (nested)
    ``Sequential`` starting with a linear (``(N, in_features)``) or conv layer (``(N,
    in_channels, *spatial)``). ``None`` for other nets (their input shape is what ``fit`` sees).

    Example:
        >>> input_spec(nn.Sequential(nn.Linear(3, 4), nn.ReLU()))
        InputSpec(features=(3,), ndim=2)
        >>> input_spec(nn.Conv2d(1, 4, 3))
        InputSpec(features=(1,), ndim=4)
        >>> input_spec(nn.ReLU()) is None
        True
    """
    module = _first_module(net)
    if isinstance(module, nn.Linear):
        return InputSpec((module.in_features,), 2)
    if isinstance(module, nn.modules.conv._ConvNd):
        return InputSpec((module.in_channels,), len(module.kernel_size) + 2)
    return None


def takes_indices(net: nn.Module) -> bool:
    """Whether ``net`` holds an embedding, so its inputs may be integer indices.

    Example:
        >>> takes_indices(nn.Sequential(nn.Embedding(10, 4), nn.Flatten()))
        True
    """
    return any(isinstance(m, EMBEDDINGS) for m in net.modules())
