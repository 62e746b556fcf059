"""The predictive of the Laplace approximation: posterior draws of the parameters, the net or
its linearisation on them, and the closed-form variance of the linearisation (the GLM)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import torch.nn as nn

from bnn_pyro._checks import check_int
from bnn_pyro._rng import seeded
from bnn_pyro.methods.classic.params import batched_call, linearized_call, unflatten
from bnn_pyro.methods.classic.training import modes, module_device
from bnn_pyro.methods.laplace.curvature import (
    jacobian_blocks,
    layer_jacobians,
    output_jacobians,
)
from bnn_pyro.methods.laplace.kron import LayerJacobians
from bnn_pyro.methods.laplace.structures import HessianStructure

__all__ = ["LaplacePredictive"]


class LaplacePredictive:
    """The prediction half of :class:`~bnn_pyro.methods.laplace.laplace.LaplaceApproximation`,
    which provides the fitted posterior it reads: ``model``, ``structure``, ``mean``,
    ``prior_precision``, ``predictive``, the flat mean and curvature (``_require_fit``) and λ as
    the structures take it (``_lam``).

    Example:
        >>> import bnn_pyro as bp
        >>> issubclass(bp.LaplaceApproximation, LaplacePredictive)
        True
    """

    model: nn.Module
    structure: HessianStructure
    prior_precision: float | tuple[float, ...]
    predictive: str
    _shapes: dict[str, torch.Size]

    def sample_parameters(self, num_samples: int) -> dict[str, torch.Tensor]:
        """``{name: (S, *shape)}`` draws of the Bayesian parameters from the posterior."""
        mean, h = self._require_fit()
        check_int("num_samples", num_samples)
        flat = self.structure.sample(mean, h, self._lam(), num_samples)
        return unflatten(flat, self._shapes)

    def glm_variance(self, x: Any, chunk_size: int = 256) -> torch.Tensor:
        """The closed-form variance of the linearised net's outputs under the posterior,
        ``diag(J(x) Σ J(x)ᵀ)`` with ``Σ = (H + λ I)⁻¹`` and ``J(x)`` the Jacobian of the outputs
        in the Bayesian parameters at θ*: no sampling (laplace-torch's ``pred_type="glm"``
        ``f_var``, per output). For regression it is the epistemic variance of the mean (add
        ``noise_scale²`` for the predictive of ``y``); for classification, of the logits.

        Args:
            x: ``(N, ...)`` inputs.
            chunk_size: rows per Jacobian pass, at most: the rows and the outputs of a pass are
                cut down further to keep its ``rows x outputs x P`` numbers under
                :data:`~bnn_pyro.methods.laplace.curvature.JACOBIAN_BLOCK_BYTES`.

        Returns:
            ``(N, O)``.

        Raises:
            TypeError, ValueError: ``x`` is not a tensor of the net's input shape (as in
                ``predict``), or ``chunk_size`` is not an int >= 1.

        Example:
            >>> from bnn_pyro import LaplaceApproximation
            >>> _ = torch.manual_seed(0)
            >>> net = nn.Linear(1, 1)
            >>> la = LaplaceApproximation(net, "regression", hessian_structure="full",
            ...                           noise_scale=0.5)
            >>> _ = la.fit(torch.randn(50, 1), torch.randn(50), epochs=0, progress=False)
            >>> la.glm_variance(torch.zeros(3, 1)).shape
            torch.Size([3, 1])
        """
        h, lam = self._require_fit()[1], self._lam()
        parts = [
            torch.cat([self.structure.functional_variance(h, lam, jac) for jac in blocks], dim=1)
            for blocks in self._jacobian_blocks(x, chunk_size, by_output=True)
        ]
        return torch.cat(parts)

    def glm_covariance(self, x: Any, chunk_size: int = 256) -> torch.Tensor:
        """The joint covariance of the linearised net's outputs at all of ``x``'s rows under the
        posterior, ``J(x) Σ J(x)ᵀ`` (laplace-torch's ``pred_type="glm", joint=True``): the
        correlations between predictions that :meth:`glm_variance`'s diagonal drops, for joint
        draws of a whole curve, or the uncertainty of a sum or a difference of predictions.

        Args:
            x: ``(N, ...)`` inputs.
            chunk_size: rows per Jacobian pass (the Jacobians of all rows are kept:
                ``N x O x P`` numbers, and the result ``(N O)²``).

        Returns:
            ``(N O, N O)``, rows and columns ordered as ``(N, O)`` flattened row-major: entry
            ``[i O + a, j O + b]`` is the covariance of output ``a`` at row ``i`` and output
            ``b`` at row ``j``. Its diagonal is :meth:`glm_variance` flattened.

        Raises:
            TypeError, ValueError: as :meth:`glm_variance`.

        Example:
            >>> from bnn_pyro import LaplaceApproximation
            >>> _ = torch.manual_seed(0)
            >>> la = LaplaceApproximation(nn.Linear(1, 1), "regression",
            ...                           hessian_structure="full", noise_scale=0.5)
            >>> _ = la.fit(torch.randn(50, 1), torch.randn(50), epochs=0, progress=False)
            >>> x = torch.tensor([[0.0], [1.0], [2.0]])
            >>> cov = la.glm_covariance(x)
            >>> cov.shape, torch.allclose(cov.diagonal(), la.glm_variance(x).flatten())
            (torch.Size([3, 3]), True)
        """
        h = self._require_fit()[1]
        blocks = [b[0] for b in self._jacobian_blocks(x, chunk_size)]
        if self.structure.layerwise:  # (deltas, inputs) per block: joined per layer
            jac = tuple({k: torch.cat([b[i][k] for b in blocks]) for k in blocks[0][i]}
                        for i in range(2))  # fmt: skip
        else:
            jac = torch.cat(blocks)
        return self.structure.functional_covariance(h, self._lam(), jac)

    def _jacobian_blocks(
        self, x: Any, chunk_size: int, by_output: bool = False
    ) -> Iterator[list[torch.Tensor | LayerJacobians]]:
        """``x`` checked as ``predict`` checks it (type, dtype and shape, by name), then per
        block of at most ``chunk_size`` rows, the Jacobians ``(B, O, P)`` of the net's outputs in
        the Bayesian parameters at θ* (a layerwise structure, KFAC: each layer's ``(deltas,
        inputs)`` instead), as a list of one; ``by_output``: as a list of ``(B, O', P)`` blocks
        over the outputs, each under :data:`~bnn_pyro.methods.laplace.curvature.
        JACOBIAN_BLOCK_BYTES` (the rows cut down to fit first). The net is in eval mode, no
        graph kept."""
        mean, _ = self._require_fit()
        check_int("chunk_size", chunk_size)
        x = self._check_x(x).to(module_device(self.model))
        params = unflatten(mean, self._shapes)
        with modes(self.model, lambda m: False), torch.no_grad():
            if self.structure.layerwise:
                for rows in x.split(chunk_size):
                    yield [layer_jacobians(self.model, params, rows)[:2]]
                return
            if not by_output:
                for rows in x.split(chunk_size):
                    yield [output_jacobians(self.model, params, rows)[0]]
                return
            outputs = self.model(x[:1]).shape[-1]
            n_rows, n_outs = jacobian_blocks(chunk_size, outputs, mean.numel(), mean.element_size())
            for rows in x.split(min(chunk_size, n_rows)):
                yield [
                    output_jacobians(self.model, params, rows, slice(o, o + n_outs))[0]
                    for o in range(0, outputs, n_outs)
                ]

    def _sample_outputs(self, x: torch.Tensor, num_samples: int, seed: int | None) -> torch.Tensor:
        """``predictive="nn"``: the net on each posterior sample; ``"glm"``: the linearised net."""
        self._require_fit()
        with seeded(seed, module_device(self.model)):
            stacked = self.sample_parameters(num_samples)
        with modes(self.model, lambda m: False):
            if self.predictive == "nn":
                samples = batched_call(self.model, stacked, x)
            else:
                samples = linearized_call(self.model, self.mean, stacked, x)
        return samples
