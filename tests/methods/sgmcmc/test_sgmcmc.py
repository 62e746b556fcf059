"""SG-MCMC (``sghmc``, ``sgld``, ``csghmc``): right by default on a posterior known in closed
form, tempered by ``temperature``, bounded in memory, checked, saved and loaded."""

from __future__ import annotations

import pytest
import torch

import bnn_pyro as bp
from bnn_pyro.exceptions import NotFittedError
from bnn_pyro.methods.sgmcmc import SampleCollector
from bnn_pyro.methods.sgmcmc.step_sizes import run_step
from tests.methods.vi.test_exact_posterior import NOISE, _data


def _exact_posterior(X: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The full posterior of ``y = [X, 1] w + N(0, NOISE²)``, ``w ~ N(0, I)``: mean, covariance."""
    phi = torch.cat([X, torch.ones(len(X), 1)], 1).double()
    precision = torch.eye(phi.shape[1], dtype=torch.float64) + phi.T @ phi / NOISE**2
    covariance = torch.linalg.inv(precision)
    return covariance @ phi.T @ y.double() / NOISE**2, covariance


def _weights(method: bp.BaseBayesianMethod) -> torch.Tensor:
    """The kept samples of ``mlp(3, [], 1)`` as ``(K, 4)``: the three weights, then the bias."""
    s = method.samples()
    return torch.cat([s["net.0.weight"].flatten(1), s["net.0.bias"]], 1).double()


def test_sghmc_samples_the_exact_posterior_by_default():
    """The issue's bar: nothing but ``epochs`` chosen (batches of 128 of the 200 rows, lr 0.05,
    mdecay 0.2, a quarter of the 10 000 steps as burn-in, 1000 samples kept, one every 7 steps).

    Tolerance. The chain's integrated autocorrelation time is ~11 steps for the coordinates
    and ~8 for their squares (measured on a 9000-step chain), so the 1000 samples, 7 steps
    apart, are worth ESS ~ 700-1000 independent draws. The Monte Carlo error of a mean is then
    0.03-0.04 posterior std per coordinate (0.1 std is ~3 of them), and the expected relative
    Frobenius error of a 4x4 covariance estimated from n draws is sqrt(5 / n) = 7-8.5%, to which
    the sampler's own bias adds ~4% of variance (the minibatch noise it does not subtract,
    measured on a 9000-sample chain). Measured here: 0.066 std and 6.8%. The issue's 10% thus
    leaves little room: a wrong N/B scaling, a prior counted per batch or a noise term off by a
    factor moves the covariance by far more (half the noise term halves the variances).
    """
    X, y = _data()
    mean, covariance = _exact_posterior(X, y)
    std = covariance.diagonal().sqrt()
    torch.manual_seed(0)
    method = bp.make("sghmc", bp.nn.mlp(3, [], 1), bp.Gaussian(scale=NOISE))
    method.fit(X, y, epochs=5000, progress=False, seed=0)
    w = _weights(method)
    assert len(w) == 1000
    mean_error = float(((w.mean(0) - mean.squeeze(-1)).abs() / std).max())
    frobenius = float((torch.cov(w.T) - covariance).norm() / covariance.norm())
    assert mean_error < 0.1, mean_error
    assert frobenius < 0.10, frobenius


# SGLD at its defaults (lr 0.01) misses that bar in the same budget (5000 epochs, 10 s): its
# autocorrelation time is ~50 steps there (θ moves by lr · ∇U / N ~ 0.04 of the way to the mean
# per step), so its 1000 samples are worth ~150 draws. Measured at 6000 epochs: means 0.15
# posterior std off (coordinate-wise maximum), covariance 9.2% off (relative Frobenius). A step
# size large enough to mix in this budget would bias its variances (``1 / (1 - εk/2)``): SGHMC
# is the method that meets the bar.


def test_temperature_scales_the_covariance():
    """At ``T`` the chain samples ``p(θ|D)^(1/T)``, a Gaussian of covariance ``T Σ`` here. Full
    batches, so that no minibatch noise adds to the ``T``-scaled noise; 1000 samples of 3000
    steps (ESS ~ 300, a 4% standard error of the trace ratio): measured 0.274."""
    X, y = _data()
    _, covariance = _exact_posterior(X, y)
    torch.manual_seed(0)
    method = bp.make("sghmc", bp.nn.mlp(3, [], 1), bp.Gaussian(scale=NOISE), temperature=0.25)
    method.fit(X, y, epochs=4000, batch_size=None, progress=False, seed=0)
    ratio = float(torch.cov(_weights(method).T).trace() / covariance.trace())
    assert 0.25 * 0.85 < ratio < 0.25 * 1.15, ratio


def test_the_collector_keeps_a_uniform_subset_within_its_bound():
    """Reservoir sampling: of 100 candidates, 10 kept; each candidate's inclusion frequency over
    2000 seeds is 10 / 100 (standard error 0.0067; the bound 0.03 is 4.5 of them)."""
    counts = torch.zeros(100)
    for seed in range(2000):
        collector = SampleCollector(max_samples=10, seed=seed)
        for step in range(100):
            collector.offer(step, lambda s=step: torch.tensor([float(s)]))
        kept = collector.samples
        assert kept.shape == (10, 1) and len(collector.store) <= 10  # the memory bound
        counts[kept.long().squeeze(-1)] += 1
    frequency = counts / 2000
    assert float((frequency - 0.1).abs().max()) < 0.03, frequency
    # burn-in and thinning choose the candidates; the same seed, the same subset
    a, b = SampleCollector(3, burn_in=5, thinning=3, seed=1), SampleCollector(3, 5, 3, seed=1)
    for step in range(50):
        a.offer(step, lambda s=step: torch.tensor([float(s)]))
        b.offer(step, lambda s=step: torch.tensor([float(s)]))
    assert a.seen == 15 and torch.equal(a.samples, b.samples)
    assert all(int(v) >= 5 and (int(v) - 5) % 3 == 0 for v in a.samples.squeeze(-1))


def _small() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    X = torch.randn(40, 2, generator=g)
    return X, X[:, 0] - 0.5 * X[:, 1] + 0.1 * torch.randn(40, generator=g)


@pytest.mark.parametrize(
    ("options", "fit", "message"),
    [
        ({}, {"lr": 0.0}, "lr must be a finite float > 0.0, got 0.0"),
        ({}, {"lr": -1e-3}, "lr must be a finite float > 0.0"),
        ({"temperature": 0.0}, {}, "temperature must be a finite float > 0.0, got 0.0"),
        ({"temperature": -1.0}, {}, "temperature must be a finite float > 0.0"),
        ({"burn_in": -1}, {}, "burn_in must be an int >= 0, got -1"),
        ({"burn_in": 20}, {}, "burn_in must be < the run's 20 steps, got 20"),
        ({"burn_in": 10, "thinning": 11}, {}, "thinning must be <= the 10 sampling steps"),
        ({"max_samples": 0}, {}, "max_samples must be an int >= 1, got 0"),
        ({"sampler": "hmc"}, {}, "sampler must be one of"),
        ({"mdecay": 1.5}, {}, "mdecay must be a finite float in"),
    ],
)
def test_bad_arguments_are_refused_by_name_before_any_work(options, fit, message):
    X, y = _small()
    method = None
    with pytest.raises(ValueError, match=message):
        method = bp.make("sghmc", bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1), **options)
        method.fit(X, y, epochs=10, batch_size=20, progress=False, seed=0, **fit)
    if method is not None:
        with pytest.raises(NotFittedError):  # nothing ran: no samples
            method.samples()


@pytest.mark.parametrize("name", ["sghmc", "csghmc", "sgld"])
def test_save_and_load_give_identical_predictions(name, tmp_path):
    X, y = _small()
    torch.manual_seed(0)
    method = bp.make(name, bp.nn.mlp(2, [8], 1), bp.Gaussian(scale="learned"), num_samples=30)
    method.fit(X, y, epochs=40, batch_size=20, progress=False, seed=0)
    assert "likelihood.scale" in method.samples()  # the learned noise is sampled too
    assert bool((method.samples()["likelihood.scale"] > 0).all())
    path = tmp_path / f"{name}.pt"
    method.save(path)
    loaded = bp.load(path, net=bp.nn.mlp(2, [8], 1))
    for a, b in zip(method.predict(X, return_samples=True, seed=5),
                    loaded.predict(X, return_samples=True, seed=5), strict=True):  # fmt: skip
        assert torch.equal(a, b)
    assert torch.equal(loaded.kept_samples, method.kept_samples)
    locs, scales = loaded.predictive_gaussian(X, seed=5)
    assert locs.shape == (30, 40, 1) and bool((scales > 0).all())


def test_a_tiny_classification_fit_works():
    g = torch.Generator().manual_seed(1)
    X = torch.randn(60, 2, generator=g)
    y = (X[:, 0] + X[:, 1] > 0).long()
    torch.manual_seed(0)
    method = bp.make("sghmc", bp.nn.mlp(2, [8], 2), bp.Categorical(), num_samples=20)
    history = method.fit(X, y, epochs=60, batch_size=30, progress=False, seed=0)
    assert history["loss"][-1] < history["loss"][0]
    mean, var = method.predict(X, seed=0)
    torch.testing.assert_close(mean.sum(-1), torch.ones(60))
    assert float((mean.argmax(-1) == y).float().mean()) > 0.9
    assert bool((var > 0).any())


def test_the_cyclical_schedule_collects_at_the_end_of_each_cycle():
    """``csghmc``: 4 cycles of 25 steps, the last 20% of each sampling (5 steps), thinning 1."""
    X, y = _small()
    torch.manual_seed(0)
    method = bp.make("csghmc", bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1), thinning=1)
    method.fit(X, y, epochs=50, batch_size=20, progress=False, seed=0)
    assert method.last_run["seen"] == 4 * 5 and len(method.kept_samples) == 20


@pytest.mark.parametrize("rows", [64, 8])
def test_a_cyclical_preconditioner_averages_every_step_only_on_the_whole_data_set(rows):
    """On the whole data set a cyclical run's exploration averages ``g²`` over every step (its
    noise-free gradient goes to zero as the chain settles, and Springenberg et al.'s window
    would shrink with it); on minibatches it keeps their window, whose length ``tau`` grows by
    less than one a step while the gradient is noisy (``tau ← 1 + tau (1 - E[g]² / E[g²])``)."""
    torch.manual_seed(0)
    X = torch.randn(64, 2)
    y = X.sum(-1, keepdim=True) + 0.1 * torch.randn(64, 1)
    m = bp.make("csghmc", bp.nn.mlp(2, [4], 1), bp.Gaussian(scale=0.1))
    step = m.start_run(X, y, steps=40, lr=0.01)  # 4 cycles of 10: the first 8 steps explore
    grads = []
    for i in range(5):
        xb, yb = X[i * rows % 64 :][:rows], y[i * rows % 64 :][:rows]
        grads.append(step.potential.gradient(step.theta, xb, yb, 64)[1])
        step(xb, yb)
    assert step.average_all == (rows == 64)
    if rows == 64:  # the plain mean of the five steps' g², and tau counts them
        mean_sq = torch.stack(grads).square().mean(0)
        torch.testing.assert_close(step.state.minv, mean_sq.sqrt().add(1e-16).reciprocal())
        assert torch.equal(step.state.tau, torch.full_like(step.state.tau, 5.0))
    else:
        assert bool((step.state.tau < 5.0).all())


def test_the_prediction_ess_is_the_closed_form_of_an_ar1_chain():
    """Sixteen AR(1) chains ``z_t = ρ z_{t-1} + sqrt(1 - ρ²) ε_t`` (stationary, unit variance)
    have integrated autocorrelation time ``(1 + ρ) / (1 - ρ)``, so ``C S (1 - ρ) / (1 + ρ)``
    effective draws: 16 x 5000 x 0.2 / 1.8 ≈ 8889 at ρ = 0.8. The estimate's relative sd is
    about ``sqrt(2 (2M + 1) / (C S))`` for a window of ``M`` lags (Sokal; Geyer's initial
    sequence stops near ``M ≈ 40`` here): 4.5%, so 15% is over 3 sd (at 4000 steps, a 10% sd,
    one of three outputs measured 16% off)."""
    from bnn_pyro.methods.sgmcmc import prediction_diagnostics

    g = torch.Generator().manual_seed(0)
    rho, chains, steps = 0.8, 16, 5000  # Pyro's estimator slows with S: 15 s at S = 20000
    z = torch.empty(chains, steps, 3, 1, dtype=torch.float64)
    z[:, 0] = torch.randn(chains, 3, 1, generator=g, dtype=torch.float64)
    for t in range(1, steps):
        noise = torch.randn(chains, 3, 1, generator=g, dtype=torch.float64)
        z[:, t] = rho * z[:, t - 1] + (1 - rho**2) ** 0.5 * noise
    d = prediction_diagnostics(z)
    expected = chains * steps * (1 - rho) / (1 + rho)
    assert torch.allclose(d.ess, torch.full_like(d.ess, expected), rtol=0.15), d.ess.flatten()
    assert d.worst_rhat < 1.01


def test_chains_that_disagree_have_a_large_rhat():
    """Two chains of independent draws around 0 and around 3 (sd 1): the between-chain spread
    dominates, R̂ ≈ sqrt(1 + 3² / 4 / 1) ≈ 1.8 (the split halves agree within each chain)."""
    from bnn_pyro.methods.sgmcmc import prediction_diagnostics

    g = torch.Generator().manual_seed(1)
    z = torch.randn(2, 1000, 2, 1, generator=g, dtype=torch.float64)
    z[1] += 3.0
    assert prediction_diagnostics(z).rhat.min() > 1.5


def test_rank_normalized_diagnostics_match_arviz():
    """The rank-normalised R̂ and bulk-ESS against ArviZ's (``rhat(method="rank")``,
    ``ess(method="bulk")``), the reference implementation of Vehtari et al. (2021), on four
    AR(1) chains (ρ = 0.9) with shifted means, one output cubed (heavy tails). R̂ is the same
    formula on the same normal scores: equal to 1e-6. The ESS sums the autocorrelations with
    Geyer's initial sequence in both, but ArviZ (after Stan) adds the first autocorrelation past
    the truncation point and Pyro does not: on these draws, the same draws in both, the two read
    6.5%, 0.3% and 0.5% apart, so 10%."""
    az = pytest.importorskip("arviz")
    from bnn_pyro.methods.sgmcmc import prediction_diagnostics

    g = torch.Generator().manual_seed(0)
    chains, steps = 4, 600
    noise = torch.randn(chains, steps, 3, generator=g, dtype=torch.float64)
    z = torch.zeros(chains, steps, 3, dtype=torch.float64)
    for t in range(steps):
        z[:, t] = (0.9 * z[:, t - 1] if t else 0.0) + noise[:, t]
    z = z + torch.tensor([0.0, 0.3, 0.0, 0.6], dtype=torch.float64)[:, None, None] * torch.tensor(
        [0.0, 1.0, 1.0], dtype=torch.float64
    )
    z[..., 2] = z[..., 2] ** 3
    d = prediction_diagnostics(z.unsqueeze(-1), rank_normalized=True)
    for j in range(3):
        draws = z[..., j].numpy()
        assert abs(float(d.rhat[j, 0]) - float(az.rhat(draws, method="rank"))) < 1e-6
        reference = float(az.ess(draws, method="bulk"))
        assert abs(float(d.ess[j, 0]) / reference - 1.0) < 0.10, (j, float(d.ess[j, 0]), reference)


def test_diagnostics_refuse_what_they_cannot_judge():
    from bnn_pyro.methods.sgmcmc import chain_diagnostics, prediction_diagnostics

    with pytest.raises(ValueError, match="C >= 2 chains"):
        prediction_diagnostics(torch.zeros(1, 10, 2, 1))
    with pytest.raises(TypeError, match="rank_normalized must be a bool"):
        prediction_diagnostics(torch.zeros(2, 10, 2, 1), rank_normalized="yes")
    with pytest.raises(ValueError, match="at least 2 fitted chains"):
        chain_diagnostics([object()], torch.zeros(2, 1))
    with pytest.raises(TypeError, match=r"chains\[1\] must be a fitted SGMCMC"):
        chain_diagnostics([bp.make("sghmc", bp.nn.mlp(1, [], 1), bp.Gaussian(0.5)), object()],
                          torch.zeros(2, 1))  # fmt: skip


def test_minibatches_take_the_fixed_step_unless_measured_is_asked():
    """``lr=None`` measures the step on the whole data set; on minibatches it takes the fixed
    step and friction that were tuned together (the plain minibatch gradient), and
    ``lr="measured"`` measures there too; any other string is refused before any work."""
    X, y = _small()
    seen = {}
    for batch, lr in [(None, None), (20, None), (20, "measured")]:
        torch.manual_seed(0)
        m = bp.make("sghmc", bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1))
        m.fit(X, y, epochs=4, batch_size=batch, lr=lr, progress=False, seed=0)
        seen[(batch, lr)] = m.step_size
    assert seen[(None, None)] is not None and seen[(20, "measured")] is not None
    assert seen[(20, None)] is None  # a fixed step: nothing measured
    assert run_step("sghmc", None, 20, len(X)) == (0.05, 20, 0.2)
    m = bp.make("sghmc", bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1))
    with pytest.raises((TypeError, ValueError), match="lr"):
        m.fit(X, y, epochs=4, lr="fast", progress=False)
    assert m.potential is None
