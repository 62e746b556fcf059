"""A learned Gaussian noise starts at the residual scale of a linear fit to the data."""

from __future__ import annotations

import math

import pytest
import torch

import bnn_pyro as bp
from bnn_pyro.likelihoods.noise_init import MAX_ROWS, residual_scale


def _linear(n: int, noise: float, d: int = 4, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g)
    y = X @ torch.linspace(-2, 2, d) + 1.5 + noise * torch.randn(n, generator=g)
    return X, y.unsqueeze(-1)


def test_the_residual_scale_is_the_noise_of_a_linear_model():
    X, y = _linear(2000, 0.3)
    # the unbiased RSS / (N - D - 1) estimate: its relative std error is 1 / sqrt(2 (N - D - 1))
    # = 1.6% at N = 2000, so 5% is three standard errors; std(y) is 2.8 here
    assert residual_scale(X, y).item() == pytest.approx(0.3, rel=0.05)
    # two outputs, each its own noise
    y2 = torch.cat([y, 3 * y], -1)
    assert residual_scale(X, y2).tolist() == pytest.approx([0.3, 0.9], rel=0.05)


def test_too_few_rows_give_std_y_and_an_exact_line_gives_the_floor():
    X, y = _linear(5, 0.3)  # 5 rows, 4 features + intercept: no residual degree of freedom
    assert residual_scale(X, y).item() == pytest.approx(float(y.std()), rel=1e-5)
    X, y = _linear(50, 0.0)
    assert residual_scale(X, y).item() == pytest.approx(1e-3 * float(y.std()), rel=1e-3)


def test_large_data_is_subsampled_to_max_rows():
    X, y = _linear(MAX_ROWS + 5000, 0.5)
    # evenly spaced rows of i.i.d. data: the same estimate, error 1/sqrt(2 * 10^4) = 0.7%
    assert residual_scale(X, y).item() == pytest.approx(0.5, rel=0.05)


@pytest.mark.parametrize(("scale_init", "expected"), [("data", 0.3), ("prior", None), (0.7, 0.7)])
def test_fit_starts_the_noise_there(scale_init, expected):
    X, y = _linear(400, 0.3)
    bnn = bp.VariationalBNN(bp.nn.mlp(4, [8], 1), bp.Gaussian("learned", scale_init=scale_init))
    bnn.fit(X, y, epochs=0, progress=False)  # sets the guide up, no step
    start = math.exp(bnn.guide.means()["likelihood.scale"].item())  # the LogNormal's median
    if expected is None:  # Pyro's init_to_median: the median of 15 draws of LogNormal(0, 1)
        assert abs(math.log(start)) < 1 and abs(start / 0.3 - 1) > 0.5
    else:
        assert start == pytest.approx(expected, rel=0.08)  # "data": as the estimate above


def test_a_data_loader_starts_from_its_first_batch():
    X, y = _linear(400, 0.3)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, y), batch_size=200)
    bnn = bp.VariationalBNN(bp.nn.mlp(4, [8], 1), bp.Gaussian("learned"))
    bnn.fit(loader, epochs=0, progress=False)
    start = math.exp(bnn.guide.means()["likelihood.scale"].item())
    assert start == pytest.approx(0.3, rel=0.15)  # 200 rows: std error 5%, three of them


def test_the_setting_is_checked_and_saved(tmp_path):
    with pytest.raises(ValueError, match="scale_init"):
        bp.Gaussian("learned", scale_init="mean")
    with pytest.raises(ValueError, match="scale_init"):
        bp.Gaussian("learned", scale_init=-1.0)
    with pytest.raises(TypeError, match="scale_init"):
        bp.Gaussian("learned", scale_init=True)
    with pytest.raises(ValueError, match="scale_init is only used"):
        bp.Gaussian(0.1, scale_init=0.5)
    X, y = _linear(64, 0.3)
    bnn = bp.VariationalBNN(bp.nn.mlp(4, [8], 1), bp.Gaussian("learned", scale_init=0.7))
    bnn.fit(X, y, epochs=2, progress=False, seed=0)
    bnn.save(tmp_path / "m.pt")
    assert bp.load(tmp_path / "m.pt", net=bp.nn.mlp(4, [8], 1)).likelihood.scale_init == 0.7
