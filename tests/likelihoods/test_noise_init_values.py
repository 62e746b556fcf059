"""``residual_scale`` value by value: the least-squares residual std against numpy's own
least-squares fit, at the row counts where its rule changes (one row, no residual degree of
freedom, one), per output column, in the targets' dtype, with its refusals word for word and
its tensors made on the inputs' device (``meta`` as the stand-in default device).

numpy's ``lstsq`` (LAPACK's gelsd, as torch's call here) is the independent reference; both run
in float64 on the same rows, so they agree to round-off (1e-10 relative here).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bnn_pyro.likelihoods.noise_init import MAX_ROWS, residual_scale


def _rows(n: int, d: int = 3, o: int = 2, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` rows of ``d`` inputs and ``o`` targets, each column its own noise (0.2, 0.6, ...)."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=torch.float64)
    noise = 0.2 + 0.4 * torch.arange(o, dtype=torch.float64)
    y = X @ torch.randn(d, o, generator=g, dtype=torch.float64) + noise * torch.randn(
        n, o, generator=g, dtype=torch.float64
    )
    return X, y


def _numpy_scale(X: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """sqrt(RSS / (N - D - 1)) per column, from numpy's least squares with an intercept."""
    x, t = X.numpy().reshape(len(X), -1), y.numpy()
    design = np.hstack([x, np.ones((len(x), 1))])
    coef = np.linalg.lstsq(design, t, rcond=None)[0]
    return np.sqrt(((t - design @ coef) ** 2).sum(0) / (len(x) - x.shape[1] - 1))


@pytest.mark.parametrize("n", [5, 40], ids=["one residual degree of freedom", "40 rows"])
def test_the_scale_is_the_least_squares_residual_std_per_column(n):
    """N = D + 2 rows is the first count with a residual (1 degree of freedom: the fit, not
    std(y)); with 40 rows the same rule. Each output column its own scale."""
    X, y = _rows(n)
    got = residual_scale(X, y)
    assert got.shape == (2,)
    np.testing.assert_allclose(got.numpy(), _numpy_scale(X, y), rtol=1e-10)


def test_inputs_of_any_shape_are_flattened_per_row():
    """(N, 2, 3) inputs are read as (N, 6) features."""
    X, y = _rows(30, d=6)
    np.testing.assert_allclose(
        residual_scale(X.reshape(30, 2, 3), y).numpy(), _numpy_scale(X, y), rtol=1e-10
    )


@pytest.mark.parametrize("n", [2, 4])
def test_without_a_residual_degree_of_freedom_it_is_each_columns_std(n):
    """N <= D + 1 (here D = 3): the fit leaves no residual, so each column's unbiased std."""
    X, y = _rows(n)
    torch.testing.assert_close(residual_scale(X, y), y.std(dim=0), rtol=1e-12, atol=0.0)


def test_one_row_gives_one():
    """A single row has no spread either: the scale is 1 per column (the floor, 1e-3, below)."""
    X, y = _rows(1)
    torch.testing.assert_close(residual_scale(X, y), torch.ones(2, dtype=torch.float64))


def test_the_scale_has_the_targets_dtype():
    """float32 targets give a float32 scale (the fit itself runs in float64)."""
    X, y = _rows(40)
    got = residual_scale(X.float(), y.float())
    assert got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), _numpy_scale(X, y), rtol=1e-5)


def test_mismatched_rows_and_vector_targets_are_refused_word_for_word():
    X, y = _rows(10)
    with pytest.raises(ValueError) as info:
        residual_scale(X, y[:9])
    assert str(info.value) == (
        "X (N, ...) and y (N, O) must have the same rows, got (10, 3) and (9, 2)"
    )
    with pytest.raises(ValueError) as info:  # the same rows, but y is not (N, O)
        residual_scale(X, y[:, 0])
    assert str(info.value) == (
        "X (N, ...) and y (N, O) must have the same rows, got (10, 3) and (10,)"
    )


@pytest.mark.parametrize("n", [1, 40, MAX_ROWS + 7], ids=["one row", "40 rows", "subsampled"])
def test_its_tensors_are_made_on_the_inputs_device(n):
    """Under a ``meta`` default device, CPU inputs give the same CPU scale as outside it: no
    tensor of the rule (the intercept column, the one-row fallback, the subsampled rows) is
    made on the default device."""
    X, y = _rows(n)
    want = residual_scale(X, y)
    with torch.device("meta"):
        got = residual_scale(X, y)
    assert got.device.type == "cpu"
    torch.testing.assert_close(got, want, rtol=0.0, atol=0.0)
