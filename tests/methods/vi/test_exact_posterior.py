"""Bayesian linear regression: SVI with the mean-field guide recovers the exact answer.

For ``y = [X, 1] w + eps``, ``eps ~ N(0, s^2)`` with known ``s`` and prior ``w ~ N(0, I)``, the
posterior is Gaussian with precision ``A = I + Phi^T Phi / s^2`` and mean
``A^{-1} Phi^T y / s^2``. The KL(q || p)-optimal fully factorised Gaussian q of a Gaussian p has
the exact means and the variances ``1 / diag(A)`` (e.g. Bishop, PRML, section 10.1.2), so a
correct mean-field SVI (``mlp(D, [], 1)``: one linear layer) must converge to both.
"""

from __future__ import annotations

import pytest
import torch

import bnn_pyro as bp

NOISE = 0.5


def _data(n: int = 200, d: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    X = torch.randn(n, d, generator=g)
    w = torch.tensor([[0.8], [-1.5], [0.3]])
    y = X @ w + 0.7 + NOISE * torch.randn(n, 1, generator=g)
    return X, y


def _exact(X: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    phi = torch.cat([X, torch.ones(len(X), 1)], 1).double()
    precision = torch.eye(phi.shape[1], dtype=torch.float64) + phi.T @ phi / NOISE**2
    mean = torch.linalg.solve(precision, phi.T @ y.double() / NOISE**2).squeeze(-1)
    return mean, torch.diagonal(precision).rsqrt()


@pytest.mark.parametrize("elbo", ["meanfield", "trace"])
def test_mean_field_svi_recovers_the_exact_posterior(elbo):
    """One fit with the library's cosine schedule and iterate averaging, one particle."""
    X, y = _data()
    mean, std = _exact(X, y)
    torch.manual_seed(0)
    bnn = bp.VariationalBNN(bp.nn.mlp(3, [], 1), bp.Gaussian(scale=NOISE), init_scale=0.05)
    history = bnn.fit(
        X,
        y,
        epochs=3000,
        batch_size=None,
        lr=2e-2,
        elbo=elbo,
        lr_schedule="cosine",
        average=0.5,
        progress=False,
        seed=0,
    )
    assert history["lr"][0] == pytest.approx(2e-2) and history["lr"][-1] < 1e-5
    loc, scale = _posterior(bnn)
    # Tolerance. The exact posterior std is ~0.035 here, so 0.1 std (~3.5e-3) for the means and
    # 5% for the scales are several times what is left of the optimizer's jitter once the step
    # decays and the last half of the iterates is averaged (measured: 0.014 std and 3%), yet a
    # wrong KL or likelihood scaling (e.g. KL counted per batch, or N/B off) shifts the scales by
    # far more than 5%. The constant step alone misses the means (next test).
    assert torch.allclose(loc, mean, atol=0.1 * float(std.min())), (loc, mean)
    assert torch.allclose(scale, std, rtol=0.05), (scale, std)


def test_a_constant_step_alone_jitters_around_the_posterior():
    """Why the schedule and the averaging matter: the last iterate of constant-step Adam at the
    same lr sits several tenths of a posterior std off the exact means (measured: 0.25 at the
    1500 epochs here, 0.39 at 3000; 0.47 under seeds 1 and 2). Half the length of the fit above
    shows the same: a constant step's jitter is stationary well before (the start is left
    behind in ~100 steps, Adam's second moment forgets it in ~1000), it does not shrink."""
    X, y = _data()
    mean, std = _exact(X, y)
    torch.manual_seed(0)
    bnn = bp.VariationalBNN(bp.nn.mlp(3, [], 1), bp.Gaussian(scale=NOISE), init_scale=0.05)
    bnn.fit(
        X,
        y,
        epochs=1500,
        batch_size=None,
        lr=2e-2,
        elbo="meanfield",
        lr_schedule="constant",
        progress=False,
        seed=0,
    )
    loc, _ = _posterior(bnn)
    assert float(((loc - mean).abs() / std).max()) > 0.1


def _posterior(bnn: bp.VariationalBNN) -> tuple[torch.Tensor, torch.Tensor]:
    means, scales = bnn.guide.means(), bnn.guide.scales()
    loc = torch.cat([means["net.0.weight"].ravel(), means["net.0.bias"]]).double()
    return loc, torch.cat([scales["net.0.weight"].ravel(), scales["net.0.bias"]]).double()


@pytest.mark.parametrize("elbo", ["meanfield", "trace"])
def test_default_fit_recovers_the_exact_posterior(elbo):
    """Issue 12's bar: the default settings, nothing but ``epochs`` (and the ELBO) chosen --
    minibatches of 128 of the 200 rows, lr 1e-2, init_scale 0.01, one particle, and the default
    schedule (cosine decay to 0) -- recover the exact means within 0.1 posterior std and the
    mean-field variances within 10%."""
    X, y = _data()
    mean, std = _exact(X, y)
    torch.manual_seed(0)
    bnn = bp.VariationalBNN(bp.nn.mlp(3, [], 1), bp.Gaussian(scale=NOISE))
    bnn.fit(X, y, epochs=3000, elbo=elbo, progress=False, seed=0)
    loc, scale = _posterior(bnn)
    # Tolerance: the issue's. Measured 0.06 std and 5% (two seeds, both ELBOs); a constant step
    # ends 0.34-0.48 std and 28-41% off at these settings, a wrong KL or N/B scaling far more.
    assert float(((loc - mean).abs() / std).max()) < 0.1, (loc, mean)
    assert float((scale**2 / std**2 - 1).abs().max()) < 0.10, (scale, std)


@pytest.mark.parametrize("elbo", ["trace", "meanfield"])
def test_the_defaults_reach_the_exact_predictive_mean_in_2000_epochs(elbo):
    """``fit`` at its defaults (only ``epochs`` and ``elbo`` set) on Bayesian linear regression:
    for a Gaussian linear model the mean-field optimum has the exact posterior mean, so the
    predictive mean's error is convergence alone. Read through ``predict`` at 40 test points.

    Tolerance. The target is 0.1 exact predictive sd at every point (measured: 0.055). It is
    read with 20,000 predictive samples, whose Monte Carlo error is 1/sqrt(20000) = 0.007 sd per
    point; at ``predict``'s default 100 samples that error alone is 0.1 sd per point (0.18 at
    the worst of 40 points, measured), which is what a reading at the default count sees. The
    variance is judged against the mean-field optimum's (diagonal precision), within 9%
    (measured: 0.93-1.01; the sampled variance's own error at 20,000 samples is 1%)."""
    X, y = _data()
    phi = torch.cat([X, torch.ones(len(X), 1)], 1).double()
    precision = torch.eye(4, dtype=torch.float64) + phi.T @ phi / NOISE**2
    covariance = torch.linalg.inv(precision)
    mean_w = covariance @ phi.T @ y.double() / NOISE**2
    x = torch.randn(40, 3, generator=torch.Generator().manual_seed(7))
    rows = torch.cat([x, torch.ones(40, 1)], 1).double()
    exact_mean = (rows @ mean_w).squeeze(-1)
    exact_sd = ((rows @ covariance) * rows).sum(-1).sqrt()
    mean_field_var = (rows**2 / torch.diagonal(precision)).sum(-1)
    torch.manual_seed(0)
    bnn = bp.VariationalBNN(bp.nn.mlp(3, [], 1), bp.Gaussian(scale=NOISE))
    bnn.fit(X, y, epochs=2000, elbo=elbo, progress=False, seed=0)
    mean, var = bnn.predict(x, num_samples=20_000, seed=0)
    error = ((mean.squeeze(-1).double() - exact_mean) / exact_sd).abs().max()
    assert error < 0.1, float(error)
    ratio = var.squeeze(-1).double() / mean_field_var
    assert ((ratio - 1).abs() < 0.09).all(), ratio
