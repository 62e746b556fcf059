"""Recalibration of a regression method's Gaussian predictive on held-out rows: one scale
(:class:`ScaleRecalibration`) or a monotone map of its levels (:class:`IsotonicRecalibration`).

``ScaleRecalibration``: one multiplier ``s`` per output for the predictive standard deviation,
``σ → s σ``, fitted on calibration rows the method never saw. For a Gaussian predictive the
maximum-likelihood ``s`` has a closed form: ``s² = mean(((y - μ) / σ)²)`` over the calibration
rows (the derivative of ``Σ log N(y; μ, s²σ²)`` in ``s`` is ``-n/s + Σ z²/s³``). An
over-confident model (``s > 1``) gets wider intervals, an under-confident one narrower.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import torch

from bnn_pyro._checks import check_float
from bnn_pyro.calibration.moments import calibration_rows, check_method, predictive_moments
from bnn_pyro.calibration.saving import SavedWithMethod
from bnn_pyro.exceptions import NotFittedError

__all__ = ["IsotonicRecalibration", "Recalibration", "ScaleRecalibration"]


class Recalibration(SavedWithMethod):
    """A map of a fitted regression method's Gaussian predictive, fitted on held-out rows.

    Args:
        method: a fitted regression method (any with ``predictive_gaussian``).
        **predict_options: passed to the method's ``predict`` (``num_samples``, ``seed``).

    A subclass fits its map from the calibration rows' predictive mean, standard deviation and
    targets (:meth:`fit_rows`). ``save(path)`` writes the map with its method, and
    :func:`bnn_pyro.load` rebuilds both (:class:`~bnn_pyro.calibration.saving.SavedWithMethod`).

    Example:
        >>> class Identity(Recalibration):
        ...     def fit_rows(self, mean, sd, y):
        ...         self.rows = len(y)
        ...     def calibrator_state(self):
        ...         return {"rows": self.rows}
        ...     def restore_calibrator_state(self, state):
        ...         self.rows = state["rows"]
        >>> import bnn_pyro as bp, torch.nn as nn
        >>> la = bp.LaplaceApproximation(nn.Linear(1, 1), "regression", noise_scale=0.5)
        >>> _ = la.fit(torch.randn(20, 1), torch.randn(20), epochs=0, progress=False)
        >>> Identity(la).fit(torch.zeros(5, 1), torch.zeros(5)).rows
        5
    """

    def __init__(self, method: Any, **predict_options: Any) -> None:
        self.method = check_method(method)
        self.predict_options = predict_options

    def fit(self, X_cal: Any, y_cal: Any) -> Recalibration:
        """Fit the map on calibration rows.

        Args:
            X_cal: ``(n, D)`` inputs the method was not fitted on.
            y_cal: ``(n,)`` or ``(n, O)`` targets.

        Returns:
            ``self``.
        """
        mean, sd, y = calibration_rows(self.method, X_cal, y_cal, **self.predict_options)
        self.fit_rows(mean, sd, y)
        return self

    @abstractmethod
    def fit_rows(self, mean: torch.Tensor, sd: torch.Tensor, y: torch.Tensor) -> None:
        """Fit the map from the predictive ``mean``, ``sd`` and the targets ``y``, ``(n, O)``
        each."""


class ScaleRecalibration(Recalibration):
    """One standard-deviation multiplier per output, fitted in closed form on held-out rows.

    Args:
        method: a fitted regression method (any with ``predictive_gaussian``).
        **predict_options: passed to the method's ``predict`` (``num_samples``, ``seed``).

    Attributes:
        factor: ``(O,)`` the multipliers ``s`` (``None`` before :meth:`fit`).

    Example:
        >>> import bnn_pyro as bp, torch.nn as nn
        >>> g = torch.Generator().manual_seed(0)
        >>> X = torch.randn(600, 1, generator=g); y = X[:, 0] + torch.randn(600, generator=g)
        >>> la = bp.LaplaceApproximation(nn.Linear(1, 1), "regression", noise_scale=0.2)
        >>> _ = la.fit(X[:300], y[:300], epochs=100, lr=0.05, progress=False)
        >>> la.noise_scale = 0.2  # over-confident on purpose: the noise sd is 1
        >>> recal = ScaleRecalibration(la, seed=0).fit(X[300:], y[300:])
        >>> 4.0 < float(recal.factor[0]) < 6.0  # about 1 / 0.2
        True
        >>> mean, sd = recal.predict_moments(X[:3])
        >>> sd.shape
        torch.Size([3, 1])
    """

    factor: torch.Tensor | None = None

    def fit_rows(self, mean: torch.Tensor, sd: torch.Tensor, y: torch.Tensor) -> None:
        """``s² = mean(((y - μ) / σ)²)`` per output."""
        self.factor = ((y - mean) / sd).pow(2).mean(0).sqrt()

    def calibrator_state(self) -> dict[str, Any]:
        """``{"factor": s}``."""
        return {"factor": self.factor}

    def restore_calibrator_state(self, state: dict[str, Any]) -> None:
        """Put back ``factor``."""
        self.factor = state.get("factor")

    def predict_moments(self, X: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """The recalibrated predictive: ``μ`` and ``s σ``, each ``(N, O)``."""
        if self.factor is None:
            raise NotFittedError("ScaleRecalibration is not fitted: call fit() first")
        mean, sd = predictive_moments(self.method, X, **self.predict_options)
        return mean, sd * self.factor.to(sd)


def _isotonic(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The non-decreasing least-squares fit of ``y`` on ``x`` (pool adjacent violators): the
    sorted ``x`` and the fitted values there."""
    order = x.argsort()
    xs, ys = x[order], y[order].tolist()
    values, weights, sizes = [], [], []
    for v in ys:
        values.append(v)
        weights.append(1.0)
        sizes.append(1)
        while len(values) > 1 and values[-2] > values[-1]:  # a violation: pool the two blocks
            w = weights[-2] + weights[-1]
            values[-2] = (values[-2] * weights[-2] + values[-1] * weights[-1]) / w
            weights[-2], sizes[-2] = w, sizes[-2] + sizes[-1]
            del values[-1], weights[-1], sizes[-1]
    fitted = torch.repeat_interleave(x.new_tensor(values), x.new_tensor(sizes, dtype=torch.long))
    return xs, fitted


class IsotonicRecalibration(Recalibration):
    """Kuleshov et al. (2018): a monotone map from the predictive's levels to observed ones.

    On calibration rows, each target's level under the method's Gaussian predictive is
    ``u = Φ(z)`` with ``z = (y - μ) / σ`` (its probability integral transform); for a
    calibrated model the ``u`` are uniform. The map ``R`` is the isotonic regression of the
    empirical CDF of the ``u`` on the ``u``: ``R(p)`` is the share of calibration targets at or
    below their level-``p`` quantile. A recalibrated quantile of level ``p`` is the original
    quantile of the level ``p'`` with ``R(p') = p``. The map is kept in ``z`` rather than in
    ``u`` (an isotonic fit does not change under a monotone change of its inputs, and ``Φ``
    would round the levels of a badly over-confident model to 0 or 1): the recalibrated
    level-``p`` quantile is ``μ + σ G⁻¹(p)``, with ``G`` the fitted map in ``z``, linear between
    the calibration points and held at the extreme ``z`` beyond them. The predictive is
    moment-matched to one Gaussian ``N(μ, σ²)`` per point.

    Args:
        method: a fitted regression method (any with ``predictive_gaussian``).
        **predict_options: passed to the method's ``predict``.

    Example:
        >>> import bnn_pyro as bp, torch.nn as nn
        >>> g = torch.Generator().manual_seed(1)
        >>> X = 4 * torch.rand(800, 1, generator=g) - 2
        >>> y = 3 * X[:, 0] + 2 * torch.randn(800, generator=g)  # noise sd 2
        >>> la = bp.LaplaceApproximation(nn.Linear(1, 1), "regression", noise_scale=0.5)  # kept
        >>> _ = la.fit(X[:300], y[:300], epochs=100, lr=0.05, progress=False)
        >>> recal = IsotonicRecalibration(la, seed=0).fit(X[300:600], y[300:600])
        >>> lower, upper = recal.predict_interval(X[600:], alpha=0.1)
        >>> 0.8 < bp.metrics.picp(lower, upper, y[600:, None]) < 0.97
        True
    """

    z: torch.Tensor | None = None  # the sorted standardised residuals of the rows
    observed: torch.Tensor | None = None  # the fitted map there, non-decreasing

    def fit_rows(self, mean: torch.Tensor, sd: torch.Tensor, y: torch.Tensor) -> None:
        """The isotonic fit of the empirical CDF of ``z = (y - μ) / σ`` (outputs pooled)."""
        z = ((y - mean) / sd).reshape(-1).double().cpu()
        if len(z) < 2:
            raise ValueError(f"the isotonic map needs at least 2 calibration rows, got {len(z)}")
        # the share at or below each z: its rank among the sorted z, ties counted (O(n log n))
        empirical = torch.searchsorted(z.sort().values, z, right=True).double() / len(z)
        self.z, self.observed = _isotonic(z, empirical)

    def calibrator_state(self) -> dict[str, Any]:
        """``{"z", "observed"}``: the fitted map."""
        return {"z": self.z, "observed": self.observed}

    def restore_calibrator_state(self, state: dict[str, Any]) -> None:
        """Put back the fitted map."""
        self.z, self.observed = state.get("z"), state.get("observed")

    def standardized_quantile(self, p: torch.Tensor | list[float]) -> torch.Tensor:
        """``G⁻¹(p)``: the recalibrated level-``p`` quantile in units of ``σ`` from ``μ``.

        Args:
            p: ``(L,)`` levels in ``[0, 1]``.

        Returns:
            ``(L,)`` float64 quantiles, linear between the calibration points and held at the
            lowest ``z`` below the lowest level.
        """
        if self.z is None or self.observed is None:
            raise NotFittedError("IsotonicRecalibration is not fitted: call fit() first")
        p = torch.as_tensor(p, dtype=torch.float64, device=self.z.device)
        if p.ndim != 1 or not bool(((p >= 0) & (p <= 1)).all()):
            raise ValueError(f"p must be a list of levels in [0, 1], got {p.tolist()}")
        # the top level is the share of rows at or below the largest z, 1, so p <= 1 finds an
        # i <= n - 1 and lies in (y0, y1]: only t < 0 (p below the lowest level) needs a bound
        i = torch.searchsorted(self.observed, p).clamp(min=1)
        x0, x1 = self.z[i - 1], self.z[i]
        y0, y1 = self.observed[i - 1], self.observed[i]
        t = torch.where(y1 > y0, (p - y0) / (y1 - y0), torch.ones_like(p))
        return x0 + t.clamp(min=0) * (x1 - x0)

    def predict_interval(self, X: Any, alpha: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
        """The recalibrated central interval of level ``1 - alpha``, ``(N, O)`` each."""
        alpha = check_float("alpha", alpha, minimum=0.0, strict=True, maximum=1.0)
        mean, sd = predictive_moments(self.method, X, **self.predict_options)
        lo, hi = self.standardized_quantile([alpha / 2, 1 - alpha / 2]).tolist()
        return mean + lo * sd, mean + hi * sd
