"""Each built-in likelihood's own per-row log-density (``Likelihood.log_prob``, plain torch) is
the density its Pyro ``distribution`` observes, for every shape the library calls it with: one
net's rows ``(N, O)``, draws ``(S, N, O)`` against shared targets, and K stacked nets ``(K, B,
O)`` with a noise scale per net (a learned scale's draws, or each net's own fixed one).

The reference is Pyro's own ``log_prob`` of the distribution the model's observation site uses,
in float64, so the two agree to round-off (1e-10 here, on log-densities of order 10).
"""

from __future__ import annotations

import pyro.distributions
import pytest
import torch

import bnn_pyro as bp
from bnn_pyro.likelihoods import NOISE_SITE

TOL = dict(rtol=1e-10, atol=1e-10)


def _targets(lik, n: int, o: int, g: torch.Generator) -> torch.Tensor:
    if isinstance(lik, bp.Categorical):
        return torch.randint(0, o, (n,), generator=g)
    if isinstance(lik, bp.Bernoulli):
        return torch.randint(0, 2, (n, o), generator=g).double()
    return torch.randn(n, lik.target_dim(o), generator=g, dtype=torch.float64)


CASES = {
    "gaussian": lambda: bp.Gaussian(0.7),
    "heteroscedastic": lambda: bp.HeteroscedasticGaussian(min_scale=0.01),
    "categorical": lambda: bp.Categorical(),
    "bernoulli": lambda: bp.Bernoulli(),
}


@pytest.mark.parametrize("lead", [(), (3,)], ids=["rows", "draws"])
@pytest.mark.parametrize("name", list(CASES))
def test_log_prob_is_the_observed_distributions(name, lead):
    """(N, O) or (S, N, O) outputs against the (N, ...) targets check_targets returns."""
    g = torch.Generator().manual_seed(0)
    lik = CASES[name]()
    n, o = 5, 4
    f = torch.randn(*lead, n, o, generator=g, dtype=torch.float64)
    y = _targets(lik, n, o, g)
    got = lik.log_prob(f, y, {})
    assert got.shape == (*lead, n)
    torch.testing.assert_close(got, lik.distribution(f, {}).log_prob(y), **TOL)


@pytest.mark.parametrize("scale_shape", ["(O,)", "(S, O)", "(S, 1, O)"])
def test_a_learned_scale_is_read_from_its_latent_in_each_shape(scale_shape):
    """The learned noise under the shapes it takes: one scale (O,), posterior draws (S, O),
    and under sample plates (S, 1, O); each broadcast over the rows as Pyro's Normal does."""
    g = torch.Generator().manual_seed(1)
    lik = bp.Gaussian("learned")
    f = torch.randn(3, 5, 2, generator=g, dtype=torch.float64)
    y = torch.randn(5, 2, generator=g, dtype=torch.float64)
    shape = {"(O,)": (2,), "(S, O)": (3, 2), "(S, 1, O)": (3, 1, 2)}[scale_shape]
    latents = {NOISE_SITE: torch.rand(*shape, generator=g, dtype=torch.float64) + 0.1}
    torch.testing.assert_close(
        lik.log_prob(f, y, latents), lik.distribution(f, latents).log_prob(y), **TOL
    )


def test_a_learned_scale_without_its_latent_is_refused_by_name():
    with pytest.raises(KeyError, match="a learned scale needs its latent 'likelihood.scale'"):
        bp.Gaussian("learned").log_prob(torch.zeros(2, 1), torch.zeros(2, 1), {})


def test_stacked_nets_each_with_its_own_fixed_scale():
    """Three stacked Gaussians of scales 0.5, 1 and 2: their fixed_latents stacked (K, 1, O)
    make the first one's log_prob each net's own (a different density per row of K)."""
    g = torch.Generator().manual_seed(2)
    liks = [bp.Gaussian(s) for s in (0.5, 1.0, 2.0)]
    f = torch.randn(3, 4, 2, generator=g, dtype=torch.float64)
    y = torch.randn(3, 4, 2, generator=g, dtype=torch.float64)
    scales = torch.stack([lik.fixed_latents(f)[NOISE_SITE] for lik in liks]).unsqueeze(1)
    got = liks[0].log_prob(f, y, {NOISE_SITE: scales})
    for k, lik in enumerate(liks):
        torch.testing.assert_close(got[k], lik.distribution(f[k], {}).log_prob(y[k]), **TOL)
    assert not torch.allclose(got[0], got[2])


def test_fixed_latents_are_a_fixed_scale_only():
    """A fixed Gaussian's scale, per output, on f's dtype; nothing for a learned scale or a
    likelihood without a noise site."""
    f = torch.zeros(4, 3, dtype=torch.float64)
    fixed = bp.Gaussian(0.25).fixed_latents(f)
    assert list(fixed) == [NOISE_SITE]
    assert torch.equal(fixed[NOISE_SITE], torch.full((3,), 0.25, dtype=torch.float64))
    for lik in (bp.Gaussian("learned"), bp.HeteroscedasticGaussian(), bp.Categorical()):
        assert lik.fixed_latents(f) == {}


def test_a_users_likelihood_reads_its_distribution():
    """A subclass that defines only distribution() gets log_prob from it (the default)."""

    class Laplace(bp.likelihoods.Likelihood):
        def check_targets(self, y, out_dim):
            return y

        def distribution(self, f, latents):
            return pyro.distributions.Laplace(f, 1.0).to_event(1)

        def mean(self, f):
            return f

    f, y = torch.zeros(2, 3, 1), torch.ones(3, 1)
    torch.testing.assert_close(Laplace().log_prob(f, y, {}), torch.full((2, 3), -1 - 0.6931472))


def test_a_gaussian_subclass_with_its_own_loc_scale_is_read():
    """A fixed Gaussian's log_prob takes a shorter path; a subclass that defines its own
    loc_scale (here a scale of 2 whatever it was built with) is scored through it."""

    class Wide(bp.Gaussian):
        def loc_scale(self, f, latents):
            return f, f.new_tensor(2.0)

    f = torch.randn(3, 2, dtype=torch.float64)
    y = torch.randn(3, 2, dtype=torch.float64)
    got = Wide(0.5).log_prob(f, y, {})
    torch.testing.assert_close(got, bp.Gaussian(2.0).log_prob(f, y, {}), **TOL)
    assert not torch.allclose(got, bp.Gaussian(0.5).log_prob(f, y, {}))
