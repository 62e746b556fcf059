"""Conformalized quantile regression (CQR; Romano, Patterson & Candès 2019) around any
regression method, from the quantiles of its own predictive.

The method's predictive gives a lower and an upper quantile at each ``x``: levels ``alpha/2``
and ``1 - alpha/2`` of the mixture ``1/S Σ_s Normal(locs[s], scales[s])``
(:func:`~bnn_pyro.calibration.predictive_quantiles`). On calibration rows the method never saw,
each row scores ``E = max(q_lo(x) - y, y - q_hi(x))``: how far ``y`` lies outside the band
(negative inside). With ``Q`` the ``⌈(n + 1)(1 - alpha)⌉``-th smallest score
(:func:`~bnn_pyro.calibration.conformal.conformal_quantile`), the interval
``[q_lo(x) - Q, q_hi(x) + Q]`` holds a new exchangeable ``y`` with probability at least
``1 - alpha``. Unlike :class:`~bnn_pyro.calibration.SplitConformal`'s symmetric ``μ ± q σ``,
it keeps the predictive's own shape: a skewed or two-humped mixture gives a lopsided band.
The levels of the quantiles are those of the interval, so ``alpha`` is fixed when calibrating.
"""

from __future__ import annotations

from typing import Any

import torch

from bnn_pyro._checks import check_float
from bnn_pyro.calibration.conformal import conformal_quantile
from bnn_pyro.calibration.moments import calibration_targets, check_method, predictive_quantiles
from bnn_pyro.calibration.saving import SavedWithMethod
from bnn_pyro.exceptions import NotFittedError

__all__ = ["QuantileConformal"]


class QuantileConformal(SavedWithMethod):
    """Conformalized quantile regression: the method's predictive quantile band, widened (or
    narrowed) by one calibrated amount to a guaranteed ``1 - alpha`` coverage.

    Args:
        method: a fitted regression method (any with ``predictive_gaussian``).
        alpha: the miss rate allowed, in ``(0, 1)``: the band is between the predictive's
            ``alpha/2`` and ``1 - alpha/2`` quantiles.
        **predict_options: passed to the method's ``predict`` on calibration and test rows
            (``num_samples``, ``seed``; give a ``seed`` for intervals that repeat).

    Attributes:
        scores: the ``(n, O)`` calibration scores (``None`` before :meth:`calibrate`).
        correction: ``(O,)`` the calibrated ``Q`` added to each side (``None`` before).

    ``save(path)`` writes the calibration with its method, and :func:`bnn_pyro.load` rebuilds
    both.

    Example:
        >>> import bnn_pyro as bp, torch.nn as nn
        >>> g = torch.Generator().manual_seed(0)
        >>> X = torch.randn(400, 1, generator=g)
        >>> y = 2 * X[:, 0] + 0.3 * torch.randn(400, generator=g)
        >>> la = bp.LaplaceApproximation(nn.Linear(1, 1), "regression", noise_scale=0.1)
        >>> _ = la.fit(X[:200], y[:200], epochs=200, lr=0.05, progress=False)
        >>> cqr = QuantileConformal(la, alpha=0.1, seed=0).calibrate(X[200:300], y[200:300])
        >>> bool(cqr.correction > 0)  # noise sd 0.1 assumed, 0.3 true: the band is widened
        True
        >>> lower, upper = cqr.predict_interval(X[300:])
        >>> 0.8 < bp.metrics.picp(lower, upper, y[300:, None]) <= 1.0
        True
    """

    def __init__(self, method: Any, alpha: float = 0.1, **predict_options: Any) -> None:
        self.method = check_method(method)
        self.alpha = check_float("alpha", alpha, minimum=0.0, strict=True, maximum=1.0)
        self.predict_options = predict_options
        self.scores: torch.Tensor | None = None
        self.correction: torch.Tensor | None = None

    def calibrator_state(self) -> dict[str, Any]:
        """``{"alpha", "scores", "correction"}``."""
        return {"alpha": self.alpha, "scores": self.scores, "correction": self.correction}

    def restore_calibrator_state(self, state: dict[str, Any]) -> None:
        """Put back ``alpha``, the scores and the correction."""
        self.alpha = check_float("alpha", state.get("alpha"), minimum=0.0, strict=True, maximum=1.0)
        self.scores, self.correction = state.get("scores"), state.get("correction")

    def band(self, X: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """The predictive's ``alpha/2`` and ``1 - alpha/2`` quantiles at each row, ``(N, O)``
        each, before calibration."""
        q = predictive_quantiles(
            self.method, X, [self.alpha / 2, 1 - self.alpha / 2], **self.predict_options
        )
        return q[0], q[1]

    def calibrate(self, X_cal: Any, y_cal: Any) -> QuantileConformal:
        """Score the calibration rows (which the method must not have been fitted on) and fix
        the correction ``Q``.

        Args:
            X_cal: ``(n, D)`` inputs.
            y_cal: ``(n,)`` or ``(n, O)`` targets.

        Returns:
            ``self``.

        Raises:
            ValueError: ``y_cal`` does not match the predictions, or too few rows for
                ``alpha``.
        """
        lower, upper = self.band(X_cal)
        y = calibration_targets(y_cal, lower)
        scores = torch.maximum(lower - y, y - upper)
        self.correction = conformal_quantile(scores, self.alpha)
        self.scores = scores
        return self

    def predict_interval(self, X: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """The conformalized band ``[q_lo - Q, q_hi + Q]`` at each row of ``X``.

        Args:
            X: ``(N, D)`` inputs.

        Returns:
            ``lower`` and ``upper``, each ``(N, O)``.
        """
        if self.correction is None:
            raise NotFittedError("QuantileConformal is not calibrated: call calibrate() first")
        lower, upper = self.band(X)
        q = self.correction.to(lower)
        # a negative Q narrows the band; where it would cross, the interval is the midpoint
        middle = (lower + upper) / 2
        return torch.minimum(lower - q, middle), torch.maximum(upper + q, middle)
