"""SNGP's parts against independent references: the spectral bound against the exact spectral
norm and torch's own ``spectral_norm``; the random-feature head's kernel against the RBF kernel
it approximates, its posterior against an explicit inverse and its draws against its moments."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
from torch.nn.utils import parametrize

from bnn_pyro.methods.sngp import RandomFeatureGP, SpectralBound, bound_spectral_norms

F64 = {"dtype": torch.float64}


def _norm(weight: torch.Tensor) -> float:
    return float(torch.linalg.matrix_norm(weight.detach().flatten(1), ord=2))


def _bounded(shape: tuple[int, ...], scale: float, bound: float, iterations: int = 1) -> nn.Module:
    torch.manual_seed(0)
    layer = (
        nn.Linear(shape[1], shape[0]).double()
        if len(shape) == 2
        else nn.Conv2d(shape[1], shape[0], shape[2]).double()
    )
    with torch.no_grad():
        layer.weight.mul_(scale)
    bound_spectral_norms([layer], bound, iterations)
    return layer


@pytest.mark.parametrize("shape", [(7, 5), (3, 9), (4, 2, 3, 3)])
def test_a_weight_over_the_bound_is_scaled_to_it_exactly(shape):
    """After 200 power iterations (one training call) ``uᵀWv`` is the largest singular value to
    round-off for these small matrices (the error shrinks as ``(σ₂/σ₁)^(2k)``), so the bounded
    weight's exact spectral norm is the bound (1e-6)."""
    layer = _bounded(shape, 10.0, 0.9, iterations=200)
    original = layer.parametrizations.weight.original
    assert _norm(original) > 5  # the raw weight is far over the bound
    assert abs(_norm(layer.weight) - 0.9) < 1e-6
    torch.testing.assert_close(layer.weight, original * 0.9 / _norm(original), atol=1e-6, rtol=0)


def test_a_weight_within_the_bound_is_left_as_it_is():
    layer = _bounded((6, 4), 1e-2, 0.95)
    assert torch.equal(layer.weight, layer.parametrizations.weight.original)


def test_the_bound_is_torch_spectral_norm_where_the_norm_is_over_one():
    """At bound 1 a weight whose norm is over 1 is ``W / σ``: what
    ``torch.nn.utils.parametrizations.spectral_norm`` computes (both converged)."""
    torch.manual_seed(3)
    ours, theirs = nn.Linear(6, 8).double(), nn.Linear(6, 8).double()
    with torch.no_grad():
        ours.weight.mul_(5.0)
        theirs.weight.copy_(ours.weight)
    bound_spectral_norms([ours], 1.0, power_iterations=30)
    theirs = nn.utils.parametrizations.spectral_norm(theirs, n_power_iterations=30)
    for layer in (ours, theirs):
        layer.train()
        layer(torch.zeros(1, 6, **F64))  # one training call: 30 more iterations each
    torch.testing.assert_close(ours.weight, theirs.weight, atol=1e-10, rtol=0)


def test_training_calls_refine_the_vectors_and_eval_calls_do_not():
    layer = _bounded((5, 5), 10.0, 0.5)
    bound = layer.parametrizations.weight[0]
    with torch.no_grad():
        layer.parametrizations.weight.original.add_(torch.randn(5, 5, **F64))
    u = bound._u.clone()
    layer.eval()
    layer(torch.zeros(1, 5, **F64))
    assert torch.equal(bound._u, u)
    layer.train()
    layer(torch.zeros(1, 5, **F64))
    assert not torch.equal(bound._u, u)


def test_gradients_flow_through_the_bound_and_two_calls_train_together():
    """The gradient of a loss through two calls of a bounded layer (each refining ``u`` in
    place) equals a finite difference of the same loss with the vectors held fixed."""
    layer = _bounded((4, 3), 10.0, 0.8, iterations=1)
    layer.train()
    x = torch.randn(2, 3, **F64)
    loss = layer(x).square().sum() + layer(x).sum()
    loss.backward()
    original = layer.parametrizations.weight.original
    assert original.grad is not None and bool(original.grad.abs().sum() > 0)
    # the same loss at fixed vectors (eval mode), differentiated by central differences
    layer.eval()
    eps, w = 1e-6, original.detach().clone()

    def at(weight: torch.Tensor) -> float:
        with torch.no_grad():
            original.copy_(weight)
            return float(layer(x).square().sum() + layer(x).sum())

    e = torch.zeros_like(w)
    e[1, 2] = eps
    numeric = (at(w + e) - at(w - e)) / (2 * eps)
    assert abs(float(original.grad[1, 2]) - numeric) < 1e-5


def test_bounding_twice_resets_the_bound_instead_of_stacking_another():
    layer = nn.Linear(3, 3)
    bound_spectral_norms([layer], 0.9)
    bound_spectral_norms([layer], 0.5, power_iterations=3)
    (found,) = layer.parametrizations.weight
    assert isinstance(found, SpectralBound)
    assert (found.bound, found.power_iterations) == (0.5, 3)


def test_the_start_neither_reads_nor_moves_the_global_random_stream():
    """The power method starts from a fixed seed: two bounds made under different global seeds
    hold the same vectors, in the weight's dtype, and the global stream is where it was."""
    weight = torch.randn(5, 4, **F64)
    held = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        state = torch.get_rng_state()
        bound = SpectralBound(weight, 1.0)
        assert torch.equal(torch.get_rng_state(), state)
        held.append((bound._u, bound._v))
    assert torch.equal(held[0][0], held[1][0]) and torch.equal(held[0][1], held[1][1])
    assert held[0][0].dtype == torch.float64
    assert (SpectralBound(weight, 1.0).power_iterations, SpectralBound(weight, 1.0).bound) == (
        1,
        1.0,
    )
    assert bound_spectral_norms([nn.Linear(2, 2)], 0.5)[0].power_iterations == 1


def test_a_layer_under_another_parametrization_gets_the_bound_after_it():
    """A weight already under torch's ``spectral_norm``, and a layer whose bias alone is
    parametrized: the bound is added to the weight's list (not mistaken for one there)."""
    normed = nn.utils.parametrizations.spectral_norm(nn.Linear(3, 3))
    (bound,) = bound_spectral_norms([normed], 0.5)
    assert [type(p).__name__ for p in normed.parametrizations.weight] == [
        "_SpectralNorm", "SpectralBound"
    ]  # fmt: skip
    assert bound is normed.parametrizations.weight[1]
    biased = nn.Linear(3, 3)
    parametrize.register_parametrization(biased, "bias", nn.Identity())
    (bound,) = bound_spectral_norms([biased], 0.5)
    assert bound is biased.parametrizations.weight[0]


def test_a_bad_reset_of_an_existing_bound_is_refused_and_leaves_it():
    layer = nn.Linear(3, 3)
    (bound,) = bound_spectral_norms([layer], 0.9, power_iterations=2)
    bad = [({"bound": 0.0}, "^bound must"), ({"bound": 1.0, "power_iterations": 0}, "^power_it")]
    for kwargs, match in bad:
        with pytest.raises(ValueError, match=match):
            bound_spectral_norms([layer], **kwargs)
    assert (bound.bound, bound.power_iterations) == (0.9, 2)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"bound": 0.0}, "^bound must"),
        ({"bound": -1.0}, "^bound must"),
        ({"bound": 1.0, "power_iterations": 0}, "^power_iterations must"),
    ],
)
def test_bad_bounds_are_refused_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        bound_spectral_norms([nn.Linear(2, 2)], **kwargs)
    with pytest.raises(ValueError, match=match):
        SpectralBound(torch.ones(2, 2), **kwargs)
    assert not parametrize.is_parametrized(nn.Linear(2, 2))


# ---------------------------------------------------------------------- the random-feature GP
def _head(d: int = 3, o: int = 2, features: int = 64, **kw) -> RandomFeatureGP:
    torch.manual_seed(0)
    options = {"lengthscale": 0.7, "prior_scale": 1.3, **kw}
    return RandomFeatureGP(d, o, num_features=features, dtype=torch.float64, **options)


def test_the_random_features_kernel_tends_to_the_rbf_kernel():
    """``s² φ(h)ᵀφ(h')`` is a mean of ``D`` i.i.d. terms ``s² (cos(ωᵀΔ/ℓ) + cos(ωᵀΣ/ℓ + 2τ))``
    (``Δ = h - h'``, ``Σ = h + h'``) of variance at most ``s⁴``: averaged over 50 independent
    heads of ``D = 1024`` its error has standard deviation at most ``s² / sqrt(51,200)``
    (0.0075 at ``s = 1.3``); 5 of those is the tolerance on every entry."""
    h = torch.randn(6, 3, **F64)
    kernel = torch.zeros(6, 6, **F64)
    for seed in range(50):
        torch.manual_seed(seed)
        phi = RandomFeatureGP(3, 1, num_features=1024, lengthscale=0.7, prior_scale=1.3,
                              dtype=torch.float64).features(h)  # fmt: skip
        kernel += 1.3**2 * phi @ phi.T / 50
    rbf = 1.3**2 * torch.exp(-torch.cdist(h, h).square() / (2 * 0.7**2))
    assert float((kernel - rbf).abs().max()) < 5 * 1.3**2 / math.sqrt(50 * 1024)
    assert float((kernel - rbf).abs().max()) > 0  # random, not the RBF itself


def test_a_new_head_is_its_prior_and_the_posterior_is_the_inverse_of_the_precision():
    head = _head()
    phi = head.features(torch.randn(5, 3, **F64))
    mean, var = head.output_moments(phi)
    torch.testing.assert_close(var, 1.3**2 * phi.square().sum(-1, keepdim=True).expand(5, 2))
    torch.testing.assert_close(mean, phi @ head.weight.T + head.bias)
    g = torch.randn(2, 64, 64, **F64)
    gram = g @ g.transpose(-1, -2)
    head.set_posterior(gram)
    for o in range(2):
        cov = torch.linalg.inv(gram[o] + torch.eye(64, **F64) / 1.3**2)
        want = ((phi @ cov) * phi).sum(-1)
        torch.testing.assert_close(head.output_moments(phi)[1][:, o], want, rtol=1e-10, atol=1e-12)
    moment = torch.randn(2, 64, **F64)
    head.solve_mean(moment)
    cov0 = torch.linalg.inv(gram[0] + torch.eye(64, **F64) / 1.3**2)
    torch.testing.assert_close(head.weight[0], cov0 @ moment[0], rtol=1e-9, atol=1e-10)


def test_the_draws_have_the_closed_form_moments():
    """40,000 draws of the output weights: the outputs' sample mean within 5 standard errors
    of the closed form, the sample variance within 5 of its own (``sqrt(2/S)`` relative)."""
    head = _head(features=16)
    g = torch.randn(2, 16, 16, **F64)
    head.set_posterior(g @ g.transpose(-1, -2) / 4)
    phi = head.features(torch.randn(4, 3, **F64))
    mean, var = head.output_moments(phi)
    torch.manual_seed(1)
    samples = head.sample_outputs(phi, 40_000)
    assert samples.shape == (40_000, 4, 2)
    s = samples.shape[0]
    assert bool(((samples.mean(0) - mean).abs() < 5 * (var / s).sqrt()).all())
    assert bool(((samples.var(0) / var - 1).abs() < 5 * math.sqrt(2 / s)).all())


def test_the_prior_penalty_is_the_negative_log_prior_up_to_a_constant():
    head = _head()
    prior = torch.distributions.Normal(0.0, 1.3)
    want = (
        -prior.log_prob(head.weight).sum()
        - head.weight.numel() * prior.log_prob(torch.zeros((), **F64)).neg()
    )
    torch.testing.assert_close(head.log_prior_penalty(), want)


def test_a_head_without_bias_has_none():
    head = _head(bias=False)
    assert head.bias is None
    phi = head.features(torch.randn(2, 3, **F64))
    torch.testing.assert_close(head(torch.zeros(1, 3, **F64)), head.features(
        torch.zeros(1, 3, **F64)) @ head.weight.T)  # fmt: skip
    assert head.sample_outputs(phi, 3).shape == (3, 2, 2)


def test_the_features_are_the_formula_s_and_the_buffers_are_drawn_as_documented():
    """``φ(h) = sqrt(2/D) cos(Ω h / ℓ + τ)`` from the head's own buffers; ``τ`` in ``[0, 2π)``
    and spread over it, ``β`` starting as ``nn.Linear``'s ``U(-1/sqrt(D), 1/sqrt(D))``, every
    tensor in the head's dtype."""
    head = _head(features=4096)
    h = torch.randn(3, 3, **F64)
    want = math.sqrt(2 / 4096) * torch.cos(h @ head.frequencies.T / 0.7 + head.phases)
    torch.testing.assert_close(head.features(h), want, rtol=0, atol=1e-15)
    assert 0 <= float(head.phases.min()) and float(head.phases.max()) < 2 * math.pi
    assert float(head.phases.max()) > 1.9 * math.pi and float(head.phases.min()) < 0.1 * math.pi
    bound = 1 / math.sqrt(4096)
    weight = head.weight.detach()
    assert float(weight.abs().max()) <= bound
    assert float(weight.max()) > 0.9 * bound and float(weight.min()) < -0.9 * bound
    for t in (head.frequencies, head.phases, head.weight, head.bias, head.precision_cholesky):
        assert t.dtype == torch.float64


def test_the_outputs_add_the_bias():
    head = _head()
    with torch.no_grad():
        head.bias.copy_(torch.tensor([0.5, -2.0]))
    phi = head.features(torch.randn(4, 3, **F64))
    want = phi @ head.weight.T + torch.tensor([0.5, -2.0], **F64)
    torch.testing.assert_close(head.outputs(phi), want)
    torch.testing.assert_close(head.output_moments(phi)[0], want)


def test_the_draws_are_the_reparameterised_standard_normals():
    """The draws are ``β_o + L_o⁻ᵀ ε_o`` for the standard normals ``ε (O, D, S)`` the global
    stream gives next, in the features' dtype: a seed fixes them, and the outputs' noises are
    independent (a shared ``ε`` across outputs would correlate them)."""
    head = _head(features=8)
    g = torch.randn(2, 8, 8, **F64)
    head.set_posterior(g @ g.transpose(-1, -2))
    with torch.no_grad():
        head.bias.copy_(torch.tensor([1.0, -1.0]))
    phi = head.features(torch.randn(3, 3, **F64))
    torch.manual_seed(7)
    got = head.sample_outputs(phi, 5)
    torch.manual_seed(7)
    eps = torch.randn(2, 8, 5, **F64)
    chol = head.precision_cholesky
    weights = [head.weight[o] + torch.linalg.solve_triangular(chol[o].T, eps[o], upper=True).T
               for o in range(2)]  # fmt: skip
    want = torch.stack(
        [phi @ w.T + b for w, b in zip(weights, (1.0, -1.0), strict=True)], -1
    )  # (S, N, O)
    torch.testing.assert_close(got, want.transpose(0, 1).contiguous(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_features": 0}, "^num_features must"),
        ({"lengthscale": 0.0}, "^lengthscale must"),
        ({"prior_scale": -1.0}, "^prior_scale must"),
        ({"prior_scale": 0.0}, "^prior_scale must"),
        ({"in_features": 0}, "^in_features must"),
        ({"out_features": 0}, "^out_features must"),
    ],
)
def test_bad_head_settings_are_refused_by_name(kwargs, match):
    options = {"in_features": 2, "out_features": 1, "num_features": 4, "lengthscale": 1.0,
               "prior_scale": 1.0, **kwargs}  # fmt: skip
    with pytest.raises(ValueError, match=match):
        RandomFeatureGP(**options)


@pytest.mark.parametrize("shape", [(4, 3), (4, 2, 3, 3)], ids=["linear", "conv"])
def test_stacked_vectors_bound_each_member_as_its_own_bound_does(shape):
    """With ``u``, ``v`` stacked ``(K, out)``, ``(K, in)`` and weights ``(K, out, ...)``, each
    member's slice is bounded, and its vectors refined, as that member's own bound does."""
    g = torch.Generator().manual_seed(3)
    weights = [3.0 * torch.randn(shape, generator=g, dtype=torch.float64) for _ in range(3)]
    own = [SpectralBound(w, 0.9, power_iterations=2) for w in weights]
    stacked = SpectralBound(weights[0], 0.9, power_iterations=2)
    stacked._u = torch.stack([b._u for b in own])
    stacked._v = torch.stack([b._v for b in own])
    for _ in range(3):  # training calls: each refines its vectors twice
        got = stacked(torch.stack(weights))
        expected = torch.stack([b(w) for b, w in zip(own, weights, strict=True)])
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(stacked._u, torch.stack([b._u for b in own]), rtol=1e-12, atol=0.0)
    torch.testing.assert_close(stacked._v, torch.stack([b._v for b in own]), rtol=1e-12, atol=0.0)
    # each slice at the bound (the weights are far over it): one scale per member, not one for all
    norms = [torch.linalg.matrix_norm(m.flatten(1), ord=2) for m in got]
    assert all(float(n) == pytest.approx(0.9, rel=1e-3) for n in norms)
