"""Uncertainty you can act on, for every regression method: conformal intervals with a
coverage guarantee (:class:`SplitConformal`, :class:`CVPlus`) and a recalibrated predictive
(:class:`ScaleRecalibration`, :class:`IsotonicRecalibration`), from the Gaussian predictive of
any method (:func:`predictive_moments`)."""

from bnn_pyro.calibration.conformal import SplitConformal
from bnn_pyro.calibration.cv_plus import CVPlus
from bnn_pyro.calibration.moments import predictive_moments
from bnn_pyro.calibration.recalibration import (
    IsotonicRecalibration,
    Recalibration,
    ScaleRecalibration,
)

__all__ = [
    "CVPlus",
    "IsotonicRecalibration",
    "Recalibration",
    "ScaleRecalibration",
    "SplitConformal",
    "predictive_moments",
]
