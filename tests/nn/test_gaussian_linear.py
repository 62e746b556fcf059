"""GaussianLinear (seed 001): shapes, vectorized draws, KL against torch.distributions."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.distributions import Normal, kl_divergence

from bnn_pyro.nn.gaussian_linear import GaussianLinear


def test_shapes_and_vectorized_samples():
    torch.manual_seed(0)
    layer = GaussianLinear(4, 3)
    x = torch.randn(6, 4)
    assert layer(x).shape == (6, 3)
    assert layer(torch.randn(2, 6, 4)).shape == (2, 6, 3)
    out = layer(x, num_samples=5)
    assert out.shape == (5, 6, 3)
    # independent draws per leading index
    assert not torch.allclose(out[0], out[1])
    assert layer(out.new_ones(5, 6, 4), num_samples=5).shape == (5, 6, 3)


def test_mean_mode_is_deterministic_and_matches_linear():
    layer = GaussianLinear(4, 3)
    x = torch.randn(6, 4)
    expected = F.linear(x, layer.weight_mu, layer.bias_mu)
    torch.testing.assert_close(layer(x, sample=False), expected)
    torch.testing.assert_close(layer(x, sample=False, num_samples=2)[1], expected)


def test_vectorized_draws_have_the_posterior_variance():
    # With x = e_1 (one-hot), output_o = w_{o,1} + b_o ~ N(mu_w + mu_b, s_w^2 + s_b^2). With
    # 20000 draws the sample variance has relative std sqrt(2/20000) = 1%; we allow 5%.
    torch.manual_seed(0)
    layer = GaussianLinear(2, 1, init_std=0.3)
    x = torch.tensor([[1.0, 0.0]])
    out = layer(x, num_samples=20000)[:, 0, 0]
    expected_var = 2 * 0.3**2
    assert abs(out.var().item() / expected_var - 1) < 0.05


def test_init_is_fan_in_scaled():
    layer = GaussianLinear(400, 10)
    bound = 1 / math.sqrt(400)
    assert layer.weight_mu.abs().max() <= bound
    torch.testing.assert_close(
        F.softplus(layer.weight_rho), torch.full((10, 400), 0.1 * bound), rtol=1e-4, atol=0
    )


def test_kl_matches_torch_distributions():
    torch.manual_seed(0)
    layer = GaussianLinear(3, 2, prior_std=2.0)
    with torch.no_grad():
        layer.weight_rho.normal_()
        layer.bias_rho.normal_()
    prior = Normal(0.0, 2.0)
    ref = (
        kl_divergence(Normal(layer.weight_mu, F.softplus(layer.weight_rho)), prior).sum()
        + kl_divergence(Normal(layer.bias_mu, F.softplus(layer.bias_rho)), prior).sum()
    )
    kl = layer.kl_divergence()
    assert kl.dim() == 0
    torch.testing.assert_close(kl, ref)


def test_errors():
    with pytest.raises(ValueError, match="out_features"):
        GaussianLinear(2, 0)
    with pytest.raises(TypeError, match="prior_std"):
        GaussianLinear(2, 2, prior_std="1")
    layer = GaussianLinear(3, 2)
    with pytest.raises(ValueError, match="num_samples=4"):
        layer(torch.zeros(5, 6, 3), num_samples=4)
    with pytest.raises(ValueError, match="num_samples"):
        layer(torch.zeros(5, 3), num_samples=0)
    with pytest.raises(ValueError, match=r"\(\.\.\., 3\)"):
        layer(torch.zeros(5, 4))
