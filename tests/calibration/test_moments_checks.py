"""The predictive summaries of ``calibration/moments.py`` pinned by hand-worked values: the
mixture's mean and total sd (law of total variance), the options passed on, the targets' shape
and dtype, and each refusal's whole message."""

from __future__ import annotations

import math

import pytest
import torch

from bnn_pyro.calibration.moments import (
    calibration_targets,
    check_method,
    predictive_moments,
    predictive_quantiles,
)
from bnn_pyro.estimators import TabularBNN
from bnn_pyro.likelihoods import Bernoulli, Categorical, Gaussian

DIVERGED = (
    r"^_Fixed's predictive must have a finite mean and a positive, finite standard deviation "
    r"at every row; got a NaN, an infinity or a zero \(a diverged fit, or a noise scale of 0\)$"
)


class _Fixed:
    """A "method" whose predictive is the given ``locs`` and ``scales``; records its options."""

    def __init__(self, locs, scales) -> None:
        self.locs, self.scales = locs, scales
        self.options: list[dict] = []

    def predictive_gaussian(self, x: torch.Tensor, **options):
        self.options.append(options)
        return self.locs, self.scales


def test_the_sd_adds_the_spread_of_the_locs_to_each_rows_mean_noise_variance():
    """Two samples, two rows. Row 0: locs (1, 3), scales (1, 2): mean 2, variance
    1 (the locs' spread about 2) + (1 + 4) / 2 = 3.5. Row 1: locs (0, 0), scales (3, 4):
    mean 0, variance 0 + (9 + 16) / 2 = 12.5. Each row's own noise, averaged over samples only."""
    locs = torch.tensor([[[1.0], [0.0]], [[3.0], [0.0]]], dtype=torch.float64)
    scales = torch.tensor([[[1.0], [3.0]], [[2.0], [4.0]]], dtype=torch.float64)
    method = _Fixed(locs, scales)
    mean, sd = predictive_moments(method, torch.zeros(2, 1), num_samples=2, seed=4)
    assert mean.tolist() == [[2.0], [0.0]]
    torch.testing.assert_close(sd, torch.tensor([[3.5], [12.5]], dtype=torch.float64).sqrt())
    assert method.options == [{"num_samples": 2, "seed": 4}]


def test_a_float_noise_scale_is_taken_in_the_locs_dtype():
    """One float64 sample with the Python float noise 0.1: the sd is 0.1 to float64 precision
    (0.1 rounded to float32 would be 0.1 + 1.5e-9)."""
    locs = torch.zeros(1, 2, 1, dtype=torch.float64)
    mean, sd = predictive_moments(_Fixed(locs, 0.1), torch.zeros(2, 1))
    assert sd.dtype == torch.float64
    assert sd[:, 0].tolist() == pytest.approx([0.1, 0.1], rel=1e-15, abs=0)


def test_a_diverged_or_noiseless_predictive_is_refused_by_name():
    nan = torch.tensor([[[float("nan")]]])
    with pytest.raises(ValueError, match=DIVERGED):
        predictive_moments(_Fixed(nan, 1.0), torch.zeros(1, 1))
    with pytest.raises(ValueError, match=DIVERGED):
        predictive_moments(_Fixed(torch.zeros(1, 1, 1), 0.0), torch.zeros(1, 1))
    message = (
        r"^_Fixed's predictive must be finite at every row; got a NaN or an infinity "
        r"\(a diverged fit\)$"
    )
    with pytest.raises(ValueError, match=message):
        predictive_quantiles(_Fixed(nan, 1.0), torch.zeros(1, 1), [0.5])


def test_the_quantiles_pass_the_options_on():
    """One component N(0, 1): its 0.975 quantile is 1.959964 (the standard normal's)."""
    method = _Fixed(torch.zeros(1, 1, 1), 1.0)
    q = predictive_quantiles(method, torch.zeros(1, 1), [0.975], num_samples=1, seed=3)
    assert q.item() == pytest.approx(1.959964, abs=1e-6)
    assert method.options == [{"num_samples": 1, "seed": 3}]


def test_the_targets_take_the_predictions_dtype_and_keep_a_column_shape():
    like = torch.zeros(2, 1, dtype=torch.float32)
    y = calibration_targets([1.0, 2.0], like)  # a float64 array-like
    assert y.dtype == torch.float32 and y.tolist() == [[1.0], [2.0]]
    y = calibration_targets(torch.tensor([[1.0], [2.0]], dtype=torch.float64), like)
    assert y.dtype == torch.float32 and y.tolist() == [[1.0], [2.0]]
    message = r"^y_cal must be finite, got 1 NaN or infinite value\(s\)$"
    with pytest.raises(ValueError, match=message):
        calibration_targets([1.0, math.nan], like)


class _Classifier:
    def predictive_gaussian(self, x, **options):  # pragma: no cover - never reached
        raise AssertionError


def test_a_classifier_is_refused_by_its_likelihood():
    message = (
        r"^method must be a regression method: this {} classifies \(its intervals "
        r"and recalibration are for real-valued targets\)$"
    )
    for likelihood in (Bernoulli(), Categorical()):
        by_likelihood = _Classifier()
        by_likelihood.likelihood = likelihood
        with pytest.raises(TypeError, match=message.format("_Classifier")):
            check_method(by_likelihood)
    regression = _Classifier()
    regression.likelihood = Gaussian()
    assert check_method(regression) is regression
    # an estimator names its task; its likelihood is the one the name maps to
    with pytest.raises(TypeError, match=message.format("TabularBNN")):
        check_method(TabularBNN("classification"))
    estimator = TabularBNN("regression")
    assert check_method(estimator) is estimator
