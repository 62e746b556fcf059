"""Uncertainty you can act on, for every regression method: conformal intervals with a
coverage guarantee (:class:`SplitConformal`, :class:`QuantileConformal`, :class:`CVPlus`) and a
recalibrated predictive
(:class:`ScaleRecalibration`, :class:`IsotonicRecalibration`), from the Gaussian predictive of
any method (:func:`predictive_moments`, :func:`predictive_quantiles`)."""

from bnn_pyro.calibration.conformal import SplitConformal, conformal_quantile
from bnn_pyro.calibration.cqr import QuantileConformal
from bnn_pyro.calibration.cv_plus import CVPlus
from bnn_pyro.calibration.moments import predictive_moments, predictive_quantiles
from bnn_pyro.calibration.recalibration import (
    IsotonicRecalibration,
    Recalibration,
    ScaleRecalibration,
)

__all__ = [
    "CVPlus",
    "IsotonicRecalibration",
    "QuantileConformal",
    "Recalibration",
    "ScaleRecalibration",
    "SplitConformal",
    "conformal_quantile",
    "predictive_moments",
    "predictive_quantiles",
]
