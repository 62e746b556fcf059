"""The predictive of an SG-MCMC fit (``sgmcmc/predictive.py``): which of the K kept samples a
prediction uses, checked against each sample's own prediction by hand (a linear net:
``x W_kᵀ + b_k``), and the in-sample check's verdict."""

from __future__ import annotations

import re
import warnings

import pytest
import torch

import bnn_pyro as bp
from bnn_pyro.exceptions import NotFittedError, TrainingInstabilityWarning
from bnn_pyro.training.in_sample import check_predictive_in_sample

K = 5
X = torch.linspace(-1, 1, 8)[:, None]
Y = 2 * X[:, 0] + 0.1


@pytest.fixture(scope="module")
def fitted():
    torch.manual_seed(0)
    m = bp.make("sgld", bp.nn.mlp(1, [], 1), bp.Gaussian(0.5), max_samples=K)
    m.fit(X, Y, epochs=40, progress=False, seed=0)
    assert m.kept_samples.shape == (K, 2)
    return m


def _each(m):
    """``(K, N, 1)``: each kept sample's prediction, ``x W_kᵀ + b_k``."""
    s = m.samples()
    return torch.einsum("nf,kof->kno", X, s["net.0.weight"]) + s["net.0.bias"].unsqueeze(1)


def _rows_of(samples, each):
    """For each ``(N, 1)`` row of ``samples``, the index of the kept sample it is."""
    found = []
    for row in samples:
        match = [k for k in range(len(each)) if torch.allclose(row, each[k], atol=1e-6)]
        assert len(match) == 1, "every prediction is one kept sample's"
        found.append(match[0])
    return found


def test_predictions_before_a_fit_or_without_samples_are_refused_by_name(fitted):
    m = bp.make("sgld", bp.nn.mlp(1, [], 1), bp.Gaussian(0.5))
    message = r"^this SGMCMC has no samples yet: call fit\(X, y\)$"
    with pytest.raises(NotFittedError, match=message):
        m.samples()
    with pytest.raises(NotFittedError, match=message):
        m.predict(X)
    empty = bp.make("sgld", bp.nn.mlp(1, [], 1), bp.Gaussian(0.5))
    empty.potential, empty.kept_samples = fitted.potential, fitted.kept_samples[:0]
    with pytest.raises(NotFittedError, match=message):
        empty.samples()
    assert empty.check_in_sample(X, Y[:, None]) is None  # nothing kept: nothing to check
    assert m.check_in_sample(X, Y[:, None]) is None


def test_as_many_draws_as_kept_samples_use_each_once(fitted):
    each = _each(fitted)
    mean, variance, samples = fitted.predict(X, True, num_samples=K, seed=3)
    assert sorted(_rows_of(samples, each)) == list(range(K))
    torch.testing.assert_close(mean, each.mean(0), rtol=0, atol=1e-6)
    torch.testing.assert_close(variance, each.var(0, unbiased=False), rtol=0, atol=1e-6)


def test_fewer_draws_are_distinct_samples_and_more_are_drawn_with_replacement(fitted):
    each = _each(fitted)
    few = _rows_of(fitted.predict(X, True, num_samples=3, seed=4)[2], each)
    assert len(few) == 3 and len(set(few)) == 3
    many = _rows_of(fitted.predict(X, True, num_samples=12, seed=4)[2], each)
    assert len(many) == 12 and len(set(many)) < 12  # 12 draws of 5: some repeat


def test_the_seed_or_generator_fixes_the_choice_of_samples(fitted):
    each = _each(fitted)
    chosen = [tuple(_rows_of(fitted.predict(X, True, num_samples=2, seed=s)[2], each))
              for s in range(8)]  # fmt: skip
    assert chosen == [tuple(_rows_of(fitted.predict(X, True, num_samples=2, seed=s)[2], each))
                      for s in range(8)]  # fmt: skip
    assert len(set(chosen)) > 1  # 20 ordered pairs: eight seeds do not all pick one
    by_generator = [
        fitted.predict(X, True, num_samples=2, generator=torch.Generator().manual_seed(5))[2]
        for _ in range(2)
    ]
    torch.testing.assert_close(by_generator[0], by_generator[1], rtol=0, atol=0)
    assert fitted.predict(X, True, num_samples=2)[2].shape == (2, 8, 1)  # no seed: any two


def test_the_noise_variance_is_added_only_when_asked(fitted):
    plain = fitted.predict(X, num_samples=K, seed=0)
    noisy = fitted.predict(X, num_samples=K, seed=0, include_noise=True, chunk_size=3)
    assert len(plain) == 2
    torch.testing.assert_close(noisy[0], plain[0], rtol=0, atol=1e-6)
    torch.testing.assert_close(noisy[1] - plain[1], torch.full_like(plain[1], 0.25), rtol=0,
                               atol=1e-6)  # fmt: skip


def test_the_gaussian_mixture_has_one_component_per_chosen_sample(fitted):
    each = _each(fitted)
    locs, scales = fitted.predictive_gaussian(X, num_samples=K, seed=2)
    assert sorted(_rows_of(locs, each)) == list(range(K))
    assert float(scales) == 0.5
    g = torch.Generator().manual_seed(6)
    locs = fitted.predictive_gaussian(X, num_samples=2, generator=g)[0]
    want = fitted.predict(X, True, num_samples=2, generator=torch.Generator().manual_seed(6))[2]
    torch.testing.assert_close(locs, want, rtol=0, atol=1e-6)


def test_calling_the_method_is_its_predictive_mean(fitted):
    fitted.num_samples = K  # every kept sample, in some order: one mean
    try:
        torch.testing.assert_close(fitted(X), _each(fitted).mean(0), rtol=0, atol=1e-6)
    finally:
        fitted.num_samples = 100


def test_the_in_sample_check_returns_the_r2_and_warns_with_the_chains_reading(fitted):
    y = Y[:, None]
    r2 = fitted.check_in_sample(X, y)
    torch.testing.assert_close(r2, check_predictive_in_sample(fitted, X, y))
    bad = bp.make("sgld", bp.nn.mlp(1, [], 1), bp.Gaussian(0.5))
    bad.potential, bad.kept_samples = fitted.potential, -10 * fitted.kept_samples
    hint = (
        "A chain does this when its step is too large for the posterior it reached (a noise "
        "learned small makes the potential's curvature grow as 1/sigma^2) or has not burned in "
        "yet: a smaller lr, or the scale-adapted sampler 'sghmc', usually help."
    )
    with pytest.warns(TrainingInstabilityWarning) as caught:
        r2 = bad.check_in_sample(X, y, what="chain 7")
    assert float(r2) < 0
    text = str(caught[0].message)
    assert "chain 7" in text and text.endswith(hint), text
    assert re.search(r"\bchain 7\b", text)


def test_only_a_gaussian_regression_is_checked_in_sample(fitted):
    categorical = bp.make("sgld", bp.nn.mlp(1, [], 2), bp.Categorical())
    categorical.potential, categorical.kept_samples = fitted.potential, fitted.kept_samples
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert categorical.check_in_sample(X, Y[:, None]) is None


def test_without_a_seed_the_choice_is_seeded_by_one_draw_of_the_global_rng(fitted):
    """``seed=None``: the choice's seed is ``torch.randint(0, 2**62)`` from the global RNG, so
    ``torch.manual_seed`` reproduces a prediction (as it does a fit)."""
    torch.manual_seed(11)
    got = fitted.predict(X, True, num_samples=2)[2]
    torch.manual_seed(11)
    seed = int(torch.randint(0, 2**62, (1,)))
    torch.testing.assert_close(got, fitted.predict(X, True, num_samples=2, seed=seed)[2])


def test_many_draws_with_replacement_reach_every_kept_sample(fitted):
    """200 draws of 5 miss a given sample with probability ``0.8^200 ≈ 4 · 10⁻²⁰``."""
    rows = _rows_of(fitted.predict(X, True, num_samples=200, seed=9)[2], _each(fitted))
    assert set(rows) == set(range(K))


def test_the_in_sample_warning_names_the_chain_by_default(fitted):
    bad = bp.make("sgld", bp.nn.mlp(1, [], 1), bp.Gaussian(0.5))
    bad.potential, bad.kept_samples = fitted.potential, -10 * fitted.kept_samples
    with pytest.warns(TrainingInstabilityWarning) as caught:
        bad.check_in_sample(X, Y[:, None])
    assert re.search(r"\bthe chain\b", str(caught[0].message))


def test_the_chunk_size_reaches_the_inner_predictive(fitted):
    with pytest.raises(ValueError, match=r"^chunk_size must be an int >= 1, got 0$"):
        fitted.predict(X, num_samples=2, seed=0, chunk_size=0)
    with pytest.raises(ValueError):  # the Gaussian mixture's passes on: an empty chunk fails
        fitted.predictive_gaussian(X, num_samples=2, seed=0, chunk_size=0)
