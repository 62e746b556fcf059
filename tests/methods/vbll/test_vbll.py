"""``VBLL``, the method: its fit reaches the exact posterior where one exists, its closed-form
predictive is what its samples estimate, the net ends holding ``q``'s mean, and bad nets and
likelihoods are refused before any work."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

import bnn_pyro as bp
from bnn_pyro.methods.vbll import VBLL


def _data(n: int = 64, d: int = 2, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = x @ torch.tensor([1.0, -2.0], dtype=torch.float64)[:d] + 0.4 * torch.randn(
        n, generator=g, dtype=torch.float64
    )
    return x, y


def test_a_fit_on_fixed_features_reaches_bayesian_linear_regression_s_posterior():
    """A net that is one ``nn.Linear``: its features are fixed (the inputs and a one), the
    noise is known, so the ELBO's maximiser is the exact posterior. Full-batch SGD with
    momentum gets there to round-off in 2,000 steps (float64; 1e-8 asserted, where 3,000 steps of
    Adam at 1e-2 were still 4% off in the variance, which converges far slower than the mean)."""
    x, y = _data()
    torch.manual_seed(0)
    m = VBLL(nn.Linear(2, 1).double(), bp.Gaussian(scale=0.4), prior_scale=1.5).double()
    m.fit(x, y, epochs=2000, batch_size=len(x), lr=0.1, optimizer="sgd", progress=False, seed=0)
    phi = torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], -1)
    s = 1.5 / 3  # prior_scale / F
    precision = phi.T @ phi / 0.4**2 + torch.eye(3, dtype=x.dtype) / s
    cov = torch.linalg.inv(precision)
    mean = cov @ phi.T @ y / 0.4**2
    x_test = torch.randn(20, 2, dtype=x.dtype, generator=torch.Generator().manual_seed(9)) * 3
    phi_test = torch.cat([x_test, torch.ones(20, 1, dtype=x.dtype)], -1)
    got_mean, got_var = m.predict(x_test)
    torch.testing.assert_close(got_mean[:, 0], phi_test @ mean, rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(
        got_var[:, 0], ((phi_test @ cov) * phi_test).sum(-1), rtol=1e-8, atol=1e-12
    )
    assert m.noise_scale == 0.4  # the user's noise is kept


def test_the_closed_form_is_what_the_samples_estimate_and_the_net_holds_the_mean():
    """Regression: 40,000 draws of the last layer, their mean within 5 standard errors of the
    closed form and their variance within 5 of its standard error (``sqrt(2/S)`` relative for
    a Gaussian); the net predicts the closed-form mean after the fit."""
    x, y = _data()
    torch.manual_seed(1)
    m = VBLL(bp.nn.mlp(2, [8], 1).double(), bp.Gaussian(scale="learned")).double()
    m.fit(x, y, epochs=20, lr=1e-2, progress=False, seed=0)
    mean, var, samples = m.predict(x[:6], return_samples=True, num_samples=40_000, seed=0)
    s = samples.shape[0]
    assert bool(((samples.mean(0) - mean).abs() < 5 * (var / s).sqrt()).all())
    assert bool(((samples.var(0) / var - 1).abs() < 5 * math.sqrt(2 / s)).all())
    torch.testing.assert_close(m.model(x[:6]), mean)
    # the learned noise is the head's
    assert m.noise_scale == pytest.approx(float(m.head.noise_log_scale.detach().exp()))


def test_a_classifier_s_probabilities_are_its_sampled_softmax_and_its_logits_closed_form():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(90, 2, generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()
    torch.manual_seed(2)
    m = VBLL(bp.nn.mlp(2, [16], 3), bp.Categorical(), covariance="diagonal")
    m.fit(x, y, epochs=30, lr=1e-2, progress=False, seed=0)
    probs, _, samples = m.predict(x[:5], return_samples=True, seed=1)
    torch.testing.assert_close(probs, samples.mean(0))
    logits, logit_var = m.predict(x[:5], normalize_output=False)
    head_mean, head_var = m.head.output_moments(m.features(x[:5]))
    torch.testing.assert_close(logits, head_mean)
    torch.testing.assert_close(logit_var, head_var + m.head.noise_variance())
    assert float((m.predict(x)[0].argmax(-1) == y).float().mean()) > 0.8


def test_weight_decay_is_the_body_s_alone():
    """``fit(weight_decay=...)`` (a point fit's prior on the body) leaves ``q`` to its KL: on a
    net with no body, any decay gives the same fit, bit for bit."""
    x, y = _data(d=2)
    fits = []
    for decay in (0.0, 10.0):
        torch.manual_seed(3)
        m = VBLL(nn.Linear(2, 1), bp.Gaussian(scale="learned"))
        m.fit(x.float(), y.float(), epochs=5, weight_decay=decay, progress=False, seed=0)
        fits.append(m.predict(x.float()))
    assert torch.equal(fits[0][0], fits[1][0]) and torch.equal(fits[0][1], fits[1][1])


def test_a_noise_set_after_construction_is_the_one_the_fit_uses():
    x, y = _data()
    torch.manual_seed(4)
    m = VBLL(nn.Linear(2, 1).double(), bp.Gaussian(scale="learned")).double()
    m.noise_scale = 0.25
    m.fit(x, y, epochs=3, progress=False, seed=0)
    assert m.noise_scale == 0.25
    torch.testing.assert_close(m.head.noise_variance(), torch.tensor([0.0625], dtype=x.dtype))


def test_a_refit_goes_on_learning_the_noise_it_estimated():
    """The noise a fit learned is an estimate, not the user's: the next fit learns it on."""
    x, y = _data()
    torch.manual_seed(5)
    m = VBLL(nn.Linear(2, 1).double(), bp.Gaussian(scale="learned")).double()
    m.fit(x, y, epochs=3, progress=False, seed=0)
    first = m.noise_scale
    m.fit(x, y, epochs=3, progress=False, seed=1)
    assert m.head.learned_noise and m.noise_scale != first


def test_bad_nets_likelihoods_and_options_are_refused_before_any_work():
    with pytest.raises(ValueError, match="has none: end the net with an nn.Linear"):
        VBLL(nn.Sequential(nn.Conv1d(1, 2, 3)), "regression")
    with pytest.raises(ValueError, match="VBLL supports a Gaussian or Categorical likelihood"):
        VBLL(bp.nn.mlp(2, [4], 1), bp.Bernoulli())
    with pytest.raises(ValueError, match="VBLL supports a Gaussian or Categorical likelihood"):
        VBLL(bp.nn.mlp(2, [4], 2), bp.HeteroscedasticGaussian())
    with pytest.raises(ValueError, match="covariance must be one of"):
        VBLL(bp.nn.mlp(2, [4], 1), "regression", covariance="lowrank")
    with pytest.raises(ValueError, match="prior_scale must be a finite float > 0"):
        VBLL(bp.nn.mlp(2, [4], 1), "regression", prior_scale=0.0)
    squashed = VBLL(nn.Sequential(nn.Linear(2, 4), nn.Linear(4, 1), nn.Tanh()), "regression")
    before = [p.clone() for p in squashed.parameters()]
    with pytest.raises(ValueError, match="is not the last thing the net computes"):
        squashed.fit(*[t.float() for t in _data()], epochs=2, progress=False)
    assert all(torch.equal(a, b) for a, b in zip(before, squashed.parameters(), strict=True))
    with pytest.raises(TypeError, match="unknown options"):
        VBLL(bp.nn.mlp(2, [4], 1), "regression").predict(torch.randn(3, 2), vectorize=True)
