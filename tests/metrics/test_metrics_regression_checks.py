"""Regression metrics: argument checks, dtypes and the NLL's pass-through, by hand."""

from __future__ import annotations

import math

import pytest
import torch

from bnn_pyro.metrics import gaussian_log_likelihood, gaussian_nll, rmse

HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def test_the_nll_in_original_units_adds_log_y_scale():
    """One standard normal sample at y = 0: NLL = log(2 pi) / 2 in normalised units; with
    y_scale = 2 the density is halved (Jacobian of y = 2 y_n), so the NLL grows by log 2."""
    nll = gaussian_nll(torch.zeros(1, 1), 1.0, torch.zeros(1), y_scale=2.0)
    assert nll == pytest.approx(HALF_LOG_2PI + math.log(2.0), rel=1e-12)


def test_the_per_point_nll_is_half_the_squared_error_plus_the_constant():
    """One sample N(0, 1) and y = (0, 1, 2): per point NLL = log(2 pi) / 2 + y^2 / 2."""
    y = torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64)
    per_point = gaussian_nll(torch.zeros(1, 3, dtype=torch.float64), 1.0, y, reduction="none")
    assert isinstance(per_point, torch.Tensor) and per_point.shape == (3,)
    expected = torch.tensor([0.0, 0.5, 2.0], dtype=torch.float64) + HALF_LOG_2PI
    torch.testing.assert_close(per_point, expected, rtol=1e-12, atol=0)


def test_per_point_log_likelihoods_come_back_in_the_inputs_dtype():
    """The sum runs in float64, but float32 inputs get float32 values back."""
    per_point = gaussian_log_likelihood(torch.zeros(2, 3), 1.0, torch.zeros(3), reduction="none")
    assert per_point.dtype == torch.float32
    torch.testing.assert_close(per_point, torch.full((3,), -HALF_LOG_2PI))


def test_the_rmse_of_a_single_point_is_its_absolute_error():
    assert rmse(torch.tensor([1.0]), torch.tensor([4.0])) == 3.0


@pytest.mark.parametrize("mean", [torch.tensor(1.0), torch.zeros(0), torch.zeros(0, 2)])
def test_rmse_needs_at_least_one_point(mean):
    """A 0-d mean has no point dimension and an empty one no points: both refused up front
    (an empty mean would otherwise give the RMSE nan)."""
    shape = str(tuple(mean.shape)).replace("(", r"\(").replace(")", r"\)")
    with pytest.raises(
        ValueError, match=rf"^mean must have shape \(N\[, O\]\) with N >= 1, got {shape}$"
    ):
        rmse(mean, mean.clone())


def test_a_nan_in_the_mean_is_refused_by_name():
    with pytest.raises(ValueError, match=r"^mean must be finite, got 1 NaN or infinite value"):
        rmse(torch.tensor([0.0, float("nan")]), torch.zeros(2))
