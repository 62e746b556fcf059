"""The prior precision λ of the Laplace approximation and the evidence ``log p(D | λ)`` that
chooses it: a scalar λ, one per Bayesian parameter tensor (layerwise), or one per coordinate
(diagonal)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from bnn_pyro._checks import check_choice, check_float
from bnn_pyro.likelihoods import noise_latents
from bnn_pyro.methods.classic.training import modes
from bnn_pyro.methods.laplace import gaussian_posterior as gp
from bnn_pyro.methods.laplace.structures import HessianStructure, map_tensors
from bnn_pyro.threads import uses_threads

__all__ = ["LaplaceEvidence"]


class LaplaceEvidence:
    """The evidence half of :class:`~bnn_pyro.methods.laplace.laplace.LaplaceApproximation`,
    which provides the fitted posterior it reads: ``structure``, ``hessian_structure``,
    ``prior_precision``, the parameters' shapes (``_shapes``), the log-likelihood at θ*
    (``_loglik``) and the flat mean and curvature (``_require_fit``); and, for the held-out
    criterion, the net (``model``), ``likelihood``, ``noise_scale``, the input check (``_check_x``)
    and :meth:`~bnn_pyro.methods.laplace.predictive.LaplacePredictive.glm_variance`.

    Example:
        >>> import bnn_pyro as bp
        >>> issubclass(bp.LaplaceApproximation, LaplaceEvidence)
        True
    """

    structure: HessianStructure
    hessian_structure: str
    prior_precision: float | tuple[float, ...]
    _shapes: dict[str, torch.Size]
    _loglik: float

    @uses_threads  # on the library's thread count (bnn_pyro.threads), as fit is
    def log_marginal_likelihood(
        self, prior_precision: float | Sequence[float] | None = None
    ) -> torch.Tensor:
        """Laplace log-evidence ``log p(D | λ)`` at θ* (float64 scalar tensor).

        ``log p(D|θ*) - Σ_i λ_i θ*_i² / 2 + Σ_i log λ_i / 2 - log det(H + Λ) / 2`` with
        ``Λ = diag(λ_i)`` (``λ I`` for a scalar λ; layerwise, each parameter tensor's λ on its
        coordinates; diagonal, one λ_i per coordinate). It is exact for a linear model with a
        Gaussian likelihood when θ* is the MAP under λ.

        Args:
            prior_precision: λ to evaluate (a float, one per Bayesian parameter tensor, or one
                per Bayesian coordinate); default the current one.

        Example:
            >>> import torch.nn as nn
            >>> from bnn_pyro import LaplaceApproximation
            >>> la = LaplaceApproximation(nn.Linear(2, 1), "regression", noise_scale=0.5)
            >>> _ = la.fit(torch.randn(20, 2), torch.randn(20), epochs=0, progress=False)
            >>> la.log_marginal_likelihood().dtype
            torch.float64
            >>> # one λ per tensor, all equal: the scalar λ's evidence (to round-off)
            >>> one = la.log_marginal_likelihood(1.0)
            >>> torch.isclose(la.log_marginal_likelihood([1.0, 1.0]), one)
            tensor(True)
        """
        mean, h = self._require_fit()
        lam = self.prior_precision if prior_precision is None else prior_precision
        lam = self._checked_prior(lam)
        if isinstance(lam, float):
            return gp.log_evidence(self._loglik, mean, self.structure.eigenvalues(h), lam)
        groups = self.structure.group_eigenvalues(h, self._sizes())
        if groups is None or len(lam) != len(self._shapes):  # log det(H + Λ) directly
            per = self._per_coordinate(lam, torch.float64)
            logdet = self.structure.log_det(map_tensors(h, torch.Tensor.double), per)
            theta = mean.double()
            return (self._loglik - 0.5 * (per * theta**2).sum() + 0.5 * per.log().sum()
                    - 0.5 * logdet)  # fmt: skip
        means = mean.split(self._sizes())
        return (
            sum(
                gp.log_evidence(0.0, m, e, value)
                for m, e, value in zip(means, groups, lam, strict=True)
            )
            + self._loglik
        )

    @uses_threads  # on the library's thread count (bnn_pyro.threads), as fit is
    def optimize_prior_precision(
        self,
        bounds: tuple[float, float] = (1e-8, 1e8),
        layerwise: bool = False,
        *,
        method: str = "evidence",
        validation: tuple[Any, Any] | None = None,
        grid: Sequence[float] | None = None,
        diagonal: bool = False,
    ) -> float | tuple[float, ...]:
        """Set λ to the maximiser of :meth:`log_marginal_likelihood` (``method="evidence"``,
        the default; ``"marglik"`` is the same) or of the held-out
        :meth:`validation_log_likelihood` over a grid (``method="gridsearch"``), and return it.

        The derivative of the log-evidence in λ is strictly decreasing, so the maximiser is
        found exactly by bisection in ``log λ`` within ``bounds``; it
        satisfies MacKay's fixed point ``λ = γ / ‖θ*‖²``, ``γ = Σ_i e_i / (e_i + λ)`` over the
        eigenvalues ``e_i`` of H.

        With ``"gridsearch"``, λ is the grid's value with the highest mean log predictive
        density of the GLM predictive on ``validation`` (laplace-torch's ``method="gridsearch"``,
        whose default for regression scores the mean alone, which λ does not move).

        Args:
            bounds: ``(low, high)`` of λ (the evidence's search).
            method: ``"evidence"`` (or ``"marglik"``) or ``"gridsearch"``.
            validation: ``(x (M, ...), y)``, held-out rows for ``"gridsearch"``.
            grid: the λ to try (default 21 values from 1e-4 to 1e4, evenly in log λ).
            layerwise: one λ per Bayesian parameter tensor (laplace-torch's
                ``prior_structure="layerwise"``). The evidence of the diagonal and the KFAC
                structures is a sum over the tensors (their ``H`` has no terms between them),
                so each λ is the exact maximiser of its own term, by the same bisection;
                the full structure couples them and is refused.
            diagonal: one λ per Bayesian coordinate (laplace-torch's ``prior_structure=
                "diag"``), for ``hessian_structure="diag"``, whose evidence is then a sum of
                one term per coordinate with a closed-form maximiser
                (:func:`~bnn_pyro.methods.laplace.gaussian_posterior.optimal_diagonal_prior_precision`);
                the full and KFAC structures couple the coordinates and are refused.

        Returns:
            λ: a float, or a tuple of one per parameter tensor (``layerwise``) or per
            coordinate (``diagonal``).

        Raises:
            ValueError: ``layerwise`` with ``hessian_structure="full"``, ``diagonal`` with a
                structure other than ``"diag"`` or with ``layerwise`` or ``"gridsearch"``, or
                bad ``bounds``.

        Example:
            >>> import torch.nn as nn
            >>> from bnn_pyro import LaplaceApproximation
            >>> la = LaplaceApproximation(nn.Linear(2, 1), "regression", hessian="ggn")
            >>> _ = la.fit(torch.randn(50, 2), torch.randn(50), epochs=0, progress=False)
            >>> lam = la.optimize_prior_precision()
            >>> bool(la.log_marginal_likelihood(lam) >= la.log_marginal_likelihood(2 * lam))
            True
            >>> len(la.optimize_prior_precision(layerwise=True))  # the weight's and the bias's
            2
            >>> len(la.optimize_prior_precision(diagonal=True))  # two weights and the bias
            3
        """
        lo, hi = (check_float("bounds", b, minimum=0.0, strict=True) for b in bounds)
        if lo >= hi:
            raise ValueError(f"bounds must be (low, high) with low < high, got {bounds}")
        for name, flag in (("layerwise", layerwise), ("diagonal", diagonal)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")
        method = check_choice("method", method, ("evidence", "marglik", "gridsearch"))
        if diagonal and (layerwise or method == "gridsearch"):
            raise ValueError(
                "diagonal=True chooses one λ per coordinate by the evidence: not with "
                "layerwise=True or method='gridsearch'"
            )
        if diagonal and self.hessian_structure != "diag":
            raise ValueError(
                f"diagonal prior precisions need hessian_structure='diag' (its evidence "
                f"separates by coordinate), got {self.hessian_structure!r}"
            )
        if method == "gridsearch":
            return self._grid_search(validation, grid, layerwise)
        if validation is not None or grid is not None:
            raise ValueError("validation and grid are for method='gridsearch'")
        mean, h = self._require_fit()
        if diagonal:  # H is diag(h): its eigenvalues are h, in the coordinates' order
            lam = gp.optimal_diagonal_prior_precision(mean, self.structure.eigenvalues(h), (lo, hi))
            self.prior_precision = tuple(lam.tolist())
            return self.prior_precision
        if not layerwise:
            e = self.structure.eigenvalues(h)
            self.prior_precision = gp.optimal_prior_precision(mean, e, (lo, hi))
            return self.prior_precision
        groups = self.structure.group_eigenvalues(h, self._sizes())
        if groups is None:
            raise ValueError(
                f"layerwise prior precisions need a structure whose evidence separates by "
                f"parameter tensor ('diag' or 'kron'), got {self.hessian_structure!r}"
            )
        means = mean.split(self._sizes())
        self.prior_precision = tuple(
            gp.optimal_prior_precision(m, e, (lo, hi)) for m, e in zip(means, groups, strict=True)
        )
        return self.prior_precision

    def _sizes(self) -> list[int]:
        return [math.prod(shape) for shape in self._shapes.values()]

    def _checked_prior(self, value: Any) -> float | tuple[float, ...]:
        """A positive float, or a tuple of positive floats: one per Bayesian parameter tensor
        (layerwise) or one per Bayesian coordinate (diagonal; not for KFAC)."""
        if isinstance(value, torch.Tensor) and value.dim() == 0:
            value = float(value)
        if isinstance(value, (torch.Tensor, list, tuple)):
            items = value.reshape(-1).tolist() if isinstance(value, torch.Tensor) else value
            tensors, coordinates = len(self._shapes), sum(self._sizes())
            if len(items) not in (tensors, coordinates):
                raise ValueError(
                    f"prior_precision must be a float, one per Bayesian parameter tensor "
                    f"({tensors}: {', '.join(self._shapes)}) or one per Bayesian coordinate "
                    f"({coordinates}), got {len(items)} values"
                )
            if len(items) != tensors and self.hessian_structure == "kron":
                raise ValueError(
                    "hessian_structure='kron' takes one prior precision per parameter tensor "
                    f"({tensors}), not one per coordinate"
                )
            values = [check_float("prior_precision", v, minimum=0.0, strict=True) for v in items]
            return tuple(values)
        return check_float("prior_precision", value, minimum=0.0, strict=True)

    def _per_coordinate(self, lam: tuple[float, ...], dtype: torch.dtype) -> torch.Tensor:
        """``(P,)``: each parameter tensor's λ on its coordinates (layerwise), or λ itself (one
        per coordinate)."""
        mean = self._require_fit()[0]
        values = torch.tensor(lam, dtype=dtype, device=mean.device)
        if len(lam) != len(self._shapes):
            return values
        sizes = torch.tensor(self._sizes(), device=mean.device)
        return values.repeat_interleave(sizes)

    def _lam(self) -> float | torch.Tensor:
        """λ as the structures take it: a float, or ``(P,)`` per coordinate (layerwise,
        diagonal)."""
        lam = self.prior_precision
        if isinstance(lam, float):
            return lam
        return self._per_coordinate(lam, self._require_fit()[0].dtype)

    @uses_threads  # on the library's thread count (bnn_pyro.threads), as fit is
    def validation_log_likelihood(
        self, x: Any, y: Any, prior_precision: float | Sequence[float] | None = None
    ) -> float:
        """The mean log predictive density of held-out rows under the GLM predictive at λ:
        regression ``log N(y; f(x, θ*), J Σ Jᵀ + σ²)`` per output, summed over the outputs;
        classification ``log softmax(f / sqrt(1 + π/8 · var))[y]`` (the probit approximation
        of the linearised predictive, laplace-torch's default ``link_approx``).

        Args:
            x: ``(M, ...)`` inputs.
            y: ``(M,)`` class indices, or ``(M,)`` / ``(M, O)`` regression targets.
            prior_precision: λ to evaluate (default the current one).

        Returns:
            The mean over the ``M`` rows.

        Example:
            >>> import torch.nn as nn
            >>> from bnn_pyro import LaplaceApproximation
            >>> la = LaplaceApproximation(nn.Linear(2, 1), "regression", noise_scale=0.5)
            >>> _ = la.fit(torch.randn(50, 2), torch.randn(50), epochs=0, progress=False)
            >>> isinstance(la.validation_log_likelihood(torch.randn(9, 2), torch.randn(9)), float)
            True
        """
        self._require_fit()
        saved = self.prior_precision
        lam = saved if prior_precision is None else self._checked_prior(prior_precision)
        x = self._check_x(x)
        y = torch.as_tensor(y, device=x.device)
        if len(y) != len(x):
            raise ValueError(f"y must have {len(x)} rows (len(x)), got shape {tuple(y.shape)}")
        try:
            self.prior_precision = lam
            var = self.glm_variance(x)  # (M, O)
        finally:
            self.prior_precision = saved
        with torch.no_grad(), modes(self.model, lambda m: False):
            f = self.model(x)
        noise = self.noise_scale
        sigma = None if noise is None else torch.as_tensor(noise, dtype=f.dtype, device=f.device)
        yt = self.likelihood.check_targets(y, f.shape[-1])
        log_density = self.likelihood.predictive_log_prob(f, var, yt, noise_latents(sigma))
        return float(log_density.mean())

    def _grid_search(self, validation: Any, grid: Sequence[float] | None, layerwise: bool) -> float:
        if layerwise:
            raise ValueError("method='gridsearch' searches one scalar λ: use layerwise=False")
        if not (isinstance(validation, (tuple, list)) and len(validation) == 2):
            raise ValueError("method='gridsearch' needs validation=(x, y), the held-out rows")
        values = [10.0 ** (k / 2.5) for k in range(-10, 11)] if grid is None else grid
        values = [check_float("grid", v, minimum=0.0, strict=True) for v in values]
        if not values:
            raise ValueError("grid must hold at least one prior precision")
        scores = [self.validation_log_likelihood(*validation, prior_precision=v) for v in values]
        self.prior_precision = values[max(range(len(values)), key=scores.__getitem__)]
        return self.prior_precision
