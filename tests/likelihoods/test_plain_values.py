"""``why_not_plain``: which likelihood classes the plain-torch objectives can score as the
Pyro model observes them, read off the class (each reason word for word)."""

from __future__ import annotations

import pyro
import pytest

import bnn_pyro as bp
from bnn_pyro.likelihoods.base import Likelihood
from bnn_pyro.likelihoods.plain import why_not_plain


class _OwnLocScale(bp.Gaussian):
    def loc_scale(self, f, latents):
        return f, f.new_tensor(0.5)


class _OwnLogProb(bp.Gaussian):
    def log_prob(self, f, y, latents):
        return super().log_prob(f, y, latents)


class _OwnDistribution(bp.Gaussian):
    def distribution(self, f, latents):
        return pyro.distributions.Laplace(f, 0.5).to_event(1)


class _OnlyDistribution(Likelihood):
    """A likelihood of a user's own with only a distribution: both paths read it."""

    def check_targets(self, y, out_dim):
        return y

    def mean(self, f):
        return f

    def distribution(self, f, latents):
        return pyro.distributions.Laplace(f, 0.5).to_event(1)


class _OwnLatents(bp.Gaussian):
    def sample_latents(self, f):
        return {"likelihood.c": pyro.sample("likelihood.c", pyro.distributions.Beta(2.0, 2.0))}


@pytest.mark.parametrize(
    ("likelihood", "particles", "reason"),
    [
        (bp.Gaussian(0.1), True, None),
        (bp.Gaussian("learned"), True, None),
        (bp.HeteroscedasticGaussian(), True, None),
        (bp.Categorical(), True, None),
        (bp.Bernoulli(), True, None),
        (_OwnLocScale(0.1), True, None),  # read by log_prob and distribution alike
        (_OnlyDistribution(), True, None),  # Likelihood.log_prob reads the distribution
        (_OwnLatents(0.1), False, None),
        (
            _OwnLatents(0.1),
            True,
            "_OwnLatents draws latent sites of its own, laid out under several particles by "
            "Pyro's vectorized plate",
        ),
        (
            _OwnLogProb(0.1),
            False,
            "_OwnLogProb defines its own log_prob(), which the plain-torch objective does not read",
        ),
        (
            _OwnDistribution(0.1),
            False,
            "_OwnDistribution defines its own distribution(), which Gaussian.log_prob (the "
            "plain-torch density) does not read",
        ),
    ],
)
def test_why_not_plain_reads_which_class_defines_the_density(likelihood, particles, reason):
    assert why_not_plain(likelihood, particles=particles) == reason


def test_a_likelihood_is_asked_for():
    with pytest.raises(TypeError, match=r"^likelihood must be a Likelihood, got str$"):
        why_not_plain("regression")


def test_one_particle_unless_told():
    """Without ``particles``, a user's own latents are the plain-torch objective's to read."""
    assert why_not_plain(_OwnLatents(0.1)) is None
    assert why_not_plain(_OwnLatents(0.1), particles=True) is not None
