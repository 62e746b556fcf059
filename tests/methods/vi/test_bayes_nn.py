"""VariationalBayesNN: the loss scaling (KL / dataset size), likelihoods, vectorized prediction."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.distributions import Normal

from bnn_pyro.methods import GaussianLinear, VariationalBayesNN
from tests.methods.methods_helpers import deterministic, trained


def test_loss_is_mean_nll_plus_kl_over_dataset_size():
    torch.manual_seed(0)
    vb = deterministic(VariationalBayesNN(3, [8], 4))
    x, y = torch.randn(10, 3), torch.randint(0, 4, (10,))
    kl = vb.kl_divergence()
    nll = F.cross_entropy(vb(x, sample=False), y)
    for n, beta in [(10, 1.0), (1000, 1.0), (1000, 0.3)]:
        loss = vb.variational_loss(x, y, num_samples=3, kl_weight=beta, dataset_size=n)
        torch.testing.assert_close(loss, nll + beta * kl / n)
    vb.dataset_size = 500
    torch.testing.assert_close(vb.variational_loss(x, y), nll + kl / 500)


def test_gaussian_likelihood_matches_torch_distributions():
    torch.manual_seed(0)
    vb = deterministic(VariationalBayesNN(3, [8], 2, likelihood="gaussian"))
    x, y = torch.randn(10, 3), torch.randn(10, 2)
    sigma = torch.tensor([0.5, 2.0])
    lp = Normal(vb(x, sample=False), sigma).log_prob(y).sum(-1).mean()
    loss = vb.variational_loss(x, y, num_samples=2, noise_scale=sigma, dataset_size=100)
    torch.testing.assert_close(loss, -lp + vb.kl_divergence() / 100)
    # the likelihood argument overrides the model's; a categorical loss needs class targets
    with pytest.raises(ValueError, match=r"class labels \(N,\), got shape \(10, 2\)"):
        vb.variational_loss(x, y, likelihood="categorical")
    with pytest.raises(ValueError, match="noise_scale is None"):
        vb.variational_loss(x, y)


def test_kl_is_sum_of_layers_and_matches_torch_distributions():
    vb = VariationalBayesNN(3, [5], 2, prior_std=0.5)
    total = 0
    for layer in vb.layers:
        assert isinstance(layer, GaussianLinear)
        for mu, rho in [(layer.weight_mu, layer.weight_rho), (layer.bias_mu, layer.bias_rho)]:
            q = Normal(mu, F.softplus(rho))
            total = total + torch.distributions.kl_divergence(q, Normal(0.0, 0.5)).sum()
    torch.testing.assert_close(vb.kl_divergence(), total)


def test_predict_is_vectorized_and_stochastic():
    torch.manual_seed(0)
    vb = VariationalBayesNN(2, [16], 3, num_samples=12)
    x = torch.randn(7, 2)
    mean, var, samples = vb.predict(x, return_samples=True)
    assert samples.shape == (12, 7, 3) and mean.shape == var.shape == (7, 3)
    assert not torch.allclose(samples[0], samples[1])
    torch.testing.assert_close(samples.sum(-1), torch.ones(12, 7))


def test_fit_learns_the_noise_scale():
    # y = 2x + N(0, 0.3²) with 200 points: the learned σ should be close to 0.3 (the ELBO's
    # type-II estimate; the weight uncertainty adds a little): allow [0.2, 0.45].
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 1, generator=g)
    y = 2 * x + 0.3 * torch.randn(200, 1, generator=g)
    torch.manual_seed(0)
    vb = VariationalBayesNN(1, [16], 1, likelihood="regression")
    vb.fit(x, y, epochs=150, batch_size=50, lr=1e-2, progress=False, seed=0)
    assert 0.2 < vb.noise_scale < 0.45
    assert vb.dataset_size == 200
    mean, _ = vb.predict(x)
    assert ((mean - 2 * x) ** 2).mean().sqrt() < 0.2


def test_user_noise_scale_is_fixed():
    x, y = torch.randn(20, 1), torch.randn(20)
    vb = VariationalBayesNN(1, [4], 1, likelihood="regression", noise_scale=0.25)
    vb.fit(x, y, epochs=2, progress=False)
    assert vb.noise_scale == 0.25


def test_fit_seed_is_reproducible():
    x, y = torch.randn(30, 2), torch.randint(0, 2, (30,))
    outs = []
    for _ in range(2):
        torch.manual_seed(0)
        vb = trained(VariationalBayesNN(2, [8], 2), x, y, epochs=3, progress=False, seed=4)
        outs.append(vb(x, sample=False))
    torch.testing.assert_close(outs[0], outs[1])


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(num_samples=0), ValueError, "num_samples"),
        (dict(likelihood="poisson"), ValueError, "likelihood"),
        (dict(prior_std=0.0), ValueError, "prior_std"),
        (dict(dataset_size=0), ValueError, "dataset_size"),
        (dict(noise_scale=0.0), ValueError, "noise_scale"),
    ],
)
def test_constructor_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        VariationalBayesNN(2, [4], 1, **kwargs)


def test_loss_argument_errors():
    vb = VariationalBayesNN(2, [4], 3)
    x, y = torch.randn(5, 2), torch.randint(0, 3, (5,))
    with pytest.raises(ValueError, match="num_samples"):
        vb.variational_loss(x, y, num_samples=0)
    with pytest.raises(ValueError, match="kl_weight"):
        vb.variational_loss(x, y, kl_weight=-1.0)
    with pytest.raises(ValueError, match="dataset_size"):
        vb.variational_loss(x, y, dataset_size=0)
    with pytest.raises(ValueError, match=r"in \[0, 2\] for a net with 3 outputs"):
        vb.variational_loss(x, torch.full((5,), 3))
    assert math.isfinite(vb.variational_loss(x, y).item())
