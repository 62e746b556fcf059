"""``VBLLHead``'s terms against their definitions, independently of the ``vbll`` package: the KL
against torch's closed form, the expected log-likelihood against Monte Carlo, Jensen's bound
against the quantity it bounds, and the ELBO's optimum against the exact posterior of Bayesian
linear regression (where the last layer's features are fixed and the noise known, the
variational family holds the posterior, so the ELBO's maximiser is that posterior)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import MultivariateNormal, kl_divergence

from bnn_pyro.methods.vbll import VBLLHead

F, OUT = 4, 2


def _head(covariance: str, classifies: bool = False, seed: int = 0, **kw) -> VBLLHead:
    torch.manual_seed(seed)
    head = VBLLHead(
        F, OUT, classifies=classifies, covariance=covariance, prior_variance=0.6, wishart_scale=0.5,
        dof=1.0, **kw,
    )  # fmt: skip
    head.double()
    with torch.no_grad():  # a q away from its start: every term has something to check
        head.mean.normal_()
        head.log_diag.normal_(0.0, 0.3)
        if covariance == "dense":
            head.off_diag.normal_(0.0, 0.3)
        head.noise_log_scale.normal_(0.0, 0.3)
    return head


@pytest.mark.parametrize("covariance", ["dense", "diagonal"])
def test_the_kl_is_torch_s_closed_form(covariance):
    head = _head(covariance)
    q = MultivariateNormal(head.mean, scale_tril=head.scale_tril())
    p = MultivariateNormal(torch.zeros_like(head.mean), 0.6 * torch.eye(F, dtype=torch.float64))
    torch.testing.assert_close(head.kl(), kl_divergence(q, p).sum(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("covariance", ["dense", "diagonal"])
def test_the_expected_log_likelihood_is_its_monte_carlo_mean(covariance):
    """Two outputs: each row's closed form against the mean of ``log N(y | W_s φ, σ²)`` over
    ``S = 200,000`` draws ``W_s ~ q``, within 5 standard errors of that mean (a false alarm
    about once in 1.7 million per row, by the central limit theorem)."""
    head = _head(covariance)
    g = torch.Generator().manual_seed(1)
    phi = torch.randn(6, F, generator=g, dtype=torch.float64)
    y = torch.randn(6, OUT, generator=g, dtype=torch.float64)
    torch.manual_seed(2)
    with torch.no_grad():
        out = head.sample_outputs(phi, 200_000)  # (S, N, O)
        sigma = head.noise_log_scale.exp()
        draws = torch.distributions.Normal(out, sigma).log_prob(y).sum(-1)  # (S, N)
        exact = head.expected_log_lik(phi, y)
    se = draws.std(0) / math.sqrt(len(draws))
    assert bool(((draws.mean(0) - exact).abs() < 5 * se).all()), (draws.mean(0), exact, se)


def test_the_classifier_s_moments_and_jensen_bound():
    """The logits' closed-form mean and variance (the logit noise included) against 200,000
    sampled logits (5 standard errors; the variance's error from the fourth moment); Jensen's
    bound below the Monte Carlo ``E log softmax_y`` it bounds."""
    head = _head("dense", classifies=True)
    g = torch.Generator().manual_seed(3)
    phi = torch.randn(5, F, generator=g, dtype=torch.float64)
    y = torch.randint(0, OUT, (5,), generator=g)
    torch.manual_seed(4)
    with torch.no_grad():
        logits = head.sample_outputs(phi, 200_000)
        mean, var = head.output_moments(phi)
        var = var + head.noise_variance()
        bound = head.expected_log_lik(phi, y)
        expected = logits.log_softmax(-1).gather(-1, y.expand(len(logits), -1).unsqueeze(-1))
    s = len(logits)
    centred = logits - logits.mean(0)
    assert bool(((logits.mean(0) - mean).abs() < 5 * (var / s).sqrt()).all())
    var_se = ((centred**4).mean(0) - var**2).clamp_min(0).div(s).sqrt()
    assert bool(((centred.pow(2).mean(0) - var).abs() < 5 * var_se).all())
    assert bool((bound <= expected.squeeze(-1).mean(0)).all())


def _exact_posterior(phi, y, noise, prior_variance):
    """Bayesian linear regression, one output: ``Σ = (ΦᵀΦ/σ² + I/s)⁻¹``, ``m = Σ Φᵀ y / σ²``."""
    precision = phi.T @ phi / noise**2 + torch.eye(phi.shape[1], dtype=phi.dtype) / prior_variance
    cov = torch.linalg.inv(precision)
    return cov @ phi.T @ y[:, 0] / noise**2, cov


def test_the_elbo_is_stationary_at_the_exact_posterior_and_worse_beside_it():
    g = torch.Generator().manual_seed(5)
    phi = torch.randn(30, F, generator=g, dtype=torch.float64)
    y = phi @ torch.randn(F, 1, generator=g, dtype=torch.float64) + 0.5 * torch.randn(
        30, 1, generator=g, dtype=torch.float64
    )
    head = VBLLHead(
        F, 1, classifies=False, prior_variance=0.8, wishart_scale=1.0, dof=1.0, noise_scale=0.5
    ).double()
    mean, cov = _exact_posterior(phi, y, 0.5, 0.8)
    chol = torch.linalg.cholesky(cov)
    with torch.no_grad():
        head.mean.copy_(mean.unsqueeze(0))
        head.log_diag.copy_(chol.diagonal().log().unsqueeze(0))
        head.off_diag.copy_(chol.unsqueeze(0))
    params = [head.mean, head.log_diag, head.off_diag]
    loss = head.loss(phi, y, n=30)
    # zero to the round-off of inverting the precision (1e-10 here); the posterior under a prior
    # variance s = 1 or a noise σ = 0.6, leaves gradients of 7e-3 and 1.5e-2 at their largest
    for grad in torch.autograd.grad(loss, params):
        torch.testing.assert_close(grad, torch.zeros_like(grad), rtol=0, atol=1e-8)
    with torch.no_grad():  # any step off it costs: the ELBO is concave in q's mean
        for p in params:
            p.add_(1e-3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    assert float(head.loss(phi, y, n=30).detach()) > float(loss.detach())


@pytest.mark.parametrize(("covariance", "noise"), [("dense", 0.4), ("diagonal", None)])
def test_a_fresh_head_is_its_prior_made_where_asked(covariance, noise):
    """``q`` starts at the prior (a zero mean, the prior's covariance: a KL of 0, where a start
    off the prior's spread would leave ``F·(r − 1 − log r)/2`` per output for a variance ratio
    ``r``), every tensor in the dtype asked for, a fixed noise too."""
    head = VBLLHead(
        F, OUT, classifies=False, covariance=covariance, prior_variance=0.3, wishart_scale=1.0,
        dof=1.0, noise_scale=noise, dtype=torch.float64,
    )  # fmt: skip
    assert {p.dtype for p in head.parameters()} == {torch.float64}
    torch.testing.assert_close(head.kl(), torch.zeros((), dtype=torch.float64))
    variance = torch.full((OUT,), 1.0 if noise is None else noise**2, dtype=torch.float64)
    # float64 round-off: a noise taken through float32 would be 3e-8 off
    torch.testing.assert_close(head.noise_variance(), variance, rtol=1e-12, atol=0)


def test_a_fixed_noise_has_no_wishart_term_and_no_gradient():
    head = VBLLHead(
        F, 1, classifies=False, prior_variance=1, wishart_scale=1, dof=1, noise_scale=0.3
    )
    assert float(head.noise_log_prior()) == 0.0
    assert not head.noise_log_scale.requires_grad
    torch.testing.assert_close(head.noise_variance(), torch.tensor([0.09]))


def test_a_noise_set_later_is_fixed_and_a_bad_one_refused_before_any_change():
    head = VBLLHead(F, 2, classifies=False, prior_variance=1, wishart_scale=1, dof=1)
    head.set_noise(torch.tensor([0.5, 2.0]))
    assert not head.learned_noise and not head.noise_log_scale.requires_grad
    torch.testing.assert_close(head.noise_variance(), torch.tensor([0.25, 4.0]))
    for bad in (0.0, -1.0, torch.tensor([0.5, float("nan")])):
        with pytest.raises(ValueError, match="^noise_scale must be"):
            head.set_noise(bad)
    torch.testing.assert_close(head.noise_variance(), torch.tensor([0.25, 4.0]))
    head.set_noise(None)  # learned again, from where it is
    assert head.learned_noise and head.noise_log_scale.requires_grad
    torch.testing.assert_close(head.noise_variance(), torch.tensor([0.25, 4.0]))


def test_a_classifier_s_logit_noise_is_learned_whatever_noise_is_given():
    head = VBLLHead(
        F, 3, classifies=True, prior_variance=1, wishart_scale=1, dof=1, noise_scale=0.3
    )
    assert head.learned_noise and head.noise_log_scale.requires_grad


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="covariance must be one of"):
        VBLLHead(
            F, 1, classifies=False, covariance="lowrank", prior_variance=1, wishart_scale=1, dof=1
        )


@pytest.mark.parametrize("covariance", ["dense", "diagonal"])
def test_each_draw_is_the_mean_plus_the_scale_times_its_standard_normal(covariance):
    """``W_s = M + L ε_s`` with ``ε_s`` the generator's next ``S·O·F`` normals, in order (the
    draws written out with the full ``L`` matrices: the head must not copy them per draw, but
    its draws are theirs); a classifier adds one logit-noise draw per sample after them."""
    head = _head(covariance, classifies=True)
    phi = torch.randn(5, F, dtype=torch.float64)
    torch.manual_seed(7)
    got = head.sample_outputs(phi, 3)
    torch.manual_seed(7)
    eps = torch.randn(3, OUT, F, 1, dtype=torch.float64)
    noise = torch.randn(3, 1, OUT, dtype=torch.float64)
    with torch.no_grad():
        weights = head.mean + (head.scale_tril() @ eps).squeeze(-1)
        expected = torch.einsum("sof,nf->sno", weights, phi) + head.noise_log_scale.exp() * noise
    assert got.shape == (3, 5, OUT)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)  # float64 round-off


@pytest.mark.parametrize("classifies", [False, True])
def test_a_loss_builds_the_factor_once_for_the_kl_and_the_likelihood(classifies, monkeypatch):
    """The dense factor is the head's largest tensor (``O·F²``): one loss makes it once and
    hands it to both terms; a caller without it gets the same numbers, made on the spot."""
    head = _head("dense", classifies=classifies)
    g = torch.Generator().manual_seed(6)
    phi = torch.randn(7, F, generator=g, dtype=torch.float64)
    y = (
        torch.randint(0, OUT, (7,), generator=g)
        if classifies
        else torch.randn(7, OUT, generator=g, dtype=torch.float64)
    )
    made = []
    real = VBLLHead._factor
    monkeypatch.setattr(VBLLHead, "_factor", lambda self: made.append(1) or real(self))
    loss = head.loss(phi, y, n=30)
    assert len(made) == 1
    factor = real(head)
    mean, var = head.output_moments(phi, factor)
    assert len(made) == 1  # a factor handed in is used, not made again
    separate = (head.kl() - head.noise_log_prior()) / 30 - head.expected_log_lik(phi, y).mean()
    assert len(made) == 3  # each term alone makes its own
    torch.testing.assert_close(loss, separate, rtol=1e-14, atol=0.0)
    torch.testing.assert_close((mean, var), head.output_moments(phi), rtol=1e-14, atol=0.0)


def test_the_factor_is_made_in_the_head_s_dtype_and_on_its_device():
    """The mask of the strictly lower part follows the head: a bfloat16 head's factor stays
    bfloat16 (a float32 mask would promote it), and a head on another device (``meta`` here, a
    stand-in for a GPU) finds its mask there."""
    half = VBLLHead(3, 2, classifies=True, prior_variance=1, wishart_scale=1, dof=1,
                    dtype=torch.bfloat16)  # fmt: skip
    assert [t.dtype for t in half._factor()] == [torch.bfloat16, torch.bfloat16]
    meta = VBLLHead(3, 2, classifies=True, prior_variance=1, wishart_scale=1, dof=1,
                    device="meta")  # fmt: skip
    lower, diag = meta._factor()
    assert lower.device.type == diag.device.type == "meta"
    assert lower.shape == (2, 3, 3) and diag.shape == (2, 3)
