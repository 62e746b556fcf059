"""Values of the simple priors (``IIDPrior``, ``ScaleMixturePrior``, ``LayerwiseNormalPrior``):
their densities against ``torch.distributions``/scipy, their fan-ins worked by hand, their
argument checks at the boundaries, with the whole error messages."""

from __future__ import annotations

import math
import re

import pyro
import pyro.distributions as dist
import pytest
import torch
import torch.nn as nn
from scipy import stats

import bnn_pyro as bp
from bnn_pyro.priors import ScaleMixtureNormal, prior_from_config
from bnn_pyro.weight_distributions import SharedNormal

CPU = torch.device("cpu")
W = torch.linspace(-3.0, 3.0, 13, dtype=torch.float64)


# --- IIDPrior ---------------------------------------------------------------------------------


def test_an_iid_normal_prior_scores_weights_like_torchs_normal():
    """A Normal prior is built as the fast ``SharedNormal``: the same ``loc``/``scale`` and the
    same density as ``torch.distributions.Normal(0.5, 2)``, in the net's dtype."""
    d = bp.IIDPrior(dist.Normal(0.5, 2.0)).distribution(
        nn.Linear(2, 3), "weight", CPU, torch.float64
    )
    assert type(d) is SharedNormal and d.loc.dtype == torch.float64
    assert (float(d.loc), float(d.scale)) == (0.5, 2.0)
    assert torch.allclose(d.log_prob(W), torch.distributions.Normal(0.5, 2.0).log_prob(W))


def test_an_iid_laplace_prior_scores_weights_like_scipys_laplace():
    """Any other distribution is rebuilt on the net's dtype with the same parameters:
    ``Laplace(0.2, 0.5)``'s log density is scipy's ``laplace.logpdf(w, 0.2, 0.5)``."""
    prior = bp.IIDPrior(dist.Laplace(0.2, 0.5))
    d = prior.distribution(nn.Linear(2, 3), "weight", CPU, torch.float64)
    assert type(d) is dist.Laplace and d.loc.dtype == torch.float64
    expected = torch.from_numpy(stats.laplace.logpdf(W.numpy(), loc=0.2, scale=0.5))
    assert torch.allclose(d.log_prob(W), expected)
    assert repr(prior) == f"IIDPrior({prior.base!r})"


def test_an_iid_prior_refuses_what_is_not_a_distribution():
    with pytest.raises(
        TypeError, match=r"^distribution must be a torch/pyro Distribution, got float$"
    ):
        bp.IIDPrior(1.0)


def test_an_iid_prior_refuses_batched_or_multivariate_distributions_naming_the_shapes():
    msg = (
        "distribution must be univariate with scalar parameters (batch_shape=(), event_shape=()), "
        "got batch_shape={}, event_shape={}"
    )
    with pytest.raises(ValueError, match="^" + re.escape(msg.format("(2,)", "()")) + "$"):
        bp.IIDPrior(dist.Normal(torch.zeros(2), 1.0))
    with pytest.raises(ValueError, match="^" + re.escape(msg.format("()", "(2,)")) + "$"):
        bp.IIDPrior(dist.MultivariateNormal(torch.zeros(2), torch.eye(2)))


def test_an_iid_prior_refuses_non_finite_parameters_naming_them():
    with pytest.raises(
        ValueError, match=r"^distribution must have finite parameters, got \{'loc': inf\}$"
    ):
        bp.IIDPrior(dist.Normal(math.inf, 1.0, validate_args=False))
    with pytest.raises(
        ValueError, match=r"^distribution must have finite parameters, got \{'scale': nan\}$"
    ):
        bp.IIDPrior(dist.Normal(0.0, math.nan, validate_args=False))


def test_an_iid_prior_refuses_parameters_outside_their_support_naming_the_constraint():
    msg = (
        "distribution has parameters outside their support, got {'scale': -1.0} "
        "(Normal's ['scale'] must satisfy ['GreaterThan(lower_bound=0.0)'])"
    )
    with pytest.raises(ValueError, match="^" + re.escape(msg) + "$"):
        bp.IIDPrior(dist.Normal(0.0, -1.0, validate_args=False))


def test_an_iid_prior_with_a_zero_scale_is_refused_but_a_tiny_one_is_accepted():
    """``scale > 0`` is a strict bound: 0 is outside the support, 1e-30 inside."""
    with pytest.raises(ValueError, match=r"^distribution has parameters outside their support"):
        bp.IIDPrior(dist.Normal(0.0, 0.0, validate_args=False))
    assert float(bp.IIDPrior(dist.Normal(0.0, 1e-30)).base.scale) == pytest.approx(1e-30)


def test_an_iid_prior_refuses_a_distribution_off_the_real_line():
    with pytest.raises(ValueError, match=r"^a weight prior needs support on the real line, got "):
        bp.IIDPrior(dist.Gamma(1.0, 1.0))


def test_an_iid_prior_rebuilds_from_its_config_with_the_same_parameters():
    """The checkpoint holds the class name and every ``arg_constraints`` parameter; rebuilding
    gives the same distribution class with the same values (the scale mixture included)."""
    for base, params in [
        (dist.StudentT(3.0, 0.5, 2.0), {"df": 3.0, "loc": 0.5, "scale": 2.0}),
        (
            ScaleMixtureNormal(0.25, 1.0, 0.125),
            {"mixture_weight": 0.25, "scale1": 1.0, "scale2": 0.125},
        ),
    ]:
        config = bp.IIDPrior(base, exclude="*.bias").config()
        assert config["distribution"] == type(base).__name__
        assert {k: float(v) for k, v in config["params"].items()} == params
        rebuilt = prior_from_config(config)
        assert type(rebuilt.base) is type(base) and rebuilt.exclude == ("*.bias",)
        assert {k: float(getattr(rebuilt.base, k)) for k in params} == params


def test_an_iid_prior_config_with_an_unknown_distribution_is_refused():
    config = bp.IIDPrior(dist.Normal(0.0, 1.0)).config()
    config["distribution"] = "NoSuchDistribution"
    with pytest.raises(
        ValueError, match=r"^unknown prior distribution 'NoSuchDistribution' in checkpoint$"
    ):
        prior_from_config(config)


# --- ScaleMixturePrior ------------------------------------------------------------------------


def test_the_scale_mixture_prior_density_is_the_two_normal_mixture():
    """``log(pi N(w; 0, s1) + (1 - pi) N(w; 0, s2))`` with scipy's Normal densities."""
    d = bp.ScaleMixturePrior(0.25, 2.0, 0.1).distribution(
        nn.Linear(2, 3), "weight", CPU, torch.float64
    )
    assert d.scale1.dtype == torch.float64
    x = W.numpy()
    expected = torch.log(
        torch.from_numpy(0.25 * stats.norm.pdf(x, scale=2.0) + 0.75 * stats.norm.pdf(x, scale=0.1))
    )
    assert torch.allclose(d.log_prob(W), expected)


def test_the_scale_mixture_prior_skips_validation_even_when_pyro_validates():
    """Its parameters were checked once, in the constructor: the distribution of every step is
    built unvalidated (``log_prob`` is the prior term of every step), so even under Pyro's
    validation a NaN weight gives a NaN score instead of a validation error."""
    with pyro.validation_enabled(True):
        d = bp.ScaleMixturePrior().distribution(nn.Linear(2, 3), "weight", CPU, torch.float32)
        assert d._validate_args is False
        assert bool(torch.isnan(d.log_prob(torch.tensor(math.nan))))


def test_the_scale_mixture_weight_must_lie_strictly_between_zero_and_one():
    for bad in (0, 0.0, 1, 1.0, -0.5, "0.5"):
        with pytest.raises(
            ValueError, match=rf"^mixture_weight must be in \(0, 1\), got {re.escape(repr(bad))}$"
        ):
            bp.ScaleMixturePrior(bad)
    assert bp.ScaleMixturePrior(1e-9).mixture_weight == 1e-9
    assert bp.ScaleMixturePrior(1 - 1e-9).mixture_weight == 1 - 1e-9


def test_the_scale_mixture_scales_must_be_positive():
    with pytest.raises(ValueError, match=r"^scale1 must be a finite float > 0\.0, got 0\.0$"):
        bp.ScaleMixturePrior(0.5, 0.0, 0.1)
    with pytest.raises(ValueError, match=r"^scale2 must be a finite float > 0\.0, got 0\.0$"):
        bp.ScaleMixturePrior(0.5, 1.0, 0.0)
    prior = bp.ScaleMixturePrior(0.5, 1e-9, 1e-9)
    assert (prior.scale1, prior.scale2) == (1e-9, 1e-9)


def test_the_scale_mixture_defaults_are_the_papers():
    """pi = 1/2, s1 = 1 = exp(-0), s2 = exp(-6), from Blundell et al.'s search grid."""
    prior = bp.ScaleMixturePrior()
    assert prior.config()["mixture_weight"] == 0.5
    assert (prior.scale1, prior.scale2) == (1.0, math.exp(-6))


# --- LayerwiseNormalPrior ---------------------------------------------------------------------


def test_a_grouped_convolutions_fans_count_one_group_of_channels():
    """``Conv2d(4, 8, 3, groups=2)``: each output sees 4 / 2 = 2 input channels of a 3 x 3
    kernel, fan-in 18, and each input feeds 8 / 2 = 4 outputs, fan-out 36; so the Xavier std is
    ``sqrt(2 / 54)``, Radford's ``1 / sqrt(18)``, Kaiming's ``sqrt(2 / 18) = 1 / 3``."""
    conv = nn.Conv2d(4, 8, 3, groups=2)
    assert math.isclose(bp.LayerwiseNormalPrior("xavier").std(conv), math.sqrt(2 / 54))
    assert math.isclose(bp.LayerwiseNormalPrior("radford").std(conv), 1 / math.sqrt(18))
    assert math.isclose(bp.LayerwiseNormalPrior("kaiming").std(conv), 1 / 3)
    conv1d = nn.Conv1d(3, 5, 4)  # fan-in 3 * 4 = 12, fan-out 5 * 4 = 20
    assert math.isclose(bp.LayerwiseNormalPrior("xavier").std(conv1d), math.sqrt(2 / 32))


def test_the_xavier_std_uses_both_fans_of_a_linear_layer():
    """``Linear(10, 30)``: ``sqrt(2 / (10 + 30)) = sqrt(1 / 20)``, times the gain 3."""
    assert math.isclose(
        bp.LayerwiseNormalPrior("xavier", gain=3.0).std(nn.Linear(10, 30)), 3 * math.sqrt(0.05)
    )


def test_the_layerwise_prior_is_a_zero_mean_normal_with_that_std():
    """``Linear(25, 2)`` with Radford's method and gain 2: std ``2 / sqrt(25) = 0.4``."""
    d = bp.LayerwiseNormalPrior("radford", gain=2.0).distribution(
        nn.Linear(25, 2), "bias", CPU, torch.float64
    )
    assert d.loc.dtype == torch.float64
    assert torch.allclose(d.log_prob(W), torch.distributions.Normal(0.0, 0.4).log_prob(W))


def test_the_layerwise_prior_refuses_a_layer_without_a_fan_in():
    msg = (
        "cannot tell the fan-in of a LayerNorm; LayerwiseNormalPrior supports linear and "
        "convolutional layers"
    )
    with pytest.raises(TypeError, match="^" + re.escape(msg) + "$"):
        bp.LayerwiseNormalPrior().std(nn.LayerNorm(3))


def test_the_layerwise_prior_checks_its_method_and_gain():
    msg = "method must be one of ('radford', 'xavier', 'kaiming'), got 'he'"
    with pytest.raises(ValueError, match="^" + re.escape(msg) + "$"):
        bp.LayerwiseNormalPrior("he")
    with pytest.raises(ValueError, match=r"^gain must be a finite float > 0\.0, got 0\.0$"):
        bp.LayerwiseNormalPrior(gain=0.0)
    assert bp.LayerwiseNormalPrior(gain=1e-9).gain == 1e-9
    prior = bp.LayerwiseNormalPrior()
    assert (prior.method, prior.gain) == ("radford", 1.0)
