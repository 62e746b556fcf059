"""BayesianLinear (seed 000): shapes, the KL, and a training loop that keeps log_std bounded."""

import pytest
import torch
import torch.nn.functional as F
from torch.distributions import Normal, kl_divergence

from bnn_pyro.nn.bayesian_linear import BayesianLinear


def test_forward_shape_with_leading_dims():
    torch.manual_seed(0)
    layer = BayesianLinear(4, 3)
    assert layer(torch.randn(7, 4)).shape == (7, 3)
    assert layer(torch.randn(2, 5, 4)).shape == (2, 5, 3)


def test_forward_is_stochastic_and_mean_mode_deterministic():
    torch.manual_seed(0)
    layer = BayesianLinear(4, 3)
    x = torch.randn(6, 4)
    assert not torch.equal(layer(x), layer(x))
    expected = x @ layer.weight_mean.T + layer.bias_mean
    torch.testing.assert_close(layer(x, sample=False), expected)


def test_kl_is_scalar_and_matches_torch_distributions():
    torch.manual_seed(0)
    layer = BayesianLinear(5, 2, prior_std=0.5)
    with torch.no_grad():
        layer.weight_log_std.uniform_(-3, 0.5)
        layer.bias_log_std.uniform_(-3, 0.5)
    kl = layer.kl_divergence()
    assert kl.dim() == 0
    prior = Normal(0.0, 0.5)
    ref = (
        kl_divergence(Normal(layer.weight_mean, layer.weight_log_std.exp()), prior).sum()
        + kl_divergence(Normal(layer.bias_mean, layer.bias_log_std.exp()), prior).sum()
    )
    torch.testing.assert_close(kl, ref)


def test_training_with_kl_keeps_log_std_finite_and_bounded():
    # Regression y = 2x + noise with 32 points. Without the KL, log_std of a weight that the data
    # pins down drifts to -inf; the KL gradient d/dlog_std = -1 + std^2/prior^2 pushes back, so
    # the optimum of (mean NLL + KL/N) is a posterior std of order sigma_noise/sqrt(N sum x^2),
    # i.e. log_std around -3 here. We assert a generous floor of -8 after 1500 Adam steps.
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 1, generator=g)
    y = 2 * x + 0.1 * torch.randn(32, 1, generator=g)
    layer = BayesianLinear(1, 1)
    opt = torch.optim.Adam(layer.parameters(), lr=0.05)
    for _ in range(1500):
        opt.zero_grad()
        loss = F.mse_loss(layer(x), y) / (2 * 0.1**2) + layer.kl_divergence() / len(x)
        loss.backward()
        opt.step()
    for p in (layer.weight_log_std, layer.bias_log_std):
        assert torch.isfinite(p).all()
        assert (p > -8).all()
    assert abs(layer.weight_mean.item() - 2.0) < 0.1


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(in_features=0, out_features=2), ValueError, "in_features"),
        (dict(in_features=2.0, out_features=2), TypeError, "in_features"),
        (dict(in_features=2, out_features=True), TypeError, "out_features"),
        (dict(in_features=2, out_features=2, prior_std=0.0), ValueError, "prior_std"),
        (dict(in_features=2, out_features=2, init_std=-1.0), ValueError, "init_std"),
    ],
)
def test_constructor_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        BayesianLinear(**kwargs)


def test_forward_errors():
    layer = BayesianLinear(3, 2)
    with pytest.raises(ValueError, match=r"\(\.\.\., 3\)"):
        layer(torch.zeros(4, 2))
    with pytest.raises(TypeError, match="x"):
        layer([[0.0, 0.0, 0.0]])
