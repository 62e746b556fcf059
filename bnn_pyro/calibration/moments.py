"""Summaries of any regression method's predictive of ``y``: its mean and standard deviation,
and its quantiles."""

from __future__ import annotations

from typing import Any

import torch

from bnn_pyro._checks import as_tensor
from bnn_pyro.metrics.calibration import gaussian_mixture_quantile

__all__ = [
    "calibration_rows",
    "calibration_targets",
    "check_method",
    "predictive_moments",
    "predictive_quantiles",
]


def predictive_moments(
    method: Any, x: torch.Tensor, **options: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean and the total standard deviation of ``y`` under ``method``'s predictive.

    The predictive is the mixture ``1/S Σ_s Normal(locs[s], scales[s])`` of
    :meth:`~bnn_pyro.base.BaseBayesianMethod.predictive_gaussian`; its mean is the mean of the
    ``locs`` and its variance the spread of the ``locs`` (epistemic) plus the mean noise
    variance (aleatoric), by the law of total variance.

    Args:
        method: a fitted regression method (anything with ``predictive_gaussian``).
        x: ``(N, D)`` inputs.
        **options: passed to ``predict`` (``num_samples``, ``seed``, ...).

    Returns:
        ``mean`` and ``sd``, each ``(N, O)``.

    Raises:
        TypeError: ``method`` has no ``predictive_gaussian``.

    Example:
        >>> import bnn_pyro as bp, torch.nn as nn
        >>> la = bp.LaplaceApproximation(nn.Linear(1, 1), "regression", noise_scale=0.5)
        >>> _ = la.fit(torch.randn(50, 1), torch.randn(50), epochs=0, progress=False)
        >>> mean, sd = predictive_moments(la, torch.zeros(3, 1), num_samples=200, seed=0)
        >>> mean.shape, bool((sd > 0.5).all())  # at least the noise
        (torch.Size([3, 1]), True)
    """
    locs, scales = check_method(method).predictive_gaussian(x, **options)
    scales = torch.as_tensor(scales, dtype=locs.dtype, device=locs.device).expand_as(locs)
    mean = locs.mean(0)
    sd = (locs.var(0, unbiased=False) + scales.pow(2).mean(0)).sqrt()
    if not bool(torch.isfinite(mean).all() and torch.isfinite(sd).all() and (sd > 0).all()):
        raise ValueError(
            f"{type(method).__name__}'s predictive must have a finite mean and a positive, "
            "finite standard deviation at every row; got a NaN, an infinity or a zero (a "
            "diverged fit, or a noise scale of 0)"
        )
    return mean, sd


def predictive_quantiles(
    method: Any, x: torch.Tensor, levels: torch.Tensor | list[float], **options: Any
) -> torch.Tensor:
    """Quantiles of ``y`` under ``method``'s predictive, the mixture
    ``1/S Σ_s Normal(locs[s], scales[s])`` itself (not a Gaussian matched to its moments):
    :func:`~bnn_pyro.metrics.gaussian_mixture_quantile` of
    :meth:`~bnn_pyro.base.BaseBayesianMethod.predictive_gaussian`.

    Args:
        method: a fitted regression method (anything with ``predictive_gaussian``).
        x: ``(N, D)`` inputs.
        levels: ``(L,)`` probabilities in ``(0, 1)``.
        **options: passed to ``predict`` (``num_samples``, ``seed``, ...).

    Returns:
        ``(L, N, O)``.

    Example:
        >>> import bnn_pyro as bp, torch.nn as nn
        >>> la = bp.LaplaceApproximation(nn.Linear(1, 1), "regression", noise_scale=0.5)
        >>> _ = la.fit(torch.randn(50, 1), torch.randn(50), epochs=0, progress=False)
        >>> q = predictive_quantiles(la, torch.zeros(3, 1), [0.05, 0.95], num_samples=100, seed=0)
        >>> q.shape, bool((q[1] - q[0] > 2 * 1.64 * 0.5).all())  # at least the noise's interval
        (torch.Size([2, 3, 1]), True)
    """
    locs, scales = check_method(method).predictive_gaussian(x, **options)
    if not bool(torch.isfinite(locs).all()):
        raise ValueError(
            f"{type(method).__name__}'s predictive must be finite at every row; got a NaN or an "
            "infinity (a diverged fit)"
        )
    return gaussian_mixture_quantile(locs, scales, levels)


def check_method(method: Any) -> Any:
    """``method`` if it has a Gaussian predictive (``predictive_gaussian``), else a
    ``TypeError`` naming the argument.

    Example:
        >>> check_method(object())
        Traceback (most recent call last):
          ...
        TypeError: method must be a fitted regression method with predictive_gaussian, got object
    """
    if not callable(getattr(method, "predictive_gaussian", None)):
        raise TypeError(
            "method must be a fitted regression method with predictive_gaussian, got "
            f"{type(method).__name__}"
        )
    if getattr(getattr(method, "likelihood", None), "classifies", False):
        raise TypeError(
            f"method must be a regression method: this {type(method).__name__} classifies "
            "(its intervals and recalibration are for real-valued targets)"
        )
    return method


def calibration_rows(
    method: Any, X_cal: Any, y_cal: Any, **options: Any
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The predictive mean and sd on calibration rows, and their targets, each ``(n, O)``.

    Args:
        method: a fitted regression method; ``options`` go to its ``predict``.
        X_cal: ``(n, D)`` inputs the method was not fitted on.
        y_cal: ``(n,)`` or ``(n, O)`` targets.

    Raises:
        ValueError: ``y_cal`` does not match the predictions' rows and columns.

    Example:
        >>> import bnn_pyro as bp, torch.nn as nn
        >>> la = bp.LaplaceApproximation(nn.Linear(1, 1), "regression", noise_scale=0.5)
        >>> _ = la.fit(torch.randn(20, 1), torch.randn(20), epochs=0, progress=False)
        >>> [t.shape for t in calibration_rows(la, torch.zeros(4, 1), torch.zeros(4))]
        [torch.Size([4, 1]), torch.Size([4, 1]), torch.Size([4, 1])]
    """
    mean, sd = predictive_moments(method, X_cal, **options)
    return mean, sd, calibration_targets(y_cal, mean)


def calibration_targets(y_cal: Any, like: torch.Tensor) -> torch.Tensor:
    """``y_cal`` as an ``(n, O)`` tensor in ``like``'s dtype and device, checked against the
    predictions ``like`` ``(n, O)`` on the calibration rows.

    Raises:
        ValueError: ``y_cal`` is neither ``(n,)`` nor ``(n, O)``.

    Example:
        >>> calibration_targets([1.0, 2.0], torch.zeros(2, 1)).shape
        torch.Size([2, 1])
        >>> calibration_targets([1.0, 2.0, 3.0], torch.zeros(2, 1))
        Traceback (most recent call last):
          ...
        ValueError: y_cal must have shape (2,) or (2, 1) to match the predictions on X_cal, ...
    """
    y = as_tensor("y_cal", y_cal, dtype=like.dtype, device=like.device)
    y = y.unsqueeze(-1) if y.dim() == 1 else y
    if y.shape != like.shape:
        raise ValueError(
            f"y_cal must have shape ({like.shape[0]},) or {tuple(like.shape)} to match the "
            f"predictions on X_cal, got {tuple(y.shape)}"
        )
    return y
