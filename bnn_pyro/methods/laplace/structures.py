"""How the Laplace approximation stores its curvature ``H``, and the Gaussian
``N(θ*, (H + λ I)⁻¹)`` on it: one class per structure, chosen by its key, as laplace-torch does.

* :class:`DiagonalHessian` (``"diag"``): ``diag(H)`` ``(P,)``, any size of net;
* :class:`FullHessian` (``"full"``): the ``(P, P)`` matrix, small nets or the last layer;
* :class:`KroneckerHessian` (``"kron"``): KFAC, two small factors per linear layer.

A structure accumulates ``H`` from per-example gradients (the empirical Fisher) or Jacobians
(the generalised Gauss-Newton), and answers the posterior's questions: its precision,
covariance, draws, and the eigenvalues of ``H`` that the log-evidence needs. A new structure
is one more subclass in :data:`STRUCTURES`; nothing else branches on it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from bnn_pyro.methods.classic.params import flatten, unflatten
from bnn_pyro.methods.laplace.kron import KroneckerHessian, LayerJacobians
from bnn_pyro.methods.laplace.structure_base import HessianStructure, map_tensors

__all__ = [
    "STRUCTURES",
    "DiagonalHessian",
    "FullHessian",
    "HessianStructure",
    "KroneckerHessian",
    "map_tensors",
    "structure_named",
]


class DiagonalHessian(HessianStructure):
    """``diag(H)`` ``(P,)``: the posterior's coordinates independent.

    Example:
        >>> s = DiagonalHessian()
        >>> h = s.add_fisher(s.zeros(2, torch.zeros(1)), {"w": torch.tensor([[1.0, 2.0]])})
        >>> h, s.precision(h, 1.0)
        (tensor([1., 4.]), tensor([2., 5.]))
    """

    name = "diag"
    takes_layers = True

    def zeros(self, size: int, like: torch.Tensor) -> torch.Tensor:
        return like.new_zeros(size)

    def add_fisher(self, h: torch.Tensor, grads: dict[str, torch.Tensor]) -> torch.Tensor:
        # square per parameter: never materialise the (B, P) gradients
        return h + torch.cat([(g**2).sum(0).reshape(-1) for g in grads.values()])

    def add_ggn(
        self, h: torch.Tensor, jac: torch.Tensor, weight: torch.Tensor, jp: torch.Tensor | None
    ) -> torch.Tensor:
        h = h + torch.einsum("bop,bo->p", jac**2, weight)
        return h if jp is None else h - (jp**2).sum(0)

    def precision(self, h: torch.Tensor, lam: float) -> torch.Tensor:
        return h + lam

    def covariance(self, h: torch.Tensor, lam: float) -> torch.Tensor:
        return torch.diag(1.0 / (h + lam))

    def sample(
        self, mean: torch.Tensor, h: torch.Tensor, lam: float, num_samples: int
    ) -> torch.Tensor:
        z = torch.randn(num_samples, mean.numel(), dtype=mean.dtype, device=mean.device)
        return mean + z / (h + lam).sqrt()

    def eigenvalues(self, h: torch.Tensor) -> torch.Tensor:
        return h.double().clamp_min(0)

    def log_det(self, h: torch.Tensor, lam: float | torch.Tensor) -> torch.Tensor:
        return torch.log(h + lam).sum()

    def group_eigenvalues(self, h: torch.Tensor, sizes: list[int]) -> list[torch.Tensor]:
        return list(self.eigenvalues(h).split(sizes))

    def functional_variance(self, h: torch.Tensor, lam: float, jac: torch.Tensor) -> torch.Tensor:
        return (jac.pow(2) / (h + lam)).sum(-1)

    def functional_covariance(self, h: torch.Tensor, lam: float, jac: torch.Tensor) -> torch.Tensor:
        flat = jac.flatten(0, 1)
        return (flat / (h + lam)) @ flat.T

    # Per linear layer: a weight's Jacobian row for output o is δ_o ⊗ a (δ_o (out,) the output's
    # Jacobian in the layer's pre-activations, a (in,) its inputs), a bias's is δ_o; so the
    # squares that diag(H) and diag(J Σ Jᵀ) sum factor, δ_o² ⊗ a², and neither needs the
    # (B, O, P) Jacobians: B · O · out numbers per layer instead of B · O · out · in.

    def add_layer_ggn(
        self,
        h: torch.Tensor,
        deltas: dict[str, torch.Tensor],
        inputs: dict[str, torch.Tensor],
        weight: torch.Tensor,
        categorical: bool,
        shapes: dict[str, torch.Size] | None = None,
    ) -> torch.Tensor:
        """``h + diag(Σ_b J_bᵀ Λ_b J_b)``: per weight ``Σ_b c_bk a_bl²``, per bias ``Σ_b c_bk``,
        with ``c_bk = Σ_o w_bo δ_bok²`` (minus ``(Σ_o p_bo δ_bok)²`` for a categorical: the
        diagonal of ``- j jᵀ``, ``j = Σ_o p_o J_o = (Σ_o p_o δ_o) ⊗ a``).

        Example:
            >>> s = DiagonalHessian()  # one row, one output, δ = 1, a = (1, 2), weight 1
            >>> s.add_layer_ggn(s.zeros(3, torch.zeros(1)), {"0": torch.ones(1, 1, 1)},
            ...                 {"0": torch.tensor([[1.0, 2.0]])}, torch.ones(1, 1), False,
            ...                 {"0.weight": torch.Size([1, 2]), "0.bias": torch.Size([1])})
            tensor([1., 4., 1.])
        """
        if shapes is None:
            raise TypeError("DiagonalHessian.add_layer_ggn needs the parameters' shapes")
        parts = []
        for name, shape in shapes.items():
            layer = name.rpartition(".")[0]
            delta = deltas[layer]
            c = torch.einsum("bok,bo->bk", delta.pow(2), weight)  # (B, out)
            if categorical:
                c = c - torch.einsum("bo,bok->bk", weight, delta).pow(2)
            part = c.T @ inputs[layer].pow(2) if len(shape) == 2 else c.sum(0)
            parts.append(part.reshape(-1))
        return h + torch.cat(parts)

    def layer_variance_fn(
        self, h: torch.Tensor, lam: float | torch.Tensor, shapes: dict[str, torch.Size]
    ) -> Callable[[LayerJacobians], torch.Tensor]:
        """``diag(J Σ Jᵀ)`` ``(B, O)`` from the layers' ``(deltas, inputs)``: with ``Σ``'s
        diagonal per weight ``S (out, in)`` and bias ``s (out,)``, ``Σ_k δ_bok² (S a_b² + s)_k``.

        Example:
            >>> s, shapes = DiagonalHessian(), {"0.weight": torch.Size([1, 2])}
            >>> variance = s.layer_variance_fn(torch.tensor([1.0, 3.0]), 1.0, shapes)
            >>> variance(({"0": torch.ones(1, 1, 1)}, {"0": torch.tensor([[1.0, 2.0]])}))
            tensor([[1.5000]])
        """
        var = unflatten(1.0 / (h + lam), shapes)

        def variance(jac: LayerJacobians) -> torch.Tensor:
            deltas, inputs = jac
            per_layer: dict[str, torch.Tensor] = {}  # S a² + s, (B, out) or (out,)
            for name, v in var.items():
                layer = name.rpartition(".")[0]
                t = inputs[layer].pow(2) @ v.T if v.dim() == 2 else v
                per_layer[layer] = t if layer not in per_layer else per_layer[layer] + t
            parts = [(deltas[k].pow(2) * t.unsqueeze(-2)).sum(-1) for k, t in per_layer.items()]
            return torch.stack(parts).sum(0)

        return variance


class FullHessian(HessianStructure):
    """The ``(P, P)`` matrix ``H``: the posterior's correlations kept.

    Example:
        >>> s = FullHessian()
        >>> s.eigenvalues(torch.tensor([[2.0, 0.0], [0.0, -1.0]]))
        tensor([0., 2.], dtype=torch.float64)
    """

    name = "full"

    def zeros(self, size: int, like: torch.Tensor) -> torch.Tensor:
        return like.new_zeros(size, size)

    def add_fisher(self, h: torch.Tensor, grads: dict[str, torch.Tensor]) -> torch.Tensor:
        g = flatten(grads, batch_dims=1)
        return h + g.T @ g

    def add_ggn(
        self, h: torch.Tensor, jac: torch.Tensor, weight: torch.Tensor, jp: torch.Tensor | None
    ) -> torch.Tensor:
        h = h + torch.einsum("bop,bo,boq->pq", jac, weight, jac)
        return h if jp is None else h - jp.T @ jp

    def precision(self, h: torch.Tensor, lam: float | torch.Tensor) -> torch.Tensor:
        if isinstance(lam, torch.Tensor):
            return h + torch.diag(lam.to(h))
        return h + lam * torch.eye(len(h), dtype=h.dtype, device=h.device)

    def covariance(self, h: torch.Tensor, lam: float) -> torch.Tensor:
        return torch.cholesky_inverse(torch.linalg.cholesky(self.precision(h, lam)))

    def sample(
        self, mean: torch.Tensor, h: torch.Tensor, lam: float, num_samples: int
    ) -> torch.Tensor:
        """With ``H + λI = L Lᵀ``: ``θ = θ* + L⁻ᵀ z``."""
        z = torch.randn(num_samples, mean.numel(), dtype=mean.dtype, device=mean.device)
        chol = torch.linalg.cholesky(self.precision(h, lam))
        return mean + torch.linalg.solve_triangular(chol.T, z.T, upper=True).T

    def eigenvalues(self, h: torch.Tensor) -> torch.Tensor:
        return torch.linalg.eigvalsh(h.double()).clamp_min(0)

    def log_det(self, h: torch.Tensor, lam: float | torch.Tensor) -> torch.Tensor:
        return 2 * torch.linalg.cholesky(self.precision(h, lam)).diagonal().log().sum()

    def functional_variance(self, h: torch.Tensor, lam: float, jac: torch.Tensor) -> torch.Tensor:
        return self.variance_fn(h, lam)(jac)

    def variance_fn(
        self, h: torch.Tensor, lam: float | torch.Tensor
    ) -> Callable[[torch.Tensor], torch.Tensor]:
        """``H + λI = L Lᵀ`` factorised once (``O(P³)``, the cost that dominates a block of
        rows): ``diag(J Σ Jᵀ)`` is then the squared columns of ``L⁻¹ Jᵀ`` summed."""
        chol = torch.linalg.cholesky(self.precision(h, lam))

        def variance(jac: torch.Tensor) -> torch.Tensor:
            half = torch.linalg.solve_triangular(chol, jac.flatten(0, 1).T, upper=False)
            return half.pow(2).sum(0).reshape(jac.shape[:2])

        return variance

    def functional_covariance(self, h: torch.Tensor, lam: float, jac: torch.Tensor) -> torch.Tensor:
        half = self._half(h, lam, jac)
        return half.T @ half

    def _half(self, h: torch.Tensor, lam: float, jac: torch.Tensor) -> torch.Tensor:
        """``L⁻¹ Jᵀ`` ``(P, B O)`` with ``H + λI = L Lᵀ``, so ``J Σ Jᵀ = (L⁻¹ Jᵀ)ᵀ (L⁻¹ Jᵀ)``."""
        chol = torch.linalg.cholesky(self.precision(h, lam))
        return torch.linalg.solve_triangular(chol, jac.flatten(0, 1).T, upper=False)


#: The structures by key (``hessian_structure=``).
STRUCTURES: dict[str, type[HessianStructure]] = {
    cls.name: cls for cls in (DiagonalHessian, FullHessian, KroneckerHessian)
}


def structure_named(name: str) -> HessianStructure:
    """The structure of key ``name``.

    Example:
        >>> type(structure_named("diag")).__name__
        'DiagonalHessian'
        >>> structure_named("kfac")
        Traceback (most recent call last):
          ...
        ValueError: hessian_structure must be one of ['diag', 'full', 'kron'], got 'kfac'
    """
    if name not in STRUCTURES:
        raise ValueError(f"hessian_structure must be one of {sorted(STRUCTURES)}, got {name!r}")
    return STRUCTURES[name]()
