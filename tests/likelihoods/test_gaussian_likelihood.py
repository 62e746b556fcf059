"""The Gaussian likelihoods' small contracts, each pinned by value: the repr a notebook shows,
the saved config read back, the learned noise's first value (its dtype and device follow the
targets'), and HeteroscedasticGaussian's argument checks."""

from __future__ import annotations

import pyro.distributions as dist
import pytest
import torch

import bnn_pyro as bp
from bnn_pyro.likelihoods import likelihood_from_config


@pytest.mark.parametrize(
    ("likelihood", "shown"),
    [
        (bp.Gaussian(scale=0.5), "Gaussian(scale=0.5)"),
        (bp.Gaussian(scale="learned"), "Gaussian(scale='learned', scale_prior=LogNormal())"),
        (
            bp.Gaussian(scale="learned", scale_init=0.25),
            "Gaussian(scale='learned', scale_prior=LogNormal(), scale_init=0.25)",
        ),
        (
            bp.Gaussian(scale="learned", scale_init="prior"),
            "Gaussian(scale='learned', scale_prior=LogNormal(), scale_init='prior')",
        ),
    ],
)
def test_repr_names_what_differs_from_the_defaults(likelihood, shown):
    assert repr(likelihood) == shown


def test_a_learned_scale_config_reads_back_with_its_prior_and_first_value():
    lik = bp.Gaussian(scale="learned", scale_prior=dist.LogNormal(0.3, 2.0), scale_init=0.5)
    config = lik.config()
    assert config["scale_prior"]["distribution"] == "LogNormal"
    back = likelihood_from_config(config)
    assert back.scale == "learned" and back.scale_init == 0.5
    assert isinstance(back.scale_prior, dist.LogNormal)
    assert float(back.scale_prior.loc) == pytest.approx(0.3)
    assert float(back.scale_prior.scale) == pytest.approx(2.0)
    assert back.config()["scale_prior"]["params"].keys() == {"loc", "scale"}


def test_a_config_saved_before_scale_init_existed_reads_back_as_data():
    """Files written before ``scale_init`` have no such key: the first value then comes from
    the data, the default."""
    config = bp.Gaussian(scale="learned").config()
    del config["scale_init"]
    assert likelihood_from_config(config).scale_init == "data"


def test_a_fixed_scale_config_has_no_learned_parts():
    assert bp.Gaussian(scale=0.5).config() == {"type": "Gaussian", "scale": 0.5}


def test_a_given_first_noise_value_takes_the_targets_dtype_and_device():
    lik = bp.Gaussian(scale="learned", scale_init=0.25)
    y = torch.zeros(7, 3, dtype=torch.float64)
    value = lik.initial_latents(torch.zeros(7, 2, dtype=torch.float64), y)["likelihood.scale"]
    assert value.dtype == torch.float64 and value.shape == (3,)
    assert torch.equal(value, torch.full((3,), 0.25, dtype=torch.float64))
    # the meta device stands in for an accelerator: a value made on the default device would
    # come back on the CPU
    on_meta = lik.initial_latents(torch.zeros(7, 2, device="meta"), y.to("meta"))
    assert on_meta["likelihood.scale"].device.type == "meta"


def test_heteroscedastic_floor_defaults_and_checks():
    assert bp.HeteroscedasticGaussian().min_scale == 1e-3
    assert bp.HeteroscedasticGaussian(min_scale=0).min_scale == 0  # no floor is allowed
    with pytest.raises(TypeError, match=r"min_scale must be a float >= 0, got True"):
        bp.HeteroscedasticGaussian(min_scale=True)
    with pytest.raises(TypeError, match=r"min_scale must be a float >= 0, got '0.1'"):
        bp.HeteroscedasticGaussian(min_scale="0.1")
    with pytest.raises(ValueError, match=r"min_scale must be a finite float >= 0, got inf"):
        bp.HeteroscedasticGaussian(min_scale=float("inf"))
    with pytest.raises(ValueError, match=r"min_scale must be a finite float >= 0, got -0.1"):
        bp.HeteroscedasticGaussian(min_scale=-0.1)


def test_heteroscedastic_refuses_an_odd_number_of_outputs_by_name():
    with pytest.raises(ValueError, match=r"^HeteroscedasticGaussian needs an even number"):
        bp.HeteroscedasticGaussian().target_dim(3)


def test_a_heteroscedastic_config_reads_back_with_its_floor():
    config = bp.HeteroscedasticGaussian(min_scale=0.05).config()
    assert config == {"type": "HeteroscedasticGaussian", "min_scale": 0.05}
    assert likelihood_from_config(config).min_scale == 0.05


@pytest.mark.parametrize(
    ("name", "prior"),
    [
        ("vi", dist.HalfCauchy(1.0)),
        ("vi", dist.HalfNormal(1.0)),
        ("vi", dist.Gamma(2.0, 2.0)),
        ("sghmc", dist.HalfCauchy(1.0)),
    ],
    ids=repr,
)
def test_a_noise_prior_on_the_nonnegative_reals_is_taken_and_learns_the_noise(name, prior):
    """Pyro's usual noise priors (``HalfCauchy``, ``HalfNormal``, ``Gamma``) have support
    ``[0, inf)``, not ``(0, inf)``: the learned scale takes them as the hierarchical priors do.
    The model's noise site scores under that prior, and on 400 rows of ``y = 2x + 0.3 ε`` the
    learned noise comes out at 0.3: its posterior sd is about ``0.3 / sqrt(2 * 400) = 0.011``
    and the prior's pull is far smaller, so ±0.05 is over four posterior sds (and absorbs the
    chain's or the guide's own error)."""
    lik = bp.Gaussian(scale="learned", scale_prior=prior)
    value = torch.tensor([0.7])
    torch.testing.assert_close(
        lik.noise_prior(torch.zeros(3, 1)).log_prob(value), prior.log_prob(value).sum()
    )
    torch.manual_seed(0)
    X = torch.randn(400, 1)
    y = 2 * X + 0.3 * torch.randn(400, 1)
    m = bp.make(name, bp.nn.mlp(1, [], 1), lik)
    fit = {"epochs": 300, "lr": 0.05} if name == "vi" else {"epochs": 1500, "batch_size": None}
    m.fit(X, y, progress=False, seed=0, **fit)
    _, scales = m.predictive_gaussian(X[:5], num_samples=200, seed=0)
    assert abs(float(torch.as_tensor(scales).mean()) - 0.3) < 0.05
    assert type(likelihood_from_config(lik.config()).scale_prior) is type(prior)
