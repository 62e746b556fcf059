"""``AlphaELBO`` (``fit(elbo="alpha")``) against closed forms on Bayesian linear regression.

For ``w ~ N(0, I)``, ``y_n ~ N(x_n . w, s^2)`` and a mean-field guide ``q = N(m, diag(v))``:
``N(y; mu, s^2)^a = (2 pi s^2)^((1-a)/2) a^(-1/2) N(y; mu, s^2/a)``, so
``E_q[p(y_n | w)^a] = (2 pi s^2)^((1-a)/2) a^(-1/2) N(y_n; x_n . m, s^2/a + sum_j x_nj^2 v_j)``
and the energy ``-sum_n (1/a) log E_q[p(y_n|w)^a] + KL(q || p)`` is exact.
"""

from __future__ import annotations

import math

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import Trace_ELBO

import bnn_pyro as bp
from bnn_pyro.elbos.alpha import AlphaELBO, alpha_particles, log_mean_exp

NOISE = 0.5


def _problem(n: int = 12, d: int = 3, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    y = x @ torch.tensor([1.0, -0.5, 0.3])[:d] + NOISE * torch.randn(n, generator=g)
    m = torch.tensor([0.8, -0.3, 0.1])[:d]
    v = torch.tensor([0.04, 0.09, 0.01])[:d]
    return x, y, m, v


def _model(x, y):
    w = pyro.sample("w", dist.Normal(torch.zeros(x.shape[1]), 1.0).to_event(1))
    with pyro.plate("data", x.shape[0]):  # w: (D,), or (P, 1, D) under the particle plate
        pyro.sample("obs", dist.Normal((x * w).sum(-1), NOISE), obs=y)


def _guide(m, v):
    def guide(x, y):
        pyro.sample("w", dist.Normal(m, v.sqrt()).to_event(1))

    return guide


def _log_power_mean(x, y, m, v, a):
    """``log E_q[p(y_n | w)^a]`` per row, and the same for ``2a`` (for the estimator's spread)."""
    s2 = NOISE**2
    mu, spread = x @ m, (x * x) @ v

    def at(b):
        pred = dist.Normal(mu, (s2 / b + spread).sqrt()).log_prob(y)
        return 0.5 * (1 - b) * math.log(2 * math.pi * s2) - 0.5 * math.log(b) + pred

    return at(a), at(2 * a)


def _exact_energy(x, y, m, v, a):
    kl = 0.5 * (v + m * m - 1 - v.log()).sum()  # KL(N(m, diag v) || N(0, I))
    return float(-(_log_power_mean(x, y, m, v, a)[0] / a).sum() + kl)


@pytest.mark.parametrize("alpha", [0.5, 1.0])
def test_estimate_matches_the_closed_form(alpha):
    x, y, m, v = _problem()
    p = 4000
    pyro.set_rng_seed(0)
    got = float(AlphaELBO(alpha, num_particles=p).loss(_model, _guide(m, v), x, y))
    # Tolerance from the estimator's own spread. Per row, X = p(y_n | w)^a has relative variance
    # r_n = E[X^2] / E[X]^2 - 1 (closed form above); log mean exp of P draws has bias ~ -r/(2P)
    # and sd ~ sqrt(r/P) (delta method), divided by a. The rows share the draws, so their sds
    # add at worst linearly. The KL's Monte Carlo estimate has sd sqrt(Var(log q - log p) / P).
    once, twice = _log_power_mean(x, y, m, v, alpha)
    r = (twice - 2 * once).exp() - 1
    rows_sd = float((r / p).sqrt().sum()) / alpha
    bias = float((r / (2 * p)).sum()) / alpha
    w = dist.Normal(m, v.sqrt()).sample((p,))
    log_ratio = dist.Normal(m, v.sqrt()).log_prob(w).sum(-1) - dist.Normal(0.0, 1.0).log_prob(
        w
    ).sum(-1)
    kl_sd = float(log_ratio.std() / math.sqrt(p))
    assert abs(got - _exact_energy(x, y, m, v, alpha)) < bias + 4 * (rows_sd + kl_sd)


def test_small_alpha_is_trace_elbo_under_the_same_draws():
    # (1/a) log mean exp(a l) = mean l + a Var(l)/2 + O(a^2): at a = 1e-6 the two losses differ by
    # ~1e-6 times the rows' variances (each O(1) here), far below the rtol.
    x, y, m, v = _problem()
    pyro.set_rng_seed(3)
    alpha = float(AlphaELBO(1e-6, num_particles=8).loss(_model, _guide(m, v), x, y))
    pyro.set_rng_seed(3)
    trace = Trace_ELBO(num_particles=8, vectorize_particles=True, max_plate_nesting=1)
    ref = trace.loss(_model, _guide(m, v), x, y)
    assert alpha == pytest.approx(ref, rel=1e-5)


def test_energy_falls_with_alpha_at_a_fixed_guide():
    # (1/a) log E[X^a] is increasing in a (Lyapunov's inequality), so the exact energy falls as a
    # grows; the estimator under the same draws must order the same way.
    x, y, m, v = _problem()
    losses = []
    for a in (0.1, 0.5, 1.0):
        pyro.set_rng_seed(1)
        losses.append(AlphaELBO(a, num_particles=64).loss(_model, _guide(m, v), x, y))
    assert losses[0] > losses[1] > losses[2]
    exact = [_exact_energy(x, y, m, v, a) for a in (0.1, 0.5, 1.0)]
    assert exact[0] > exact[1] > exact[2]


def test_gradients_reach_the_guide():
    x, y, _, v = _problem()
    m = torch.zeros(3, requires_grad=True)
    loss = AlphaELBO(0.5, num_particles=16).differentiable_loss(_model, _guide(m, v), x, y)
    (grad,) = torch.autograd.grad(loss, m)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"alpha": 0.0}, r"^alpha must be a finite float > 0\.0, got 0\.0$"),
        ({"alpha": 1.5}, r"^alpha must be in \(0, 1\], got 1\.5$"),
        ({"alpha": float("nan")}, r"^alpha must be a finite float > 0\.0, got nan$"),
        ({"num_particles": 1}, r"^num_particles must be an int >= 2, got 1$"),
        ({"max_plate_nesting": 0}, r"^max_plate_nesting must be an int >= 1, got 0$"),
    ],
)
def test_bad_arguments_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AlphaELBO(**kwargs)


def test_an_observed_site_outside_a_plate_is_refused():
    def model(y):
        w = pyro.sample("w", dist.Normal(0.0, 1.0))
        pyro.sample("obs", dist.Normal(w, 1.0), obs=y)

    def guide(y):
        pyro.sample("w", dist.Normal(0.0, 1.0))

    with pytest.raises(ValueError, match=r"^elbo='alpha' needs the observed site 'obs' drawn "
                       r"under the particle plate with its rows in a plate; its log-density has "
                       r"shape \(4, 1\)$"):  # fmt: skip
        AlphaELBO(0.5, num_particles=4).loss(model, guide, torch.tensor(1.0))


def _alpha_optimum(phi: torch.Tensor, y: torch.Tensor, noise: float, a: float):
    """The mean-field ``(m, std)`` minimising the closed-form energy (float64, L-BFGS), for
    ``y = phi w + N(0, noise^2)``, ``w ~ N(0, I)``."""
    phi, y = phi.double(), y.double()
    s2 = noise**2
    m = torch.zeros(phi.shape[1], dtype=torch.float64, requires_grad=True)
    log_v = torch.full_like(m, -4.0).detach().requires_grad_()

    def energy() -> torch.Tensor:
        v = log_v.exp()
        var = s2 / a + (phi * phi) @ v
        pred = -0.5 * torch.log(2 * math.pi * var) - 0.5 * (y - phi @ m) ** 2 / var
        log_e = 0.5 * (1 - a) * math.log(2 * math.pi * s2) - 0.5 * math.log(a) + pred
        return -(log_e / a).sum() + 0.5 * (v + m * m - 1 - log_v).sum()

    opt = torch.optim.LBFGS([m, log_v], max_iter=500, tolerance_grad=1e-12,
                            tolerance_change=1e-14, line_search_fn="strong_wolfe")  # fmt: skip

    def closure() -> torch.Tensor:
        opt.zero_grad()
        e = energy()
        e.backward()
        return e

    opt.step(closure)
    return m.detach(), (log_v.detach() / 2).exp()


def test_fit_with_alpha_reaches_the_closed_form_optimum():
    """``fit(elbo="alpha")`` on Bayesian linear regression ends at the minimiser of the exact
    energy, which for alpha = 0.5 has stds ~1.4x the mean-field VI ones (so a fit of the ELBO
    instead would fail this test by far)."""
    from tests.methods.vi.test_exact_posterior import _data, _exact, _posterior

    X, y = _data()
    phi = torch.cat([X, torch.ones(len(X), 1)], 1)
    mean, std = _alpha_optimum(phi, y.squeeze(-1), 0.5, 0.5)
    _, vi_std = _exact(X, y)
    assert (std / vi_std).min() > 1.3  # the premise: alpha 0.5 is not the ELBO here
    torch.manual_seed(0)
    bnn = bp.VariationalBNN(bp.nn.mlp(3, [], 1), bp.Gaussian(scale=0.5), init_scale=0.05)
    bnn.fit(X, y, epochs=3000, batch_size=None, lr=2e-2, elbo="alpha", num_particles=100,
            average=0.5, progress=False, seed=0)  # fmt: skip
    loc, scale = _posterior(bnn)
    # Tolerance as the exact-posterior test's (0.1 std, 5%, what is left of the optimizer's
    # jitter there: 0.014 std, 3%). The estimator adds its own bias: E[log mean exp] falls
    # short of log E by ~alpha^2 Var(l_n) / (2P) per row, and Var(l_n) ~ x_n^T V x_n / s^2, a
    # penalty on V of alpha / P times the data term's own: it shrinks the variances by ~alpha / P,
    # the stds by half that. With the default P = 10 that is 2.5% of the 5% (measured: 5.5% low
    # in all); P = 100 makes it 0.25%.
    assert torch.allclose(loc, mean, atol=0.1 * float(std.min())), (loc, mean)
    assert torch.allclose(scale, std, rtol=0.05), (scale, std)


def test_the_helpers_refuse_what_they_cannot_use():
    for bad in [torch.tensor(1.0), torch.zeros(0, 3), [1.0, 2.0]]:
        with pytest.raises(ValueError, match="draws along dim 0"):
            log_mean_exp(bad)
    assert float(log_mean_exp(torch.tensor([0.0, math.log(3.0)]))) == pytest.approx(math.log(2.0))
    for bad in [0, 2.5, True]:
        with pytest.raises((TypeError, ValueError), match=r"^num_particles must be an int"):
            alpha_particles(bad)


def test_loss_and_grads_is_the_differentiable_loss_with_its_gradient_accumulated():
    """What Pyro's ``SVI.step`` calls: the same draws give the same float, and ``.grad`` holds
    that loss's gradient (added to what was there, as ``backward`` does)."""
    x, y, _, v = _problem()
    m = torch.zeros(3, requires_grad=True)
    elbo = AlphaELBO(0.5, num_particles=16)
    torch.manual_seed(3)
    want = elbo.differentiable_loss(_model, _guide(m, v), x, y)
    (grad,) = torch.autograd.grad(want, m)
    m.grad = torch.ones(3)
    torch.manual_seed(3)
    got = elbo.loss_and_grads(_model, _guide(m, v), x, y)
    assert isinstance(got, float) and got == float(want.detach())
    assert torch.allclose(m.grad, 1.0 + grad)
    # a guide with nothing to learn: the loss alone, nothing accumulated
    frozen = torch.zeros(3)
    torch.manual_seed(3)
    assert elbo.loss_and_grads(_model, _guide(frozen, v), x, y) == float(want.detach())
    assert frozen.grad is None


def test_two_particles_are_enough_and_the_defaults_are_as_documented():
    """``num_particles >= 2`` (the least a ``log mean exp`` needs) and one data plate by default;
    before any call ``last_nll`` is NaN (nothing measured yet)."""
    elbo = AlphaELBO(0.5, num_particles=2)
    # Pyro counts its particle plate in: one data plate makes 2
    assert elbo.num_particles == 2 and elbo.max_plate_nesting == 2
    assert AlphaELBO().max_plate_nesting == 2
    assert isinstance(elbo.last_nll, torch.Tensor) and torch.isnan(elbo.last_nll)


def _point_model(x, y, size):
    """``w ~ N(0, 1)``, ``y_n ~ N(w x_n, 1)`` over the first ``len(y)`` rows of ``size``."""
    w = pyro.sample("w", dist.Normal(0.0, 1.0))
    with pyro.plate("data", size, subsample=torch.arange(len(y))):
        pyro.sample("obs", dist.Normal(w * x, 1.0), obs=y)


def _point_guide(x, y, size):
    pyro.sample("w", dist.Delta(torch.tensor(0.7)))


def test_with_a_point_mass_guide_the_energy_is_minus_the_scaled_log_joint():
    """A ``Delta`` guide makes all ``P`` draws ``w = 0.7``: ``log mean exp`` of ``P`` equal terms
    is the term itself, whatever ``alpha``, and ``log q = 0``. So the energy is
    ``-(N/B sum_b log N(y_b; 0.7 x_b, 1) + log N(0.7; 0, 1))`` with ``N/B = 10/4``, and
    ``last_nll`` is minus its data part."""
    x, y = torch.tensor([1.0, -2.0, 0.5, 3.0]), torch.tensor([0.2, -1.0, 1.5, 2.0])
    data = 2.5 * sum(-0.5 * math.log(2 * math.pi) - 0.5 * (float(b) - 0.7 * float(a)) ** 2
                     for a, b in zip(x, y, strict=True))  # fmt: skip
    prior = -0.5 * math.log(2 * math.pi) - 0.5 * 0.7**2
    elbo = AlphaELBO(0.3, num_particles=5)
    assert elbo.loss(_point_model, _point_guide, x, y, 10) == pytest.approx(
        -(data + prior), rel=1e-6
    )
    assert float(elbo.last_nll) == pytest.approx(-data, rel=1e-6)


def test_a_tensor_scale_weights_the_data_term_as_a_constant():
    """``poutine.scale(scale=s)`` multiplies the data term by ``s`` (here ``3 x`` the plate's
    ``10/4``), and the energy treats ``s`` as a weight like ``N/B``: no gradient reaches it (a
    ``Delta`` guide has no parameters, so the loss has no graph at all)."""
    x, y = torch.tensor([1.0, -2.0, 0.5, 3.0]), torch.tensor([0.2, -1.0, 1.5, 2.0])
    elbo = AlphaELBO(0.5, num_particles=3)
    elbo.loss(_point_model, _point_guide, x, y, 10)
    once = float(elbo.last_nll)
    s = torch.tensor(3.0, requires_grad=True)

    def scaled(x, y, size):
        w = pyro.sample("w", dist.Normal(0.0, 1.0))
        with pyro.plate("data", size, subsample=torch.arange(len(y))), pyro.poutine.scale(scale=s):
            pyro.sample("obs", dist.Normal(w * x, 1.0), obs=y)

    loss = elbo.differentiable_loss(scaled, _point_guide, x, y, 10)
    assert float(elbo.last_nll) == pytest.approx(3 * once, rel=1e-6)
    assert not loss.requires_grad  # s is the only tensor that requires one


def test_masked_rows_add_nothing():
    """A row masked out (``poutine.mask``) has log-likelihood factor 1, ``log mean exp 0 = 0``:
    under the same draws the energy equals that of the data without the row."""
    x, y, m, v = _problem()
    keep = torch.arange(len(y)) % 3 != 0

    def masked(x, y):
        w = pyro.sample("w", dist.Normal(torch.zeros(x.shape[1]), 1.0).to_event(1))
        with pyro.plate("data", x.shape[0]), pyro.poutine.mask(mask=keep):
            pyro.sample("obs", dist.Normal((x * w).sum(-1), NOISE), obs=y)

    pyro.set_rng_seed(5)
    got = AlphaELBO(0.5, num_particles=6).loss(masked, _guide(m, v), x, y)
    pyro.set_rng_seed(5)  # the guide ignores the data: the same draws of w
    want = AlphaELBO(0.5, num_particles=6).loss(_model, _guide(m, v), x[keep], y[keep])
    assert got == pytest.approx(want, rel=1e-6)


def test_keyword_arguments_reach_the_model_and_the_guide():
    """``loss(model, guide, x, y=y)`` is ``loss(model, guide, x, y)`` under the same draws, and so
    are ``differentiable_loss`` and ``loss_and_grads``."""
    x, y, m, v = _problem()
    elbo = AlphaELBO(0.5, num_particles=4)
    for call in (elbo.loss, elbo.loss_and_grads):
        pyro.set_rng_seed(2)
        want = call(_model, _guide(m, v), x, y)
        pyro.set_rng_seed(2)
        assert call(_model, _guide(m, v), x, y=y) == want


def test_a_latent_with_batch_dims_left_of_the_plates_counts_once_per_particle():
    """A latent ``u`` of batch shape ``(2, 1, 1)`` (left of the one data plate) under ``P``
    particles has a log-density of shape ``(2, P, 1)``: each particle's draw is ``u[:, p]``, and
    the KL part is the particles' mean of its sum, ``sum / P`` (not ``sum``). At ``alpha = 1e-6``
    the energy is ``Trace_ELBO``'s to ~1e-6 (see the small-alpha test above), which counts it so."""

    def model(y):
        u = pyro.sample("u", dist.Normal(torch.zeros(2, 1, 1), 1.0))
        with pyro.plate("data", len(y)):
            pyro.sample("obs", dist.Normal(u.sum(0), 1.0), obs=y)

    def guide(y):
        pyro.sample("u", dist.Normal(torch.full((2, 1, 1), 0.3), 0.5))

    y = torch.tensor([1.0, 0.5, -0.2])
    pyro.set_rng_seed(0)
    got = AlphaELBO(1e-6, num_particles=4).loss(model, guide, y)
    pyro.set_rng_seed(0)
    want = Trace_ELBO(num_particles=4, vectorize_particles=True, max_plate_nesting=1).loss(
        model, guide, y
    )
    assert got == pytest.approx(want, rel=1e-5)


def test_an_observed_site_without_its_rows_under_the_particles_is_refused():
    """An observed site whose log-density leads with another dimension than the particles' (a
    batch dimension left of the plates: shape ``(2, P, B)``) has no per-particle rows."""

    def model(y):
        w = pyro.sample("w", dist.Normal(0.0, 1.0))
        with pyro.plate("data", len(y)):
            pyro.sample("obs", dist.Normal(torch.zeros(2, 1, 1) + w, 1.0), obs=y)

    def guide(y):
        pyro.sample("w", dist.Normal(0.0, 1.0))

    with pytest.raises(ValueError, match=r"^elbo='alpha' needs the observed site 'obs' .* its "
                       r"log-density has shape \(2, 4, 3\)$"):  # fmt: skip
        AlphaELBO(0.5, num_particles=4).loss(model, guide, torch.ones(3))


def test_a_latent_the_guide_does_not_draw_is_refused():
    def model(y):
        w = pyro.sample("w", dist.Normal(0.0, 1.0))
        pyro.sample("v", dist.Normal(0.0, 1.0))
        with pyro.plate("data", len(y)):
            pyro.sample("obs", dist.Normal(w, 1.0), obs=y)

    def guide(y):
        pyro.sample("w", dist.Normal(0.0, 1.0))

    match = r"^elbo='alpha' needs every latent site in the guide; 'v' is drawn by the model only$"
    with pytest.warns(UserWarning, match="not guide"), pytest.raises(ValueError, match=match):
        AlphaELBO(0.5, num_particles=4).loss(model, guide, torch.ones(3))
