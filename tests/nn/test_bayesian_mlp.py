"""Seed 003 functional API: bayesian_dense, build, deterministic mean-weight inference."""

import pytest
import torch
import torch.nn.functional as F

from bnn_pyro.losses import elbo_loss
from bnn_pyro.nn.bayesian_mlp import BayesianMLP, bayesian_dense, build
from bnn_pyro.nn.gaussian_linear import GaussianLinear


def test_build_defaults_and_shapes():
    model = build(10, output_size=3)
    assert [layer.out_features for layer in model.layers] == [256, 128, 3]
    x = torch.randn(4, 10)
    assert model(x).shape == (4, 3)
    assert model(x, num_samples=2).shape == (2, 4, 3)


def test_deterministic_inference_uses_mean_weights():
    torch.manual_seed(0)
    model = build(3, (5,), output_size=2, activation="tanh")
    x = torch.randn(7, 3)
    l0, l1 = model.layers
    expected = F.linear(torch.tanh(F.linear(x, l0.weight_mu, l0.bias_mu)), l1.weight_mu, l1.bias_mu)
    torch.testing.assert_close(model(x, sample=False), expected)
    assert not torch.equal(model(x), model(x))


def test_kl_cost_is_sum_of_layers():
    model = build(3, (5, 4), output_size=2)
    expected = sum(layer.kl_divergence() for layer in model.layers)
    torch.testing.assert_close(model.kl_cost(), expected)


def test_bayesian_dense_is_gaussian_linear_with_prior():
    layer = bayesian_dense(4, 2, prior_sigma=0.5, name="d")
    assert isinstance(layer, GaussianLinear) and layer.prior_std == 0.5 and layer.name == "d"


def test_training_reduces_elbo():
    # A learnable problem: class = sign of the first feature. After 200 steps the ELBO must have
    # dropped well below its starting value (log 2 = 0.69 reconstruction at chance).
    torch.manual_seed(0)
    x = torch.randn(64, 2)
    y = (x[:, 0] > 0).long()
    model = build(2, (16,), output_size=2)
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    losses = []
    for _ in range(200):
        opt.zero_grad()
        loss = elbo_loss(model(x), y, model.kl_cost(), beta=1 / 64, loss_fn="cross_entropy")
        loss.backward()
        opt.step()
        losses.append(loss.item())
    acc = (model(x, sample=False).argmax(-1) == y).float().mean()
    assert losses[-1] < losses[0] and acc > 0.9


def test_custom_activation_callable():
    model = BayesianMLP(2, [3], 1, activation=torch.sin)
    assert model(torch.zeros(1, 2), sample=False).shape == (1, 1)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(input_size=0, output_size=1), ValueError, "input_size"),
        (dict(input_size=2, output_size=1, hidden_sizes=(4, 0)), ValueError, r"hidden_sizes\[1\]"),
        (dict(input_size=2, output_size=1, hidden_sizes="44"), TypeError, "hidden_sizes"),
        (dict(input_size=2, output_size=1, activation="swish"), ValueError, "activation"),
        (dict(input_size=2, output_size=1, activation=3), TypeError, "activation"),
        (dict(input_size=2, output_size=1, prior_sigma=-1.0), ValueError, "prior_sigma"),
        (dict(input_size=2, output_size=1.5), TypeError, "output_size"),
    ],
)
def test_build_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        build(**kwargs)


def test_bayesian_dense_errors():
    with pytest.raises(ValueError, match="units"):
        bayesian_dense(2, 0)
    with pytest.raises(TypeError, match="name"):
        bayesian_dense(2, 2, name="")
