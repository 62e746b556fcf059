"""``VariationalBNN``: the closed-form KL and its refusals, the guide's name as saved, the
settings a checkpoint holds and how an older file (without ``elbo``) loads, each refusal with
its whole message."""

import functools

import pyro.distributions as dist
import pyro.poutine as poutine
import pytest
import torch
import torch.nn as nn
from pyro.infer.autoguide import AutoNormal

import bnn_pyro as bp

G = bp.Gaussian(0.5)


def _fitted(**options) -> bp.VariationalBNN:  # noqa: ANN003
    torch.manual_seed(0)
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [3], 1), G, **options)
    x = torch.randn(8, 2, dtype=bnn.dtype)
    bnn.fit(x, x.sum(-1), epochs=1, progress=False, seed=0)
    return bnn


def test_the_kl_of_a_float64_model_is_the_closed_form_in_float64():
    """``KL(N(m, s²) || N(0, 1))`` summed over every weight, from the guide's means and scales,
    in the model's dtype (a float32 probe row would not run through a float64 net)."""
    torch.manual_seed(0)
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [3], 1).double(), G)
    x = torch.randn(8, 2, dtype=torch.float64)
    bnn.fit(x, x.sum(-1), epochs=1, progress=False, seed=0)
    want = 0.0
    for q in bnn.guide.distributions().values():
        m, s = q.base_dist.loc.detach(), q.base_dist.scale.detach()
        want += float((-s.log() + (s.square() + m.square()) / 2 - 0.5).sum())
    got = bnn.kl_divergence()
    assert got.dtype == torch.float64
    assert float(got) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: bp.VariationalBNN(bp.nn.mlp(2, [3], 1), G),
         "kl_divergence needs a fitted mean-field guide"),
        (lambda: _fitted(guide="normal"), "kl_divergence needs a fitted mean-field guide"),
        (lambda: _fitted(prior=bp.IIDPrior(dist.StudentT(3.0, 0.0, 1.0))),
         "no closed-form KL between the guide's Independent and the prior's Independent at "
         "'net.0.weight' (a prior with latent scales has none): the ELBO's Monte Carlo KL (fit's "
         "default elbo='trace') covers it"),
    ],
)  # fmt: skip
def test_the_kl_is_refused_where_there_is_no_closed_form(make, message):
    bnn = make()
    with pytest.raises(NotImplementedError) as caught:
        bnn.kl_divergence()
    assert str(caught.value) == message


def test_kl_weight_two_doubles_the_weight_sites():
    """The model's ``kl_weight`` scales every weight site's log-density (here 2)."""
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [3], 1), G)
    trace = poutine.trace(bnn.model).get_trace(torch.randn(4, 2), kl_weight=2.0)
    assert {trace.nodes[name]["scale"] for name in bnn.site_names} == {2.0}


@pytest.mark.parametrize(
    "guide, spec",
    [("normal", "normal"), (AutoNormal, "AutoNormal"), (functools.partial(AutoNormal), "custom")],
)
def test_the_guide_is_named_by_its_name_its_class_or_custom(guide, spec):
    assert bp.VariationalBNN(bp.nn.mlp(2, [3], 1), G, guide=guide).guide_spec == spec


def test_only_a_named_guide_can_be_saved():
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [3], 1), G, guide=AutoNormal)
    with pytest.raises(ValueError) as caught:
        bnn.checkpoint_config()
    assert (
        str(caught.value) == "only models built with a named guide (e.g. 'meanfield') can be saved"
    )


def test_the_checkpoint_config_of_the_defaults():
    config = bp.VariationalBNN(bp.nn.mlp(2, [3], 1), G).checkpoint_config()
    assert config["local_reparameterization"] is False
    assert (config["guide"], config["elbo"], config["dtype"]) == ("meanfield", "trace", "float32")


def test_a_config_loads_in_its_dtype_and_an_older_one_without_elbo_gets_the_elbo():
    options = dict(guide="normal", init_scale=0.05, num_samples=7, elbo="stl")
    config = bp.VariationalBNN(bp.nn.mlp(2, [3], 1).double(), G, **options).checkpoint_config()
    loaded = bp.VariationalBNN.from_checkpoint_config(bp.nn.mlp(2, [3], 1), config)
    assert loaded.dtype == torch.float64 and loaded.default_elbo == "stl"
    assert (loaded.guide_spec, loaded.init_scale, loaded.num_samples) == ("normal", 0.05, 7)
    older = {k: v for k, v in config.items() if k != "elbo"}
    assert bp.VariationalBNN.from_checkpoint_config(bp.nn.mlp(2, [3], 1), older).default_elbo == (
        "trace"
    )
    with pytest.raises(ValueError) as caught:
        bp.VariationalBNN.from_checkpoint_config(None, config)
    assert str(caught.value) == (
        "loading a VariationalBNN needs net=: a fresh instance of the saved architecture"
    )


def test_an_unsupported_layer_is_refused_naming_the_method():
    net = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3), nn.Linear(3, 1))
    with pytest.raises(ValueError) as caught:
        bp.VariationalBNN(net, G)
    assert str(caught.value) == (
        "VariationalBNN does not support BatchNorm1d at net.1: use nn.LayerNorm (no running "
        "statistics), or MCDropout/DeepEnsemble/SWAG, which keep batch norm"
    )


def test_the_weight_sites_are_named_under_net():
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [3], 1), G)
    assert bnn.site_names == ["net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"]


def test_the_kl_is_made_on_the_models_device_whatever_the_default_device():
    """Under a ``meta`` default device (a stand-in for a second device) the CPU model's KL is
    the same CPU number: a probe row or a running total made on the default device would make
    it ``meta``."""
    bnn = _fitted()
    want = bnn.kl_divergence()
    with torch.device("meta"):
        got = bnn.kl_divergence()
    assert got.device.type == "cpu"
    torch.testing.assert_close(got, want, rtol=0, atol=0)
