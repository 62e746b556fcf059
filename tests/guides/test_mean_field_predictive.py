"""The mean-field guide's predictive draws have the guide's spread.

``tests/methods/vi/test_exact_posterior.py`` checks the guide's *parameters* (loc,
softplus(rho)); this file checks what ``VariationalBNN.predict`` and ``sample_posterior`` *draw*
from them. With the guide set by hand to known means ``m`` and standard deviations ``s``
(``rho`` the inverse softplus of ``s``), the linear net ``f(x) = w . x + b`` with independent
``w_i ~ N(m_i, s_i^2)`` and ``b ~ N(m_b, s_b^2)`` has the closed-form predictive

    E[f(x)] = m . x + m_b,    Var[f(x)] = sum_i x_i^2 s_i^2 + s_b^2,

and a learned noise scale ``sigma ~ LogNormal(mu, t^2)`` (the guide's positive site) adds
``E[sigma^2] = exp(2 mu + 2 t^2)`` to ``predict(include_noise=True)``.

Tolerances are Monte Carlo ones at ``S = 20,000`` draws: the sample mean of ``S`` draws of
variance ``v`` has sd ``sqrt(v / S)``, and the sample variance of ``S`` Gaussian draws has a
relative sd of ``sqrt(2 / (S - 1)) ~= 1.0%``; both are checked at 5 of those sds (a false alarm
well under one in a million per check). The scales are chosen away from 1 so that a wrong
transform is far outside that band: for ``s = 0.2, 0.5, 2.0`` the raw ``rho`` gives variances
x56.8, x0.75, x0.86; ``exp(rho)`` x1.23, x1.68, x10.2; ``s^2`` x0.04, x0.25, x4, each
at least 20 of those percent off.
"""

from __future__ import annotations

import math

import torch

import bnn_pyro as bp
from bnn_pyro.guides import MeanFieldNormalGuide
from bnn_pyro.guides.mean_field import inverse_softplus

S = 20_000
W_LOC = torch.tensor([[0.5, -1.0, 2.0]])
W_SCALE = torch.tensor([[0.5, 2.0, 0.2]])
B_LOC = torch.tensor([0.3])
B_SCALE = torch.tensor([1.5])
NOISE_LOG_LOC, NOISE_LOG_SCALE = math.log(0.4), 0.3  # sigma ~ LogNormal(log 0.4, 0.3^2)


def _set_guide() -> bp.VariationalBNN:
    """A fitted (one epoch: the guide's sites exist) ``f = w . x + b`` with a learned noise,
    then its guide overwritten with the known values above."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(32, 3, generator=g)
    y = X.sum(1, keepdim=True) + 0.1 * torch.randn(32, 1, generator=g)
    torch.manual_seed(0)
    bnn = bp.VariationalBNN(bp.nn.mlp(3, [], 1), bp.Gaussian(scale="learned"))
    bnn.fit(X, y, epochs=1, progress=False, seed=0)
    guide = bnn.guide
    assert isinstance(guide, MeanFieldNormalGuide)
    values = {
        "net.0.weight": (W_LOC, W_SCALE),
        "net.0.bias": (B_LOC, B_SCALE),
        "likelihood.scale": (torch.tensor([NOISE_LOG_LOC]), torch.tensor([NOISE_LOG_SCALE])),
    }
    assert sorted(guide.site_names()) == sorted(values)
    with torch.no_grad():
        for name, (loc, scale) in values.items():
            key = guide.param_key(name)
            guide.locs[key].copy_(loc)
            guide.rhos[key].copy_(inverse_softplus(scale))
    torch.testing.assert_close(guide.scales()["net.0.weight"], W_SCALE)  # the set-up itself
    return bnn


def _assert_moments(draws: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> None:
    """Empirical mean and variance of ``draws (S, ...)`` against the exact ones, within 5 Monte
    Carlo sds (see the module docstring)."""
    draws = draws.double()
    mean, var = mean.double(), var.double()
    n = draws.shape[0]
    mean_sd = (var / n).sqrt()
    assert bool(((draws.mean(0) - mean).abs() <= 5 * mean_sd).all()), (draws.mean(0), mean)
    ratio = draws.var(0) / var
    assert bool(((ratio - 1).abs() <= 5 * math.sqrt(2 / (n - 1))).all()), ratio


def test_sample_posterior_draws_each_site_with_its_scale():
    bnn = _set_guide()
    draws = bnn.sample_posterior(S, seed=0)
    _assert_moments(draws["net.0.weight"], W_LOC, W_SCALE**2)
    _assert_moments(draws["net.0.bias"], B_LOC, B_SCALE**2)
    # the positive site: a LogNormal, so its log is N(mu, t^2)
    noise = draws["likelihood.scale"]
    assert bool((noise > 0).all())
    _assert_moments(noise.log(), torch.tensor([NOISE_LOG_LOC]), torch.tensor([NOISE_LOG_SCALE**2]))


def test_predict_has_the_closed_form_mean_and_variance():
    bnn = _set_guide()
    x = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.5, -1.0, 2.0]])
    exact_mean = x @ W_LOC.T + B_LOC  # (4, 1)
    exact_var = (x**2) @ (W_SCALE**2).T + B_SCALE**2
    mean, var, samples = bnn.predict(x, return_samples=True, num_samples=S, seed=1)
    assert samples.shape == (S, 4, 1)
    # the per-sample means are the draws of f(x): their moments are the closed form
    _assert_moments(samples, exact_mean, exact_var)
    # predict's own summary: the same moments (its variance is the draws', to rounding)
    mean_sd = (exact_var.double() / S).sqrt()
    assert bool(((mean.double() - exact_mean).abs() <= 5 * mean_sd).all()), (mean, exact_mean)
    ratio = var.double() / exact_var
    assert bool(((ratio - 1).abs() <= 5 * math.sqrt(2 / (S - 1))).all()), ratio


def test_predict_with_noise_adds_the_lognormal_second_moment():
    """``include_noise`` adds the mean of ``sigma^2`` over the draws, ``E = exp(2 mu + 2 t^2)``;
    ``sigma^2`` is LogNormal(2 mu, 4 t^2), whose relative sd is ``sqrt(exp(4 t^2) - 1) = 0.66``,
    so its mean over S draws has a relative sd of 0.66 / sqrt(S) = 0.47%. The epistemic part
    (same seed: the same draws) is subtracted, so only that error remains: checked at 5 sds
    (2.3%). On this site (``t = 0.3``, ``rho = -1.05``) ``exp(rho)`` for the softplus moves
    ``E[sigma^2]`` by +6.7%, ``t^2`` for ``t`` by -15%, the raw ``rho`` by x7.6."""
    bnn = _set_guide()
    x = torch.tensor([[0.2, -0.4, 1.0], [1.0, 1.0, 1.0]])
    _, epistemic = bnn.predict(x, num_samples=S, seed=2)
    _, total = bnn.predict(x, num_samples=S, seed=2, include_noise=True)
    aleatoric = (total - epistemic).double()
    expected = math.exp(2 * NOISE_LOG_LOC + 2 * NOISE_LOG_SCALE**2)
    rel_sd = math.sqrt(math.exp(4 * NOISE_LOG_SCALE**2) - 1) / math.sqrt(S)
    assert bool(((aleatoric / expected - 1).abs() <= 5 * rel_sd).all()), (aleatoric, expected)
