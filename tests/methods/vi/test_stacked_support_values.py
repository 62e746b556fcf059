"""Which VariationalBNN models ``fit_stacked`` trains as one (``why_not_stacked_vi``) and with
which objective (``members_elbo``): each refusal checked by its whole message, each accepted
stack checked to run.

The stacked loss (``StackedVI``) runs the members' nets on the draws of their Bayesian sites
alone, through a twin whose ``nn.Linear`` / ``nn.Conv2d`` layers take ``(K, ...)`` weights. A net
with point-estimate parameters, or with a Bayesian site in any other layer, was once stacked
anyway and ended elsewhere than its own fit with no error (a LayerNorm net: 0.03 apart after
two epochs, where the stacked fit otherwise matches to float round-off); such nets are now
refused by name.
"""

from __future__ import annotations

import pyro.distributions as dist
import pytest
import torch
import torch.nn as nn
from stacked_vi_helpers import Gain

import bnn_pyro as bp
from bnn_pyro.methods.vi.stacked_support import members_elbo, why_not_stacked_vi
from bnn_pyro.stacking import fit_stacked

LIKELIHOODS = (
    "the likelihoods must be of one class with one setting (a learned noise, a heteroscedastic "
    "min_scale)"
)
POINT = (
    "the nets hold point-estimate parameters or buffers ({!r}, ...): the stacked fit trains the "
    "Bayesian sites only, fit each model with its own fit"
)
LAYER = (
    "the Bayesian site {!r} is in a layer the stacked net cannot run for several members at "
    "once (nn.Linear and nn.Conv2d can)"
)


def _vi(net=None, likelihood=None, **kw):
    net = bp.nn.mlp(4, [6], 1) if net is None else net
    return bp.VariationalBNN(net, bp.Gaussian(0.3) if likelihood is None else likelihood, **kw)


class _MyVI(bp.VariationalBNN):
    """A subclass: its own fit may do what the stacked fit does not."""


class _MyGaussian(bp.Gaussian):
    """A user's Gaussian that observes its rows by code of its own: the stacked loss cannot
    know its density."""

    def observe(self, f, y, latents, dataset_size=None):
        return super().observe(f, y, latents, dataset_size)


class _OwnLatent(bp.Gaussian):
    """A user's Gaussian drawing a latent site of its own (its layout for K models unknown)."""

    def sample_latents(self, f):
        return super().sample_latents(f)


class _Shift(nn.Module):
    """Adds a buffer: a tensor of the net that is not a Bayesian site."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("shift", torch.tensor([0.5]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.shift


def test_one_or_several_plain_models_are_accepted():
    """One member is a stack too (``fit_stacked`` of one model is that model's fit); so are
    models that share a learned noise, and conv layers under the weight-space estimator (the
    conv rule is local reparameterization's)."""
    assert why_not_stacked_vi([_vi()]) is None
    assert why_not_stacked_vi([_vi(), _vi(), _vi()]) is None
    conv = lambda: nn.Sequential(nn.Conv2d(1, 2, 3))  # noqa: E731
    assert why_not_stacked_vi([_vi(conv()), _vi(conv())]) is None
    learned = [_vi(likelihood=bp.Gaussian("learned")) for _ in range(2)]
    assert why_not_stacked_vi(learned) is None
    classes = [_vi(bp.nn.mlp(4, [6], 3), bp.Categorical()) for _ in range(2)]
    assert why_not_stacked_vi(classes) is None
    assert why_not_stacked_vi([_vi(likelihood=bp.Bernoulli())]) is None


def test_what_is_not_the_variational_bnn_class_is_refused():
    """No models, a subclass of VariationalBNN, or another method: the same one message."""
    message = "fit_stacked trains VariationalBNN models (the class itself)"
    assert why_not_stacked_vi([]) == message
    assert why_not_stacked_vi([_vi(), _MyVI(bp.nn.mlp(4, [6], 1), bp.Gaussian(0.3))]) == message
    assert why_not_stacked_vi([bp.MCDropout(bp.nn.mlp(4, [6], 1, dropout=0.1))]) == message


def test_nets_of_other_shapes_are_refused():
    """Another width (other site shapes) or another depth (other site names)."""
    message = "the models differ in their nets or their Bayesian sites"
    assert why_not_stacked_vi([_vi(), _vi(bp.nn.mlp(4, [7], 1))]) == message
    assert why_not_stacked_vi([_vi(), _vi(bp.nn.mlp(4, [6, 6], 1))]) == message
    assert why_not_stacked_vi([_vi(bp.nn.mlp(4, [6, 6], 1)), _vi()]) == message


def test_nets_of_other_activations_are_refused():
    """The same sites and shapes, another activation: the stacked net runs the first model's
    forward for all, so the tanh model would train through a ReLU (it once did, silently)."""
    tanh = _vi(bp.nn.mlp(4, [6], 1, activation="tanh"))
    assert why_not_stacked_vi([_vi(), tanh]) == (
        "the models' nets differ in their layers (an activation, a dropout rate, ...)"
    )
    assert why_not_stacked_vi([_vi(), _vi()]) is None


@pytest.mark.parametrize(
    "likelihoods",
    [
        [bp.Gaussian(0.3), bp.Gaussian("learned")],  # one noise fixed, one learned
        [bp.Gaussian("learned"), bp.Gaussian(0.3)],
        [bp.Gaussian(0.3), bp.Bernoulli()],  # two kinds
        [bp.Gaussian(0.3), _MyGaussian(0.3)],  # a class and its subclass
    ],
    ids=["fixed, learned", "learned, fixed", "gaussian, bernoulli", "class, subclass"],
)
def test_other_likelihoods_are_refused(likelihoods):
    models = [_vi(likelihood=lik) for lik in likelihoods]
    assert why_not_stacked_vi(models) == LIKELIHOODS


@pytest.mark.parametrize(
    "likelihood, message",
    [
        (
            _MyGaussian(0.3),
            "_MyGaussian defines its own observe(), which the plain-torch objective does not read",
        ),
        (
            _OwnLatent("learned"),
            "_OwnLatent draws latent sites of its own, which a stacked fit does not lay out for "
            "several models",
        ),
    ],
)
def test_a_likelihood_the_stacked_loss_cannot_read_is_refused_by_its_class(likelihood, message):
    """The rule of the single fit's engine (``why_not_plain``), read off the class: one that
    scores or observes its rows by code of its own, or draws latents of its own."""
    assert why_not_stacked_vi([_vi(likelihood=likelihood) for _ in range(2)]) == message


def test_heteroscedastic_floors_must_agree():
    het = lambda m: _vi(bp.nn.mlp(4, [6], 2), bp.HeteroscedasticGaussian(m))  # noqa: E731
    assert why_not_stacked_vi([het(1e-3), het(1e-3)]) is None
    assert why_not_stacked_vi([het(1e-3), het(1e-2)]) == LIKELIHOODS


def test_estimators_must_agree_and_conv_layers_use_the_weight_space_one():
    """Local reparameterization (or flipout) for all or none; with it, no conv layers."""
    assert why_not_stacked_vi([_vi(local_reparameterization=True)] * 2) is None
    flip = _vi(local_reparameterization="flipout")
    assert why_not_stacked_vi([flip, _vi(local_reparameterization="flipout")]) is None
    differ = "the models differ in local_reparameterization"
    assert why_not_stacked_vi([_vi(local_reparameterization=True), _vi()]) == differ
    assert why_not_stacked_vi([flip, _vi(local_reparameterization=True)]) == differ
    conv = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(8, 1))
    lrt_conv = _vi(conv, local_reparameterization=True)
    assert (
        why_not_stacked_vi([lrt_conv]) == "local reparameterization of conv layers is not stacked"
    )


def test_priors_with_latents_or_learned_parameters_are_refused():
    hier = _vi(prior=bp.HierarchicalNormalPrior())
    site = hier.prior_sites[0]
    assert why_not_stacked_vi([_vi(), hier]) == (
        f"a prior with latent sites of its own ({site!r}, ...) is not stacked: fit each model "
        "with its own fit"
    )
    learned = "a learned prior is not stacked"
    assert why_not_stacked_vi([_vi(), _vi(prior=bp.LearnedNormalPrior())]) == learned


def test_other_guides_and_hooked_nets_are_refused():
    guide = "the guide must be the library's mean-field guide ('meanfield')"
    assert why_not_stacked_vi([_vi(), _vi(guide="normal")]) == guide
    hooked = _vi()
    hooked.net[0].register_forward_pre_hook(lambda module, inputs: None)
    assert why_not_stacked_vi([_vi(), hooked]) == (
        "the nets have forward or backward hooks (the stacked copy would skip them)"
    )


def test_point_estimate_parameters_are_refused_by_name():
    """A LayerNorm's affine parameters, or biases left out of the prior, are point estimates:
    the stacked net does not hold them per member, so the stack is refused naming the first."""
    norm = lambda: nn.Sequential(nn.Linear(4, 6), nn.LayerNorm(6), nn.Linear(6, 1))  # noqa: E731
    assert why_not_stacked_vi([_vi(norm()), _vi(norm())]) == POINT.format("1.weight")
    no_bias = bp.IIDPrior(dist.Normal(0.0, 1.0), exclude="*.bias")
    assert why_not_stacked_vi([_vi(prior=no_bias)]) == POINT.format("0.bias")
    shifted = nn.Sequential(nn.Linear(4, 1), _Shift())
    assert why_not_stacked_vi([_vi(shifted)]) == POINT.format("1.shift")


def test_sites_outside_linear_and_conv2d_layers_are_refused_by_name():
    conv1d = nn.Sequential(nn.Conv1d(2, 3, 3), nn.Flatten(), nn.Linear(18, 1))
    assert why_not_stacked_vi([_vi(conv1d)]) == LAYER.format("net.0.weight")
    gain = nn.Sequential(nn.Linear(4, 1), Gain())
    prior = bp.IIDPrior(dist.Normal(0.0, 1.0), types=(nn.Linear, Gain))
    assert why_not_stacked_vi([_vi(gain, prior=prior)]) == LAYER.format("net.1.g")


def test_a_layernorm_net_is_refused_before_any_work():
    """The regression: fit_stacked of LayerNorm nets raised nothing and trained the members
    elsewhere than their own fits; now it refuses before setting up any guide."""
    torch.manual_seed(0)
    X = torch.randn(32, 4)
    models = [_vi(nn.Sequential(nn.Linear(4, 6), nn.LayerNorm(6), nn.Linear(6, 1)))] * 2
    before = [p.detach().clone() for p in models[0].parameters()]
    with pytest.raises(ValueError) as info:
        fit_stacked(models, X, X[:, :1], seeds=[0, 1], epochs=2, batch_size=16, progress=False)
    assert str(info.value) == "fit_stacked: " + POINT.format("1.weight")
    after = list(models[0].parameters())
    assert len(after) == len(before)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert not models[0].is_fitted()


def test_the_members_objective_is_their_own_and_must_be_one():
    """``members_elbo``: the one ``elbo=`` the models were built with ("trace" when none was
    given, for no models, and for a model without one); two different ones are refused naming
    both, sorted."""
    assert members_elbo([]) == "trace"
    assert members_elbo([_vi(), _vi()]) == "trace"
    assert members_elbo([_vi(elbo="alpha")]) == "alpha"
    # a model without an elbo= of its own (another method) counts as "trace", so that
    # fit_stacked_vi goes on to name what it is (not a VariationalBNN)
    assert members_elbo([bp.MCDropout(bp.nn.mlp(4, [6], 1, dropout=0.1))]) == "trace"
    with pytest.raises(ValueError) as info:
        members_elbo([_vi(elbo="trace"), _vi(elbo="alpha"), _vi()])
    assert str(info.value) == (
        "the models' own objectives (elbo=) differ: ['alpha', 'trace']; pass elbo="
    )
