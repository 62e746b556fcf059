"""``VariationalBNN``'s constructor: each refusal with its whole message, the defaults, and
the guide it builds starting at the net's own weights."""

import pyro
import pytest
import torch

import bnn_pyro as bp

NET = bp.nn.mlp(2, [3], 1)
ESTIMATORS = "('local', 'flipout')"


@pytest.mark.parametrize(
    "change, error, message",
    [
        (dict(elbo="x"), ValueError,
         "elbo must be one of ('trace', 'meanfield', 'stl', 'alpha'), got 'x'"),
        (dict(net=[1]), TypeError, "net must be a torch.nn.Module, got list"),
        (dict(likelihood="g"), TypeError,
         "likelihood must be a bnn_pyro.likelihoods.Likelihood (e.g. Gaussian(), Categorical()), "
         "got str"),
        (dict(prior="p"), TypeError, "prior must be a bnn_pyro.priors.Prior, got str"),
        (dict(init_scale=0.0), ValueError, "init_scale must be a finite float > 0.0, got 0.0"),
        (dict(num_samples=0), ValueError, "num_samples must be an int >= 1, got 0"),
        (dict(local_reparameterization=3), TypeError,
         f"local_reparameterization must be a bool or one of {ESTIMATORS}, got int (3)"),
        (dict(local_reparameterization="dropout"), ValueError,
         f"local_reparameterization must be a bool or one of {ESTIMATORS}, got 'dropout'"),
        (dict(local_reparameterization=True, guide="diagonal"), ValueError,
         "local_reparameterization needs a guide that draws each weight from its own Normal "
         "('meanfield' or 'normal'), got guide='diagonal'"),
    ],
)  # fmt: skip
def test_each_bad_argument_is_refused_by_name(change, error, message):
    args = dict(net=NET, likelihood=bp.Gaussian(0.5))
    with pytest.raises(error) as caught:
        bp.VariationalBNN(**{**args, **change})
    assert str(caught.value) == message


def test_the_defaults():
    """A standard-normal prior on every weight, the mean-field guide at scale 0.01, the ELBO,
    weights drawn (no local reparameterization) and 100 predictive samples."""
    bnn = bp.VariationalBNN(NET, bp.Gaussian(0.5))
    assert repr(bnn.prior) == "IIDPrior(Normal(loc: 0.0, scale: 1.0))"
    assert (bnn.guide_spec, bnn.init_scale, bnn.default_elbo) == ("meanfield", 0.01, "trace")
    assert bnn.local_reparameterization is None and bnn.num_samples == 100


@pytest.mark.parametrize("value, estimator", [(True, "local"), ("local", "local"),
                                              ("flipout", "flipout"), (False, None)])  # fmt: skip
def test_local_reparameterization_is_read_as_an_estimator_name(value, estimator):
    bnn = bp.VariationalBNN(NET, bp.Gaussian(0.5), local_reparameterization=value)
    assert bnn.local_reparameterization == estimator


def test_the_guide_starts_at_the_nets_own_weights_and_at_init_scale():
    """The mean-field guide's means are the net's initial weights (the net is copied, not
    re-drawn) and every scale is ``init_scale``."""
    torch.manual_seed(0)
    net = bp.nn.mlp(2, [3], 1)
    bnn = bp.VariationalBNN(net, bp.Gaussian(0.5), init_scale=0.05)
    x = torch.randn(4, 2)
    bnn.setup_guide(x, torch.zeros(4))
    for name, q in bnn.guide.distributions().items():
        normal = q.base_dist if hasattr(q, "base_dist") else q
        weight = net.get_parameter(name.removeprefix("net."))
        torch.testing.assert_close(normal.loc.detach(), weight.detach())
        torch.testing.assert_close(normal.scale.detach(), torch.full_like(weight, 0.05))


def test_an_autoguides_parameters_live_in_the_models_own_param_store():
    """Every guide but the mean-field one runs in the model's param store: inside
    ``param_scope()``, ``pyro.param(name)`` is the tensor the guide trains, and Pyro's global
    store is left empty (a guide given a store of its own would hide its parameters there)."""
    pyro.clear_param_store()
    bnn = bp.VariationalBNN(NET, bp.Gaussian(0.5), guide="normal")
    bnn.setup_guide(torch.randn(4, 2), torch.zeros(4))
    names = bnn.param_scope().names()
    assert sorted(names) == sorted(
        f"AutoNormal.{kind}.net.{layer}.{p}"
        for kind in ("locs", "scales")
        for layer in (0, 2)
        for p in ("weight", "bias")
    )
    with bnn.param_scope():
        loc = pyro.param("AutoNormal.locs.net.0.weight")
    assert loc.unconstrained() is bnn.guide.autoguide.locs.get_parameter(
        "net.0.weight_unconstrained"
    )
    assert list(pyro.get_param_store().keys()) == []


def test_fast_loss_by_default_is_the_elbo_with_one_draw():
    """``fast_loss()`` with no arguments is the plain ELBO (``Trace_ELBO``'s form, one draw per
    step), not the alpha energy's several particles, which the ELBO refuses."""
    bnn = bp.VariationalBNN(NET, bp.Gaussian(0.5))
    bnn.setup_guide(torch.randn(4, 2), torch.zeros(4))
    loss = bnn.fast_loss()
    assert (loss.objective.mode, loss.objective.particles) == ("trace", 0)


def test_fast_loss_with_alpha_needs_its_particles():
    """The alpha energy has no default draw count in ``fast_loss`` (``fit`` passes its own):
    without ``particles`` it is refused, naming the count it got (none: 0)."""
    bnn = bp.VariationalBNN(NET, bp.Gaussian(0.5))
    bnn.setup_guide(torch.randn(4, 2), torch.zeros(4))
    with pytest.raises(ValueError, match=r"^num_particles must be an int >= 2, got 0$"):
        bnn.fast_loss(alpha=0.5)
    assert bnn.fast_loss(alpha=0.5, particles=3).objective.particles == 3
