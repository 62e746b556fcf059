"""SGLD samples the stationary law of its own discretisation, known in closed form for a
Gaussian target.

For ``U(θ) = ½ (θ - μ)ᵀ A (θ - μ)`` (``A`` symmetric positive definite) and full-batch
gradients, one SGLD step ``θ ← θ - ε ∇U + sqrt(2 ε T) ξ`` (``ε = lr / N``,
:func:`~bnn_pyro.methods.sgmcmc.samplers.sgld_step`) is the linear autoregression
``θ' - μ = M (θ - μ) + sqrt(2 ε T) ξ`` with ``M = I - ε A``. Its stationary law is
``N(μ, Σ_ε)`` with ``Σ_ε = M Σ_ε M + 2 ε T I``; since ``M`` commutes with ``A`` the solution is

    Σ_ε = 2 ε T (I - M²)⁻¹ = 2 ε T (2 ε A - ε² A²)⁻¹ = T A⁻¹ (I - ε A / 2)⁻¹,

the exact (tempered) posterior covariance ``T A⁻¹`` inflated by the step's known bias. Checking
against ``Σ_ε`` rather than ``T A⁻¹`` leaves only Monte Carlo error, so the tolerances can be far
tighter than the factor 2 (variance x2 or x0.5) that an injected noise off by ``√2`` causes.
"""

from __future__ import annotations

import pytest
import torch

import bnn_pyro as bp
from bnn_pyro.methods.sgmcmc.samplers import sgld_step
from tests.methods.vi.test_exact_posterior import NOISE, _data


def _discretised_covariance(precision: torch.Tensor, eps: float, temperature: float):
    """``Σ_ε = T A⁻¹ (I - ε A / 2)⁻¹`` (module docstring), in float64."""
    eye = torch.eye(len(precision), dtype=torch.float64)
    return temperature * torch.linalg.inv(precision @ (eye - eps * precision / 2))


@pytest.mark.parametrize("temperature", [1.0, 0.3])
def test_sgld_step_has_the_exact_stationary_covariance(temperature):
    """20,000 independent chains on a 2-D correlated Gaussian, 400 steps each from θ = 0.

    ``ε A`` has eigenvalues 0.072 and 0.228, so the covariance left of the start,
    ``M⁴⁰⁰ Σ_ε M⁴⁰⁰``, is ``(1 - 0.072)⁸⁰⁰ ~ 1e-26`` of ``Σ_ε``: the chains' last states are
    20,000 independent draws of ``N(0, Σ_ε)``. The sample covariance of ``K`` such draws has
    entrywise sd ``sqrt((Σ_ij² + Σ_ii Σ_jj) / (K - 1))`` (a relative 1.0% on the diagonal);
    each entry is checked within 5 of those sds. A noise off by ``√2`` moves every entry by
    100% or 50%.
    """
    precision = torch.tensor([[2.0, 0.6], [0.6, 1.0]], dtype=torch.float64)
    dataset_size, lr, chains, steps = 50, 5.0, 20_000, 400
    eps = lr / dataset_size
    theta = torch.zeros(chains, 2, dtype=torch.float64)
    generator = torch.Generator().manual_seed(0)
    for _ in range(steps):
        grad = theta @ precision / dataset_size  # ∇U / N, per datum as the sampler takes it
        sgld_step(
            theta,
            grad,
            lr=lr,
            temperature=temperature,
            dataset_size=dataset_size,
            generator=generator,
        )
    expected = _discretised_covariance(precision, eps, temperature)
    sample = torch.cov(theta.T)
    sd = (
        (expected**2 + torch.outer(expected.diagonal(), expected.diagonal())) / (chains - 1)
    ).sqrt()
    assert bool(((sample - expected).abs() <= 5 * sd).all()), (sample, expected)
    mean_sd = (expected.diagonal() / chains).sqrt()
    assert bool((theta.mean(0).abs() <= 5 * mean_sd).all()), theta.mean(0)


def test_sgld_method_samples_the_discretised_posterior_of_bayesian_linear_regression():
    """``make("sgld")`` on the Bayesian linear regression of ``test_exact_posterior`` (200 rows,
    prior ``N(0, I)``, known noise): full batches (no minibatch noise), ``lr = 0.1`` so that
    ``ε A`` has eigenvalues 0.35-0.44 and the chain mixes in a few steps, 1500 steps with 300 of
    burn-in and every later step kept.

    Tolerance. Along each eigenvector of ``A`` the chain is an AR(1) with coefficient
    ``ρ = 1 - ε λ`` in 0.56-0.65; the square of such a chain has integrated autocorrelation time
    ``(1 + ρ²) / (1 - ρ²) <= 2.5``, so the 1200 samples are worth at least 480 draws for the
    variances: a relative sd of ``sqrt(2 / 480) = 6.5%`` per coordinate, and about half that for
    the trace (four nearly uncorrelated coordinates). The trace ratio is checked within 12%
    (nearly 4 sds), each variance within 25% (nearly 4 sds). The means: integrated
    autocorrelation time ``(1 + ρ) / (1 - ρ) <= 4.8``, ESS >= 250, a sd of 0.063 posterior sd,
    checked within 0.25 (4 sds). A √2 error in the noise doubles or halves every variance.
    Measured at lr = 0.1 on a longer, 4000-sample chain: every variance within 1.3% of ``Σ_ε``.
    """
    X, y = _data()
    phi = torch.cat([X, torch.ones(len(X), 1)], 1).double()
    precision = torch.eye(4, dtype=torch.float64) + phi.T @ phi / NOISE**2
    mean = torch.linalg.solve(precision, phi.T @ y.double() / NOISE**2).squeeze(-1)
    lr = 0.1
    covariance = _discretised_covariance(precision, lr / len(X), 1.0)
    torch.manual_seed(0)
    method = bp.make(
        "sgld",
        bp.nn.mlp(3, [], 1),
        bp.Gaussian(scale=NOISE),
        burn_in=300,
        thinning=1,
        max_samples=1200,
    )
    method.fit(X, y, epochs=1500, batch_size=None, lr=lr, progress=False, seed=0)
    s = method.samples()
    w = torch.cat([s["net.0.weight"].flatten(1), s["net.0.bias"]], 1).double()
    assert len(w) == 1200
    std = covariance.diagonal().sqrt()
    assert float(((w.mean(0) - mean).abs() / std).max()) < 0.25, (w.mean(0), mean)
    sample = torch.cov(w.T)
    trace_ratio = float(sample.trace() / covariance.trace())
    assert abs(trace_ratio - 1) < 0.12, trace_ratio
    ratios = sample.diagonal() / covariance.diagonal()
    assert bool(((ratios - 1).abs() < 0.25).all()), ratios
    # why Σ_ε and not A⁻¹: the step's bias (x1.23-1.27 here) is several times the tolerance
    exact = torch.linalg.inv(precision).diagonal()
    assert bool((covariance.diagonal() / exact > 1.2).all())
