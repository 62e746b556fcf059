"""``likelihoods.resolve``: the one place a likelihood name is read. Each name, the noise given
beside it, the variance heads of an ensemble, and every refusal with its whole message."""

from __future__ import annotations

import pytest
import torch

import bnn_pyro as bp
from bnn_pyro.likelihoods.resolve import LIKELIHOOD_NAMES, check_noise_scale, resolve_likelihood


@pytest.mark.parametrize("name", ["classification", "categorical"])
def test_the_class_names_are_a_categorical_and_keep_the_noise_given(name):
    lik, noise = resolve_likelihood(name, None, "M")
    assert type(lik) is bp.Categorical and noise is None
    assert resolve_likelihood(name, 0.5, "M")[1] == 0.5


@pytest.mark.parametrize("name", ["regression", "gaussian"])
def test_the_regression_names_are_a_gaussian_fixed_by_a_float_noise(name):
    lik, noise = resolve_likelihood(name, 0.5, "M")
    assert type(lik) is bp.Gaussian and lik.scale == 0.5 and noise == 0.5
    lik, noise = resolve_likelihood(name, None, "M")
    assert lik.learned and noise is None
    sigma = torch.tensor([0.5, 1.0])  # one per output: the scale is the fit's, the noise kept
    lik, noise = resolve_likelihood(name, sigma, "M")
    assert lik.learned and noise is sigma


def test_a_fixed_gaussian_sets_the_noise_and_refuses_another():
    lik = bp.Gaussian(scale=0.3)
    assert resolve_likelihood(lik, None, "M") == (lik, 0.3)
    assert resolve_likelihood(lik, 0.3, "M") == (lik, 0.3)
    with pytest.raises(ValueError, match=r"^likelihood=Gaussian\(scale=0.3\) and noise_scale=0.5"):
        resolve_likelihood(lik, 0.5, "M")
    learned = bp.Gaussian(scale="learned")
    assert resolve_likelihood(learned, 0.5, "M") == (learned, 0.5)


def test_variance_heads_make_a_gaussian_heteroscedastic_and_refuse_the_rest():
    lik, noise = resolve_likelihood("regression", None, "DeepEnsemble", True, True)
    assert type(lik) is bp.HeteroscedasticGaussian and lik.min_scale == 1e-3 and noise is None
    own = bp.HeteroscedasticGaussian(min_scale=0.1)
    assert resolve_likelihood(own, None, "DeepEnsemble", True, True)[0] is own
    message = r"^gaussian_nll=True \(variance heads\) needs likelihood='regression', got Categ"
    with pytest.raises(ValueError, match=message):
        resolve_likelihood("classification", None, "DeepEnsemble", True, True)


def test_a_heteroscedastic_gaussian_only_where_asked():
    own = bp.HeteroscedasticGaussian()
    assert resolve_likelihood(own, None, "DeepEnsemble", heteroscedastic=True)[0] is own
    with pytest.raises(ValueError, match=r"^SWAG supports a Gaussian or Categorical likelihood,"):
        resolve_likelihood(own, None, "SWAG")
    message = r"^M supports a Gaussian or Categorical or HeteroscedasticGaussian likelihood, got"
    with pytest.raises(ValueError, match=message):
        resolve_likelihood(bp.Bernoulli(), None, "M", heteroscedastic=True)


def test_an_unknown_name_or_object_is_refused():
    with pytest.raises(ValueError, match=r"or one of \('classification', .*got 'poisson'$"):
        resolve_likelihood("poisson", None, "M")
    message = (
        r"^likelihood must be a bnn_pyro Likelihood \(e.g. bp.Gaussian\(\), bp.Categorical\(\)\) "
        r"or one of \('classification', 'categorical', 'regression', 'gaussian'\), got int$"
    )
    with pytest.raises(TypeError, match=message):
        resolve_likelihood(3, None, "M")
    assert LIKELIHOOD_NAMES == ("classification", "categorical", "regression", "gaussian")


def test_the_noise_scale_is_checked():
    assert check_noise_scale(None) is None and check_noise_scale(2) == 2.0
    with pytest.raises(ValueError, match=r"^noise_scale must be a finite float > 0.0, got 0.0$"):
        check_noise_scale(0.0)
    with pytest.raises(ValueError, match=r"^noise_scale must be finite and > 0"):
        check_noise_scale(torch.tensor([1.0, float("nan")]))
    with pytest.raises(ValueError, match=r"^noise_scale must be finite and > 0"):
        check_noise_scale(torch.tensor([1.0, 0.0]))
