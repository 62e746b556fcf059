"""A bound on a layer's spectral norm (Miyato et al. 2018), the soft form SNGP uses (Liu et al.
2020): ``W ↦ W / max(1, σ(W) / c)``, ``σ(W)`` estimated by power iteration."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import parametrize

from bnn_pyro._checks import check_float, check_int

__all__ = ["SpectralBound", "bound_spectral_norms"]

#: Power iterations when the bound is put on a layer (``torch.nn.utils.spectral_norm``'s 15).
_WARM_UP = 15


class SpectralBound(nn.Module):
    """A parametrization of a weight ``W`` (``(out, ...)``, read as the matrix ``(out, -1)``):
    ``W / max(1, σ / c)``, so the layer's spectral norm is at most ``c`` and a layer already
    within the bound is left as it is (``torch.nn.utils.parametrizations.spectral_norm`` divides
    by ``σ`` whatever it is).

    ``σ = uᵀ W v`` with singular vectors ``u``, ``v`` kept as buffers and refined by
    ``power_iterations`` steps of the power method at each call in training mode (none in eval
    mode, so a prediction does not move them). Their start is drawn from a fixed seed, not the
    global random stream.

    Args:
        weight: the weight the bound will act on (its shape, dtype and device).
        bound: ``c > 0``.
        power_iterations: steps per training call (``>= 1``).

    Example:
        >>> layer = nn.Linear(4, 3)
        >>> with torch.no_grad():
        ...     _ = layer.weight.mul_(10.0)
        >>> bound = SpectralBound(layer.weight, 0.9)
        >>> _ = parametrize.register_parametrization(layer, "weight", bound)
        >>> round(float(torch.linalg.matrix_norm(layer.weight, ord=2)), 4)
        0.9
    """

    def __init__(self, weight: torch.Tensor, bound: float, power_iterations: int = 1) -> None:
        super().__init__()
        self.configure(bound, power_iterations)
        matrix = weight.detach().flatten(1)
        start = torch.Generator().manual_seed(0)
        u = torch.randn(matrix.shape[0], generator=start, dtype=matrix.dtype)
        v = torch.randn(matrix.shape[1], generator=start, dtype=matrix.dtype)
        self.register_buffer("_u", F.normalize(u.to(matrix.device), dim=0))
        self.register_buffer("_v", F.normalize(v.to(matrix.device), dim=0))
        self._iterate(matrix, _WARM_UP)

    def configure(self, bound: float, power_iterations: int) -> None:
        """Set the bound ``c > 0`` and the power-method steps per training call (``>= 1``).

        Raises:
            ValueError: either out of range (named), leaving both as they were.
        """
        check_float("bound", bound, minimum=0.0, strict=True)
        check_int("power_iterations", power_iterations)
        self.bound, self.power_iterations = float(bound), power_iterations

    #: Its buffers ``u``, ``v`` may come stacked, ``(K, out)`` and ``(K, in)`` with weights
    #: ``(K, out, ...)``: K models trained as one (:class:`~bnn_pyro.training.StackedModels`),
    #: each with its own power iteration.
    stacks_buffers = True

    @torch.no_grad()
    def _iterate(self, matrix: torch.Tensor, steps: int) -> None:
        if self._u.dim() == 2:  # stacked: each member's matrix (K, out, in) and vectors
            for _ in range(steps):
                self._v.copy_(F.normalize(torch.einsum("koi,ko->ki", matrix, self._u), dim=-1))
                self._u.copy_(F.normalize(torch.einsum("koi,ki->ko", matrix, self._v), dim=-1))
            return
        for _ in range(steps):
            self._v.copy_(F.normalize(matrix.t() @ self._u, dim=0))
            self._u.copy_(F.normalize(matrix @ self._v, dim=0))

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        lead = self._u.dim() - 1  # 1 where K members come stacked
        matrix = weight.flatten(lead + 1)
        if self.training:
            self._iterate(matrix.detach(), self.power_iterations)
        # copies: a later call's iterations must not change what this call's backward reads
        u, v = self._u.clone(), self._v.clone()
        if lead:
            sigma = torch.einsum("ko,koi,ki->k", u, matrix, v)
            scale = torch.clamp(sigma / self.bound, min=1.0)
            return weight / scale.reshape(-1, *[1] * (weight.dim() - 1))
        sigma = torch.dot(u, matrix @ v)
        return weight / torch.clamp(sigma / self.bound, min=1.0)

    def extra_repr(self) -> str:
        return f"bound={self.bound}, power_iterations={self.power_iterations}"


def bound_spectral_norms(
    layers: list[nn.Module], bound: float, power_iterations: int = 1
) -> list[SpectralBound]:
    """Put a :class:`SpectralBound` on each layer's ``weight`` (one already there is re-set to
    ``bound`` and ``power_iterations``, not stacked); return them in order.

    Example:
        >>> layers = [nn.Linear(2, 8), nn.Linear(8, 8)]
        >>> [b.bound for b in bound_spectral_norms(layers, 0.95)]
        [0.95, 0.95]
        >>> len(bound_spectral_norms(layers, 0.5)), layers[0].parametrizations.weight[0].bound
        (2, 0.5)
    """
    bounds = []
    for layer in layers:
        found = _bound_of(layer)
        if found is None:
            found = SpectralBound(layer.weight, bound, power_iterations)
            parametrize.register_parametrization(layer, "weight", found)
        else:
            found.configure(bound, power_iterations)
        bounds.append(found)
    return bounds


def _bound_of(layer: nn.Module) -> SpectralBound | None:
    """The :class:`SpectralBound` on ``layer.weight``, if there is one."""
    if not parametrize.is_parametrized(layer, "weight"):
        return None
    return next((p for p in layer.parametrizations.weight if isinstance(p, SpectralBound)), None)
