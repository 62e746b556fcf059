"""Uncertainty you can act on, for every regression method: conformal intervals with a
coverage guarantee (:class:`SplitConformal`) and a recalibrated predictive
(:class:`ScaleRecalibration`, :class:`IsotonicRecalibration`), from the Gaussian predictive of
any method (:func:`predictive_moments`)."""

from bnn_pyro.calibration.conformal import SplitConformal
from bnn_pyro.calibration.moments import predictive_moments
from bnn_pyro.calibration.recalibration import (
    IsotonicRecalibration,
    Recalibration,
    ScaleRecalibration,
)

__all__ = [
    "IsotonicRecalibration",
    "Recalibration",
    "ScaleRecalibration",
    "SplitConformal",
    "predictive_moments",
]
