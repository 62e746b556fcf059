"""Priors (selection, distributions, devices) and likelihoods (targets, densities)."""

from __future__ import annotations

import math

import pyro.distributions as dist
import pytest
import torch
import torch.nn as nn
from scipy import stats

import bnn_pyro as bp
from bnn_pyro.priors import ScaleMixtureNormal, prior_from_config


def test_selection_by_name_and_type(regression_data):
    X, y = regression_data
    torch.manual_seed(0)
    net = nn.Sequential(bp.nn.Linear(3, 4), nn.LayerNorm(4), nn.ReLU(), bp.nn.Linear(4, 1))
    bnn = bp.VariationalBNN(
        net, bp.Gaussian(0.1), prior=bp.IIDPrior(dist.Normal(0.0, 1.0), exclude="*.bias")
    )
    assert bnn.site_names == ["net.0.weight", "net.3.weight"]  # LayerNorm: not a Bayesian type
    bnn.fit(X, y, epochs=3, progress=False)
    point = dict(bnn.named_parameters())
    assert {"net.0.bias", "net.1.weight", "net.3.bias"} <= set(point)  # point estimates, trained
    last_layer = bp.VariationalBNN(
        bp.nn.mlp(3, [4], 1),
        bp.Gaussian(0.1),
        prior=bp.IIDPrior(dist.Normal(0.0, 1.0), include="2.*"),
    )
    assert last_layer.site_names == ["net.2.weight", "net.2.bias"]
    with pytest.raises(ValueError, match="selects no parameter"):
        bp.VariationalBNN(
            bp.nn.mlp(3, [4], 1),
            bp.Gaussian(0.1),
            prior=bp.IIDPrior(dist.Normal(0.0, 1.0), include="head.*"),
        )


def test_layerwise_prior_scales_with_fan_in():
    prior = bp.LayerwiseNormalPrior("radford")
    assert math.isclose(prior.std(nn.Linear(100, 3)), 0.1)
    assert math.isclose(bp.LayerwiseNormalPrior("kaiming").std(nn.Linear(50, 3)), math.sqrt(2 / 50))
    assert math.isclose(bp.LayerwiseNormalPrior("xavier").std(nn.Linear(6, 2)), 0.5)
    assert math.isclose(prior.std(nn.Conv2d(4, 8, 3)), 1 / 6)  # fan-in 4 * 3 * 3
    with pytest.raises(ValueError, match="method"):
        bp.LayerwiseNormalPrior("he")


def test_scale_mixture_density_against_scipy():
    d = ScaleMixtureNormal(0.3, 1.0, 0.05)
    x = torch.linspace(-3, 3, 13, dtype=torch.float64)
    expected = torch.log(
        0.3 * torch.from_numpy(stats.norm.pdf(x.numpy(), scale=1.0))
        + 0.7 * torch.from_numpy(stats.norm.pdf(x.numpy(), scale=0.05))
    )
    assert torch.allclose(d.log_prob(x), expected, rtol=1e-6)
    samples = d.sample((200_000,))
    # variance 0.3 + 0.7 * 0.0025; the sample variance of 2e5 draws has relative sd ~ sqrt(2/n)
    # times the kurtosis factor (< 10 here): 5% is over 5 standard errors
    assert math.isclose(float(samples.var()), 0.3 + 0.7 * 0.05**2, rel_tol=0.05)


def test_priors_follow_the_nets_dtype(regression_data):
    X, y = regression_data
    bnn = bp.VariationalBNN(
        bp.nn.mlp(3, [4], 1).double(), bp.Gaussian(0.1), prior=bp.ScaleMixturePrior()
    )
    bnn.fit(X.double(), y.double(), epochs=2, progress=False)
    mean, _ = bnn.predict(X, num_samples=3)
    assert mean.dtype == torch.float64
    assert bnn.sample_posterior(2)["net.0.weight"].dtype == torch.float64


@pytest.mark.parametrize(
    "prior",
    [
        bp.IIDPrior(dist.StudentT(3.0, 0.0, 2.0)),
        bp.LayerwiseNormalPrior("xavier", gain=2.0),
        bp.ScaleMixturePrior(0.75, 0.5, 0.01, exclude=["*.bias"]),
    ],
)
def test_prior_config_round_trip(prior):
    rebuilt = prior_from_config(prior.config())
    assert repr(rebuilt) == repr(prior)
    assert rebuilt.include == prior.include and rebuilt.exclude == prior.exclude


def test_prior_arguments_are_checked():
    with pytest.raises(ValueError, match="univariate"):
        bp.IIDPrior(dist.Normal(torch.zeros(2), 1.0))
    with pytest.raises(ValueError, match="real line"):
        bp.IIDPrior(dist.Gamma(1.0, 1.0))
    with pytest.raises(ValueError, match="mixture_weight"):
        bp.ScaleMixturePrior(1.5)
    with pytest.raises(ValueError, match="scale2"):
        bp.ScaleMixturePrior(0.5, 1.0, -1.0)


def test_likelihood_densities_against_torch():
    f = torch.randn(4, 6, 2)
    y = torch.randn(6, 2)
    lp = bp.Gaussian(0.3).log_prob(f, y, {})
    assert torch.allclose(lp, torch.distributions.Normal(f, 0.3).log_prob(y).sum(-1))
    het = bp.HeteroscedasticGaussian(min_scale=0.01)
    g = torch.randn(4, 6, 4)
    scale = torch.nn.functional.softplus(g[..., 2:]) + 0.01
    expected = torch.distributions.Normal(g[..., :2], scale).log_prob(y).sum(-1)
    assert torch.allclose(het.log_prob(g, y, {}), expected)
    labels = torch.tensor([0, 1, 0, 1, 1, 0])
    assert torch.allclose(
        bp.Categorical().log_prob(f, labels, {}),
        torch.distributions.Categorical(logits=f).log_prob(labels),
    )


def test_likelihood_arguments_are_checked():
    with pytest.raises(ValueError, match="'learned'"):
        bp.Gaussian(scale="fixed")
    with pytest.raises(ValueError, match="positive reals"):
        bp.Gaussian(scale="learned", scale_prior=dist.Normal(0.0, 1.0))
    with pytest.raises(ValueError, match="even number"):
        bp.HeteroscedasticGaussian().check_targets(torch.randn(5, 1), out_dim=3)
    with pytest.raises(ValueError, match="binary"):
        bp.Bernoulli().check_targets(torch.tensor([0.0, 2.0]), out_dim=1)
    with pytest.raises(ValueError, match=r"\(N, 2\) .* got \(5, 3\)$"):
        bp.Gaussian().check_targets(torch.randn(5, 3), out_dim=2)
