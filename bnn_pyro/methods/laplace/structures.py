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

from bnn_pyro.methods.classic.params import flatten
from bnn_pyro.methods.laplace.kron import KroneckerHessian
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
