"""Metrics computed from ``predict`` output or predictive samples (torch tensors in).

Regression (the Gaussian predictive is the mixture ``1/S sum_s Normal(locs[s], scales[s])`` of
:meth:`~bnn_pyro.base.BaseBayesianMethod.predictive_gaussian`):
:func:`rmse`, :func:`gaussian_log_likelihood`, :func:`gaussian_nll`,
:func:`crps_gaussian_mixture`, :func:`crps_from_samples`, :func:`gaussian_mixture_cdf` and
its inverse :func:`gaussian_mixture_quantile`,
:func:`regression_calibration`, :func:`calibration_errors` (MACE, RMSCE, miscalibration area).

Prediction intervals ``[lower, upper]``: :func:`picp` (coverage), :func:`mean_interval_width`,
:func:`interval_score` (Winkler).

Classification (``probs`` ``(N, C)``, integer ``labels`` ``(N,)``): :func:`nll`,
:func:`accuracy`, :func:`brier_score`, :func:`expected_calibration_error`,
:func:`reliability_curve`.

Uncertainty from ``(S, N, C)`` probability samples: :func:`predictive_entropy`,
:func:`expected_entropy`, :func:`mutual_information`, :func:`entropy_decomposition`.

The function itself against the truth or a reference posterior: :func:`function_coverage`,
:func:`sd_ratio`, :func:`wasserstein2` (through :func:`empirical_quantiles`).

Out-of-distribution detection: the scores :func:`max_probability_score` and
:func:`energy_score` (beside the entropies), and how well scores separate in- from
out-of-distribution inputs: :func:`ood_auroc`, :func:`ood_aupr`, :func:`fpr_at_95_tpr`.

Scalar scores come back as Python floats; per-point and per-bin results as tensors.
"""

from bnn_pyro.metrics.calibration import (
    CalibrationErrors,
    RegressionCalibration,
    calibration_errors,
    gaussian_mixture_cdf,
    gaussian_mixture_quantile,
    regression_calibration,
)
from bnn_pyro.metrics.classification import (
    ReliabilityCurve,
    accuracy,
    brier_score,
    expected_calibration_error,
    nll,
    reliability_curve,
)
from bnn_pyro.metrics.crps import crps_from_samples, crps_gaussian_mixture
from bnn_pyro.metrics.function_space import (
    empirical_quantiles,
    function_coverage,
    sd_ratio,
    wasserstein2,
)
from bnn_pyro.metrics.intervals import interval_score, mean_interval_width, picp
from bnn_pyro.metrics.ood import (
    energy_score,
    fpr_at_95_tpr,
    max_probability_score,
    ood_aupr,
    ood_auroc,
)
from bnn_pyro.metrics.regression import gaussian_log_likelihood, gaussian_nll, rmse
from bnn_pyro.metrics.uncertainty import (
    EntropyDecomposition,
    entropy_decomposition,
    expected_entropy,
    mutual_information,
    predictive_entropy,
)

__all__ = [
    "CalibrationErrors",
    "EntropyDecomposition",
    "RegressionCalibration",
    "ReliabilityCurve",
    "accuracy",
    "brier_score",
    "calibration_errors",
    "crps_from_samples",
    "crps_gaussian_mixture",
    "empirical_quantiles",
    "energy_score",
    "entropy_decomposition",
    "expected_calibration_error",
    "expected_entropy",
    "fpr_at_95_tpr",
    "function_coverage",
    "gaussian_log_likelihood",
    "gaussian_mixture_cdf",
    "gaussian_mixture_quantile",
    "gaussian_nll",
    "interval_score",
    "max_probability_score",
    "mean_interval_width",
    "mutual_information",
    "nll",
    "ood_aupr",
    "ood_auroc",
    "picp",
    "predictive_entropy",
    "regression_calibration",
    "reliability_curve",
    "rmse",
    "sd_ratio",
    "wasserstein2",
]
