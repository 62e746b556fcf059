"""Recalibration of a regression method's Gaussian predictive on held-out rows.

``ScaleRecalibration``: one multiplier ``s`` per output for the predictive standard deviation,
``σ → s σ``, fitted on calibration rows the method never saw. For a Gaussian predictive the
maximum-likelihood ``s`` has a closed form: ``s² = mean(((y - μ) / σ)²)`` over the calibration
rows (the derivative of ``Σ log N(y; μ, s²σ²)`` in ``s`` is ``-n/s + Σ z²/s³``). An
over-confident model (``s > 1``) gets wider intervals, an under-confident one narrower.
"""

from __future__ import annotations

from typing import Any

import torch

from bnn_pyro._checks import as_tensor
from bnn_pyro.calibration.moments import predictive_moments
from bnn_pyro.exceptions import NotFittedError

__all__ = ["ScaleRecalibration"]


class ScaleRecalibration:
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

    def __init__(self, method: Any, **predict_options: Any) -> None:
        if not callable(getattr(method, "predictive_gaussian", None)):
            raise TypeError(
                "method must be a fitted regression method with predictive_gaussian, got "
                f"{type(method).__name__}"
            )
        self.method = method
        self.predict_options = predict_options
        self.factor: torch.Tensor | None = None

    def fit(self, X_cal: Any, y_cal: Any) -> ScaleRecalibration:
        """Fit the multipliers on calibration rows: ``s² = mean(((y - μ) / σ)²)`` per output.

        Args:
            X_cal: ``(n, D)`` inputs the method was not fitted on.
            y_cal: ``(n,)`` or ``(n, O)`` targets.

        Returns:
            ``self``.
        """
        mean, sd = predictive_moments(self.method, X_cal, **self.predict_options)
        y = as_tensor("y_cal", y_cal, dtype=mean.dtype, device=mean.device)
        y = y.unsqueeze(-1) if y.dim() == 1 else y
        if y.shape != mean.shape:
            raise ValueError(
                f"y_cal must have shape ({mean.shape[0]},) or {tuple(mean.shape)} to match the "
                f"predictions on X_cal, got {tuple(y.shape)}"
            )
        self.factor = ((y - mean) / sd).pow(2).mean(0).sqrt()
        return self

    def predict_moments(self, X: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """The recalibrated predictive: ``μ`` and ``s σ``, each ``(N, O)``."""
        if self.factor is None:
            raise NotFittedError("ScaleRecalibration is not fitted: call fit() first")
        mean, sd = predictive_moments(self.method, X, **self.predict_options)
        return mean, sd * self.factor.to(sd)
