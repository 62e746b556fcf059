"""The SG-MCMC potential (``sgmcmc/potential.py``) of a Bayesian linear regression checked
against its formula written out by hand: ``U(θ) = -log p(w) - log p(b) - log p(σ)
- (N/B) Σ_batch log N(y_i; x_i·w + b, σ) - log|dσ/du|`` over ``θ = (w₁, w₂, b, u)``, ``σ = eᵘ``;
every case runs in milliseconds."""

from __future__ import annotations

import math

import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import pytest
import torch
from torch.distributions import biject_to, constraints

from bnn_pyro.methods.sgmcmc.potential import PyroPotential, SiteLayout, _identity

D = torch.float64
LOG_2PI = math.log(2 * math.pi)


def _t(value):
    return torch.tensor(value, dtype=D)


def blr(x, y=None, dataset_size=None):
    """``w ~ N(0, 2²)`` (2,), ``b ~ N(0.5, 1.5²)``, ``σ ~ LogNormal(0, 1)``,
    ``y ~ N(xw + b, σ)``."""
    w = pyro.sample("w", dist.Normal(_t(0.0), _t(2.0)).expand([2]).to_event(1))
    b = pyro.sample("b", dist.Normal(_t(0.5), _t(1.5)))
    sigma = pyro.sample("sigma", dist.LogNormal(_t(0.0), _t(1.0)))
    with pyro.plate("data", dataset_size or len(x), subsample=torch.arange(len(x))):
        return pyro.sample("obs", dist.Normal(x @ w + b, sigma), obs=y)


def _normal_log_density(v, mean, scale):
    return -0.5 * ((v - mean) / scale) ** 2 - torch.log(scale) - 0.5 * LOG_2PI


def _by_hand(theta, x, y, n):
    """The potential of :func:`blr` written out: the log-normal prior of ``σ = eᵘ`` is
    ``-u - u²/2 - log(2π)/2`` and its Jacobian ``log|dσ/du| = u``."""
    w, b, u = theta[:2], theta[2], theta[3]
    sigma = torch.exp(u)
    log_prior = _normal_log_density(w, _t(0.0), _t(2.0)).sum()
    log_prior = log_prior + _normal_log_density(b, _t(0.5), _t(1.5))
    log_prior = log_prior + (-u - 0.5 * u**2 - 0.5 * LOG_2PI)
    log_lik = _normal_log_density(y, x @ w + b, sigma).sum()
    return -(log_prior + n / len(x) * log_lik + u)


def _batch(b=4, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(b, 2, generator=gen, dtype=D), torch.randn(b, generator=gen, dtype=D)


def _potential():
    x, y = _batch(3, seed=9)
    return PyroPotential(blr, x, y)


def test_the_sites_are_laid_out_in_model_order_each_after_the_last():
    potential = _potential()
    layout = [(s.name, s.shape, s.start, s.numel) for s in potential.sites]
    assert layout == [("w", (2,), 0, 2), ("b", (), 2, 1), ("sigma", (), 3, 1)]
    assert potential.size == 4
    assert [_identity(s) for s in potential.sites] == [True, True, False]


def test_the_potential_is_minus_log_prior_minus_n_over_b_log_likelihood_minus_log_jacobian():
    """``U`` of the minibatch standing for ``N = 10`` points, against :func:`_by_hand`."""
    potential = _potential()
    x, y = _batch(4)
    theta = _t([0.3, -1.2, 0.4, -0.5])
    value, _ = potential.gradient(theta, x, y, 10)
    assert value == pytest.approx(float(_by_hand(theta, x, y, 10)), rel=1e-12)


def test_the_gradient_is_the_per_datum_gradient_of_the_potential_by_hand():
    """``∇U / N`` against autograd through :func:`_by_hand`, and its ``w`` part against the
    closed form ``(w/4 + (N/B) Σ x_i (x_i·w + b - y_i) / σ²) / N``."""
    potential = _potential()
    x, y = _batch(4)
    theta = _t([0.3, -1.2, 0.4, -0.5])
    _, grad = potential.gradient(theta, x, y, 10)
    reference = theta.clone().requires_grad_(True)
    (expected,) = torch.autograd.grad(_by_hand(reference, x, y, 10), reference)
    torch.testing.assert_close(grad, expected / 10, rtol=1e-12, atol=1e-14)
    residual = x @ theta[:2] + theta[2] - y
    w_part = theta[:2] / 4 + 10 / 4 * (x * residual.unsqueeze(-1)).sum(0) / math.exp(-1.0)
    torch.testing.assert_close(grad[:2], w_part / 10, rtol=1e-12, atol=1e-14)
    assert theta.tolist() == [0.3, -1.2, 0.4, -0.5] and not theta.requires_grad


def test_flat_maps_given_values_to_unconstrained_coordinates_and_the_rest_to_the_start():
    """``σ = 2`` becomes ``u = log 2``; ``b`` is missing and comes from ``initial``; ``w``
    given as Python floats keeps its float64 digits."""
    potential = _potential()
    theta = potential.flat({"w": [0.1, 0.2], "sigma": 2.0})
    assert theta.dtype == D and theta.shape == (4,) and not theta.requires_grad
    expected = torch.stack([_t(0.1), _t(0.2), potential.initial["b"], _t(math.log(2.0))])
    torch.testing.assert_close(theta, expected, rtol=0, atol=1e-15)
    start = potential.flat()
    initial = potential.initial
    expected = torch.cat([initial["w"], initial["b"].reshape(1), initial["sigma"].log().reshape(1)])
    torch.testing.assert_close(start, expected, rtol=0, atol=1e-15)


def test_the_start_is_the_prior_median():
    """A prior ``N(3, 10⁻⁸)`` puts every draw, so the median of any draws, within ``10⁻⁶`` of 3
    (a hundred standard deviations); a log-normal one ``e^{log 5 + 10⁻⁸ z}`` near 5."""

    def narrow(x, y=None, dataset_size=None):
        pyro.sample("a", dist.Normal(_t(3.0), _t(1e-8)).expand([2]).to_event(1))
        pyro.sample("s", dist.LogNormal(_t(math.log(5.0)), _t(1e-8)))

    potential = PyroPotential(narrow, torch.zeros(1), None)
    torch.testing.assert_close(potential.initial["a"], _t([3.0, 3.0]), rtol=0, atol=1e-6)
    torch.testing.assert_close(potential.initial["s"], _t(5.0), rtol=0, atol=1e-5)
    torch.testing.assert_close(potential.flat(), _t([3.0, 3.0, math.log(5.0)]), rtol=0, atol=1e-6)


def test_constrain_maps_a_batch_of_vectors_through_each_sites_bijection():
    potential = _potential()
    theta = _t([[0.3, -1.2, 0.4, -0.5], [1.0, 2.0, 3.0, math.log(4.0)]])
    expected = _t([[0.3, -1.2, 0.4, math.exp(-0.5)], [1.0, 2.0, 3.0, 4.0]])
    torch.testing.assert_close(potential.constrain(theta), expected, rtol=1e-15, atol=0)
    torch.testing.assert_close(potential.constrain(theta[1]), expected[1], rtol=1e-15, atol=0)


def test_unflatten_cuts_each_sites_columns_into_its_shape():
    potential = _potential()
    flat = torch.arange(12, dtype=D).reshape(3, 4)
    parts = potential.unflatten(flat)
    assert list(parts) == ["w", "b", "sigma"]
    assert parts["w"].tolist() == [[0.0, 1.0], [4.0, 5.0], [8.0, 9.0]]
    assert parts["b"].tolist() == [2.0, 6.0, 10.0] and parts["sigma"].tolist() == [3.0, 7.0, 11.0]


def test_a_multi_dimensional_site_is_flattened_in_row_major_order():
    def matrix(x, y=None, dataset_size=None):
        pyro.sample("m", dist.Normal(_t(0.0), _t(1.0)).expand([2, 3]).to_event(2))

    potential = PyroPotential(matrix, torch.zeros(1), None)
    assert potential.size == 6 and potential.sites[0].numel == 6
    values = torch.arange(6, dtype=D).reshape(2, 3)
    torch.testing.assert_close(potential.flat({"m": values}), torch.arange(6, dtype=D))
    torch.testing.assert_close(potential.unflatten(values.reshape(1, 6))["m"][0], values)
    # U = -Σ log N(m; 0, 1) = Σ m²/2 + 3 log 2π, gradient m (per datum: m / N)
    value, grad = potential.gradient(torch.arange(6, dtype=D), torch.zeros(1), None, 2)
    assert value == pytest.approx(55 / 2 + 3 * LOG_2PI, rel=1e-12)
    torch.testing.assert_close(grad, torch.arange(6, dtype=D) / 2)


def test_a_positive_vector_site_is_transformed_and_its_jacobian_counted():
    """``s ~ HalfNormal(1)`` (2,) at ``s = eᵘ``: ``U = Σ (s²/2 - log √(2/π)) - Σ u``; the
    ``IndependentTransform`` around ``exp`` is not taken for the identity."""

    def positive(x, y=None, dataset_size=None):
        pyro.sample("s", dist.HalfNormal(_t(1.0)).expand([2]).to_event(1))

    potential = PyroPotential(positive, torch.zeros(1), None)
    assert not _identity(potential.sites[0])
    u = _t([0.5, -1.0])
    value, grad = potential.gradient(u, torch.zeros(1), None, 1)
    s = u.exp()
    assert value == pytest.approx(float((s**2 / 2 - 0.5 * math.log(2 / math.pi) - u).sum()))
    torch.testing.assert_close(grad, s**2 - 1, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(potential.constrain(u), s, rtol=1e-15, atol=0)


def test_only_the_real_line_needs_no_transform():
    real = SiteLayout("a", (2,), 0, biject_to(constraints.independent(constraints.real, 1)))
    assert _identity(real) and _identity(SiteLayout("b", (), 0, biject_to(constraints.real)))
    for support in (constraints.positive, constraints.unit_interval):
        assert not _identity(SiteLayout("c", (), 0, biject_to(support)))


def test_the_observed_site_is_not_latent_even_when_its_targets_are_missing():
    x, _ = _batch(3)
    assert [s.name for s in PyroPotential(blr, x, None).sites] == ["w", "b", "sigma"]

    def renamed(x, y=None, dataset_size=None):
        w = pyro.sample("w", dist.Normal(_t(0.0), _t(1.0)))
        pyro.sample("target", dist.Normal(w, _t(1.0)), obs=y)

    assert [s.name for s in PyroPotential(renamed, x, None, observed="target").sites] == ["w"]
    assert [s.name for s in PyroPotential(renamed, x, _t(0.0)).sites] == ["w"]


def test_discovering_the_sites_leaves_no_trace_outside():
    x, y = _batch(3)
    with poutine.trace() as outer:
        PyroPotential(blr, x, y)
    assert [name for name, site in outer.trace.nodes.items() if site["type"] == "sample"] == []


def test_a_latent_site_inside_a_plate_is_refused():
    def local(x, y=None, dataset_size=None):
        with pyro.plate("data", len(x)):
            pyro.sample("z", dist.Normal(_t(0.0), _t(1.0)))

    message = r"^SG-MCMC samples global latent sites only; 'z' sits inside a plate$"
    with pytest.raises(NotImplementedError, match=message):
        PyroPotential(local, torch.zeros(2), None)


def test_a_model_without_latent_sites_is_refused():
    def empty(x, y=None, dataset_size=None):
        with pyro.plate("data", len(x)):
            pyro.sample("obs", dist.Normal(x, _t(1.0)), obs=y)

    message = r"^the model has no latent sites: there is nothing to sample$"
    with pytest.raises(ValueError, match=message):
        PyroPotential(empty, torch.zeros(2, dtype=D), None)


def test_the_observed_sites_name_is_kept():
    x, y = _batch(3)
    assert PyroPotential(blr, x, y).observed == "obs"
    assert PyroPotential(blr, x, y, observed="y").observed == "y"


def test_a_site_whose_unconstrained_shape_differs_is_refused():
    """A simplex of 3 has 2 unconstrained coordinates (stick-breaking): the flat layout, one
    slice per site of the site's own shape, cannot hold it."""

    def simplex(x, y=None, dataset_size=None):
        pyro.sample("p", dist.Dirichlet(_t([2.0, 3.0, 1.5])))

    message = (
        r"^SG-MCMC samples sites whose unconstrained coordinates have the site's shape; "
        r"'p' of shape \(3,\) has \(2,\)$"
    )
    with pytest.raises(NotImplementedError, match=message):
        PyroPotential(simplex, torch.zeros(1), None)


def test_an_interval_site_counts_the_logistic_jacobian():
    """``q ~ Beta(2, 3)`` at ``q = 1/(1 + e⁻ᵘ)``: ``log Beta(q) = log 12 + log q + 2 log(1 - q)``
    and ``log|dq/du| = log q + log(1 - q)``, so ``U = -log 12 - 2 log q - 3 log(1 - q)`` and
    ``dU/du = -2 (1 - q) + 3 q``."""

    def interval(x, y=None, dataset_size=None):
        pyro.sample("q", dist.Beta(_t(2.0), _t(3.0)))

    potential = PyroPotential(interval, torch.zeros(1), None)
    u = _t([0.4])
    q = 1 / (1 + math.exp(-0.4))
    value, grad = potential.gradient(u, torch.zeros(1), None, 1)
    expected = -math.log(12) - 2 * math.log(q) - 3 * math.log(1 - q)
    assert value == pytest.approx(expected, rel=1e-12)
    assert grad.tolist() == pytest.approx([-2 * (1 - q) + 3 * q], rel=1e-12)


class _RealThenPositive(dist.Normal):
    """A normal whose second coordinate is declared positive: ``biject_to`` of its support is
    a ``CatTransform`` (the identity, then ``exp``), whose Jacobian reads both ``x`` and
    ``T(x)``."""

    @property
    def support(self):
        return constraints.cat([constraints.real, constraints.positive], dim=-1, lengths=[1, 1])


def test_a_site_of_concatenated_supports_counts_each_parts_jacobian():
    """``z ~ N(0, I₂)`` at ``z = (a, eᵘ)``: ``U = a²/2 + e^{2u}/2 + log 2π - u`` and
    ``∇U = (a, e^{2u} - 1)``."""

    def mixed(x, y=None, dataset_size=None):
        pyro.sample("z", _RealThenPositive(_t([0.0, 0.0]), _t([1.0, 1.0])).to_event(1))

    potential = PyroPotential(mixed, torch.zeros(1), None)
    value, grad = potential.gradient(_t([0.3, -0.5]), torch.zeros(1), None, 1)
    s = math.exp(-0.5)
    assert value == pytest.approx(0.3**2 / 2 + s**2 / 2 + LOG_2PI + 0.5, rel=1e-12)
    assert grad.tolist() == pytest.approx([0.3, s**2 - 1], rel=1e-12)
    torch.testing.assert_close(potential.constrain(_t([0.3, -0.5])), _t([0.3, s]))
