"""Likelihoods: the observation site of a BNN, and what its predictions mean.

A likelihood turns the net's output ``f: (N, O)`` (or ``(S, N, O)`` for S weight samples) into
the observation site ``"obs"`` inside ``pyro.plate("data", size=N_total)``, and tells
:meth:`bnn_pyro.VariationalBNN.predict` how to summarise ``f``:

===========================  =====================  ==========================  ===================
likelihood                   net output             ``predict`` mean            aleatoric variance
===========================  =====================  ==========================  ===================
``Gaussian``                 ``(N, O)`` locations   ``E[y]`` ``(N, O)``         ``scale**2``
``HeteroscedasticGaussian``  ``(N, 2*O)`` loc, raw  ``E[y]`` ``(N, O)``         ``softplus(raw)**2``
``Categorical``              ``(N, C)`` logits      class probabilities         --
``Bernoulli``                ``(N, O)`` logits      ``P(y = 1)``                --
===========================  =====================  ==========================  ===================

Learned noise (``Gaussian(scale="learned")``) is a latent site ``"likelihood.scale"`` with a
``LogNormal`` prior, so it gets a posterior like the weights and works unchanged under MCMC.
"""

from bnn_pyro.likelihoods.base import LIKELIHOOD_EXPECTED, Likelihood, likelihood_from_config
from bnn_pyro.likelihoods.discrete import Bernoulli, Categorical
from bnn_pyro.likelihoods.gaussian import (
    NOISE_SITE,
    Gaussian,
    GaussianLikelihood,
    HeteroscedasticGaussian,
    noise_latents,
)

__all__ = [
    "LIKELIHOOD_EXPECTED",
    "NOISE_SITE",
    "Likelihood",
    "GaussianLikelihood",
    "Gaussian",
    "HeteroscedasticGaussian",
    "Categorical",
    "Bernoulli",
    "likelihood_from_config",
    "noise_latents",
]
