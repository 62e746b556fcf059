"""``Likelihood.predictive_log_prob``: each row's log density of ``y`` when the net output is
Gaussian, ``f ~ N(m, diag(v))`` (the Laplace GLM's held-out criterion reads it), and the
likelihood's own flags (``classifies``, ``homoscedastic``, ``learned``, ``gaussian``) that
replace the task strings and the type checks the methods once branched on.

The Gaussian case is checked against ``torch.distributions.Normal`` with the variances added
(exact); the probit cases against the formula written out here, against ``log_prob`` at zero
variance, and against a Monte Carlo estimate of the integral they approximate."""

from __future__ import annotations

import math

import pytest
import torch

import bnn_pyro as bp
from bnn_pyro.likelihoods import NOISE_SITE, noise_latents

D = torch.float64


def _rows(o: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    f = torch.randn(6, o, generator=g, dtype=D)
    return f, torch.rand(6, o, generator=g, dtype=D) * 3


def test_the_gaussian_adds_the_output_variance_to_the_noise():
    f, var = _rows(2)
    y = torch.randn(6, 2, generator=torch.Generator().manual_seed(1), dtype=D)
    lik = bp.Gaussian(scale=0.5)
    want = torch.distributions.Normal(f, (var + 0.25).sqrt()).log_prob(y).sum(-1)
    torch.testing.assert_close(lik.predictive_log_prob(f, var, y, {}), want)
    # a noise handed in from outside (a fitted std per column) replaces the fixed one
    sigma = torch.tensor([0.1, 2.0], dtype=D)
    want = torch.distributions.Normal(f, (var + sigma**2).sqrt()).log_prob(y).sum(-1)
    got = lik.predictive_log_prob(f, var, y, noise_latents(sigma))
    torch.testing.assert_close(got, want)
    # a learned scale reads its latent
    learned = bp.Gaussian(scale="learned").predictive_log_prob(f, var, y, {NOISE_SITE: sigma})
    torch.testing.assert_close(learned, want)
    # no output variance: the likelihood's own density
    zero = torch.zeros_like(var)
    torch.testing.assert_close(lik.predictive_log_prob(f, zero, y, {}), lik.log_prob(f, y, {}))


def test_the_categorical_is_the_probit_approximation():
    f, var = _rows(3)
    y = torch.tensor([0, 1, 2, 2, 1, 0])
    scaled = f / torch.sqrt(1 + math.pi / 8 * var)  # MacKay (1992), written out
    want = torch.log_softmax(scaled, -1).gather(-1, y[:, None]).squeeze(-1)
    got = bp.Categorical().predictive_log_prob(f, var, y, {})
    torch.testing.assert_close(got, want)
    zero = torch.zeros_like(var)
    torch.testing.assert_close(
        bp.Categorical().predictive_log_prob(f, zero, y, {}), bp.Categorical().log_prob(f, y, {})
    )


def test_the_bernoulli_probit_is_close_to_the_integral_it_approximates():
    f, var = _rows(2)
    y = (torch.arange(12).view(6, 2) % 2).to(D)
    got = bp.Bernoulli().predictive_log_prob(f, var, y, {})
    scaled = f / torch.sqrt(1 + math.pi / 8 * var)
    p = torch.sigmoid(scaled)
    want = (y * p.log() + (1 - y) * (1 - p).log()).sum(-1)
    torch.testing.assert_close(got, want)
    # E[sigmoid(f)] under f ~ N(m, v) by Monte Carlo: 200k draws give a standard error below
    # 0.0012 on a probability, and the probit approximation of the logistic-normal integral is
    # within 0.02 of it for every (m, v) (MacKay 1992; Bishop 2006, 4.5.2): 0.025 covers both.
    g = torch.Generator().manual_seed(2)
    draws = f + var.sqrt() * torch.randn(200_000, *f.shape, generator=g, dtype=D)
    exact = torch.sigmoid(draws).mean(0)
    assert float((p - exact).abs().max()) < 0.025


def test_likelihoods_without_a_closed_form_refuse():
    f, var = _rows(2)
    with pytest.raises(TypeError, match="^HeteroscedasticGaussian gives no predictive density"):
        bp.HeteroscedasticGaussian().predictive_log_prob(f, var, f, {})
    with pytest.raises(TypeError, match="^HeteroscedasticGaussian gives no Hessian"):
        bp.HeteroscedasticGaussian().output_hessian(f, {})


@pytest.mark.parametrize(
    "lik, classifies, homoscedastic, learned, gaussian",
    [
        (bp.Categorical(), True, False, False, False),
        (bp.Bernoulli(), True, False, False, False),
        (bp.Gaussian(scale=0.5), False, True, False, True),
        (bp.Gaussian(scale="learned"), False, True, True, True),
        (bp.HeteroscedasticGaussian(), False, False, False, True),
    ],
)
def test_each_likelihood_says_what_it_is(lik, classifies, homoscedastic, learned, gaussian):
    said = (lik.classifies, lik.homoscedastic, lik.learned, lik.gaussian)
    assert said == (classifies, homoscedastic, learned, gaussian)


def test_a_categorical_over_one_output_is_refused():
    assert bp.Categorical().check_targets(torch.tensor([0, 1]), out_dim=2).tolist() == [0, 1]
    with pytest.raises(ValueError, match=r"C >= 2 outputs .* got 1; for one binary column use"):
        bp.Categorical().check_targets(torch.tensor([0, 0]), out_dim=1)
