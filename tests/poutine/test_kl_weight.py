"""``KLWeight``: beta on the log-density of every latent site, composed with other scales."""

import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import pytest

from bnn_pyro.poutine.kl_weight import KLWeight


def _model() -> None:
    pyro.sample("w", dist.Normal(0.0, 1.0))
    pyro.sample("y", dist.Normal(0.0, 1.0), obs=0.5)


@pytest.mark.parametrize("weight", [0, 0.25, 3.0])
def test_latent_sites_are_scaled_by_beta_and_observed_ones_are_not(weight):
    """Beta 0 (a KL warm-up's first step) is allowed: the latents then weigh nothing."""
    with KLWeight(weight):
        trace = poutine.trace(_model).get_trace()
    assert trace.nodes["w"]["scale"] == weight and trace.nodes["y"]["scale"] == 1.0


def test_beta_multiplies_a_scale_already_on_the_site():
    """Around a ``poutine.scale(4)`` (which the site meets first) beta multiplies that scale:
    0.5 * 4 = 2."""
    with KLWeight(0.5), poutine.scale(scale=4.0):
        trace = poutine.trace(_model).get_trace()
    assert trace.nodes["w"]["scale"] == 2.0 and trace.nodes["y"]["scale"] == 4.0


@pytest.mark.parametrize("bad", [-1.0, "1", None])
def test_a_weight_that_is_not_a_float_at_least_zero_is_refused(bad):
    with pytest.raises(ValueError) as caught:
        KLWeight(bad)
    assert str(caught.value) == f"kl_weight must be a float >= 0, got {bad!r}"
