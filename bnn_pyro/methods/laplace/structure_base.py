"""The interface of a Laplace curvature structure: how ``H`` is stored, and the Gaussian
``N(θ*, (H + λ I)⁻¹)``'s linear algebra on it (the structures themselves:
:mod:`bnn_pyro.methods.laplace.structures`)."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import torch

__all__ = ["HessianStructure", "map_tensors"]


class HessianStructure(ABC):
    """The storage of ``H`` and the Gaussian posterior's linear algebra on it.

    ``h`` below is this structure's tensor, ``lam`` the prior precision λ (a float, or ``(P,)``
    per coordinate: a layerwise prior), ``mean`` the flat θ* ``(P,)``.

    Example:
        >>> from bnn_pyro.methods.laplace.structures import FullHessian
        >>> s = FullHessian()
        >>> h = s.add_fisher(s.zeros(2, torch.zeros(1)), {"w": torch.tensor([[1.0, 2.0]])})
        >>> h
        tensor([[1., 2.],
                [2., 4.]])
        >>> torch.allclose(s.covariance(h, 1.0) @ s.precision(h, 1.0), torch.eye(2), atol=1e-6)
        True
    """

    #: The key of ``hessian_structure=``.
    name: ClassVar[str]
    #: Whether the GGN is summed per layer (``add_layer_ggn(h, deltas, inputs, weight,
    #: categorical)``: each linear layer's output Jacobians and inputs) instead of through
    #: :meth:`add_ggn`'s full Jacobians.
    layerwise: ClassVar[bool] = False
    #: Whether, beside the full Jacobians, it takes the per-layer ones (:meth:`add_layer_ggn`,
    #: :meth:`layer_variance_fn`) where every Bayesian parameter is a plain ``nn.Linear``'s
    #: weight or bias (:func:`~bnn_pyro.methods.laplace.curvature.layer_rows` decides).
    takes_layers: ClassVar[bool] = False

    @abstractmethod
    def zeros(self, size: int, like: torch.Tensor) -> torch.Tensor:
        """An empty ``H`` for ``size`` parameters, in ``like``'s dtype and device."""

    def start(self, shapes: dict[str, torch.Size], like: torch.Tensor) -> Any:
        """An empty ``H`` for the parameters of ``shapes`` ``{name: shape}`` (in the order of the
        flat θ), in ``like``'s dtype and device."""
        return self.zeros(sum(math.prod(shape) for shape in shapes.values()), like)

    @abstractmethod
    def add_fisher(self, h: torch.Tensor, grads: dict[str, torch.Tensor]) -> torch.Tensor:
        """``h + Σ_b g_b g_bᵀ`` for per-example gradients ``{name: (B, *shape)}``."""

    @abstractmethod
    def add_ggn(
        self, h: torch.Tensor, jac: torch.Tensor, weight: torch.Tensor, jp: torch.Tensor | None
    ) -> torch.Tensor:
        """``h + Σ_b (J_bᵀ diag(w_b) J_b - j_b j_bᵀ)`` for Jacobians ``jac (B, O, P)``, output
        weights ``weight (B, O)`` and ``jp (B, P)`` (``J_bᵀ p_b`` of a categorical; ``None``:
        no such term)."""

    @abstractmethod
    def precision(self, h: torch.Tensor, lam: float) -> torch.Tensor:
        """``H + λ I`` in this structure."""

    @abstractmethod
    def covariance(self, h: torch.Tensor, lam: float) -> torch.Tensor:
        """``(H + λ I)⁻¹`` as a ``(P, P)`` matrix."""

    @abstractmethod
    def sample(
        self, mean: torch.Tensor, h: torch.Tensor, lam: float, num_samples: int
    ) -> torch.Tensor:
        """``(S, P)`` draws of the posterior (the global RNG of ``mean``'s device)."""

    @abstractmethod
    def eigenvalues(self, h: torch.Tensor) -> torch.Tensor:
        """The eigenvalues of ``H`` in float64, clipped at 0."""

    @abstractmethod
    def log_det(self, h: Any, lam: float | torch.Tensor) -> torch.Tensor:
        """``log det(H + Λ)`` (a scalar), ``Λ = λ I`` or ``diag(lam)`` for a ``(P,)`` ``lam``."""

    def group_eigenvalues(self, h: Any, sizes: list[int]) -> list[torch.Tensor] | None:
        """The eigenvalues of ``H`` (float64, clipped at 0) per parameter tensor of ``sizes``
        entries, where ``H`` has no terms between the tensors (so the evidence is a sum over
        them); ``None`` where it has."""
        return None

    @abstractmethod
    def functional_variance(self, h: torch.Tensor, lam: float, jac: torch.Tensor) -> torch.Tensor:
        """``diag(J Σ Jᵀ)`` per row: the variance of each output of the linearised net,
        ``(B, O)`` for Jacobians ``jac (B, O, P)`` (a :attr:`layerwise` structure: its layers'
        ``(deltas, inputs)`` instead) and ``Σ = (H + λ I)⁻¹``."""

    def variance_fn(self, h: Any, lam: float | torch.Tensor) -> Callable[[Any], torch.Tensor]:
        """:meth:`functional_variance` as a function of ``jac`` alone, with what it needs of
        ``Σ`` (a factorisation of ``H + λ I``) worked out once, for many blocks of rows.

        Example:
            >>> from bnn_pyro.methods.laplace.structures import FullHessian
            >>> s, jac = FullHessian(), torch.ones(2, 1, 2)  # two rows, one output, P = 2
            >>> variance = s.variance_fn(torch.eye(2), 1.0)  # Σ = I / 2
            >>> torch.allclose(variance(jac), torch.ones(2, 1))  # J Σ Jᵀ = 2 / 2 per row
            True
        """
        return lambda jac: self.functional_variance(h, lam, jac)

    def add_layer_ggn(
        self,
        h: Any,
        deltas: dict[str, torch.Tensor],
        inputs: dict[str, torch.Tensor],
        weight: torch.Tensor,
        categorical: bool,
        shapes: dict[str, torch.Size] | None = None,
    ) -> Any:
        """``h`` plus the GGN of ``B`` rows from each linear layer's output Jacobians ``deltas
        {layer: (B, O, out)}`` and inputs ``{layer: (B, in)}`` (:func:`~bnn_pyro.methods.
        laplace.curvature.layer_jacobians`), output weights ``weight (B, O)`` (``Λ = diag(p) -
        p pᵀ`` where ``categorical``), for the parameters of ``shapes`` ``{name: shape}`` (the
        flat θ's order); a :attr:`layerwise` or :attr:`takes_layers` structure only.

        Example:
            >>> from bnn_pyro.methods.laplace.structures import FullHessian
            >>> FullHessian().add_layer_ggn(torch.zeros(1, 1), {}, {}, torch.ones(1, 1), False)
            Traceback (most recent call last):
              ...
            TypeError: FullHessian sums full Jacobians: call add_ggn
        """
        raise TypeError(f"{type(self).__name__} sums full Jacobians: call add_ggn")

    def layer_variance_fn(
        self, h: Any, lam: float | torch.Tensor, shapes: dict[str, torch.Size]
    ) -> Callable[[Any], torch.Tensor]:
        """:meth:`variance_fn` for the layers' ``(deltas, inputs)`` instead of full Jacobians
        (the parameters of ``shapes``, as :meth:`add_layer_ggn`); a :attr:`layerwise` structure
        takes them in :meth:`variance_fn` already.

        Example:
            >>> from bnn_pyro.methods.laplace.structures import FullHessian
            >>> FullHessian().layer_variance_fn(torch.eye(1), 1.0, {"w": torch.Size([1])})
            Traceback (most recent call last):
              ...
            TypeError: FullHessian takes full Jacobians: call variance_fn
        """
        if not self.layerwise:
            raise TypeError(f"{type(self).__name__} takes full Jacobians: call variance_fn")
        return self.variance_fn(h, lam)

    @abstractmethod
    def functional_covariance(self, h: torch.Tensor, lam: float, jac: torch.Tensor) -> torch.Tensor:
        """``J Σ Jᵀ``: the joint covariance of every output of the linearised net at every row,
        ``(B O, B O)`` (row-major over ``(B, O)``) for Jacobians ``jac (B, O, P)`` (a
        :attr:`layerwise` structure: its layers' ``(deltas, inputs)``)."""


def map_tensors(h: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``fn`` applied to every tensor of ``H`` as a structure keeps it (a tensor, or a dict of
    them): moving, casting, summing over ranks.

    Example:
        >>> map_tensors({"n": torch.tensor(2.0)}, lambda t: t * 2)
        {'n': tensor(4.)}
    """
    if isinstance(h, dict):
        return {k: fn(v) for k, v in h.items()}
    return fn(h)
