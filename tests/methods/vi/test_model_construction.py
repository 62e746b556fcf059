"""``VariationalBNN``'s constructor: each refusal with its whole message, the defaults, and
the guide it builds starting at the net's own weights."""

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
