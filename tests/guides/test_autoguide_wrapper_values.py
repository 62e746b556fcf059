"""``AutoGuideWrapper``: what it does around a guide, checked value by value: the refusal of a
non-callable, the KL weight on the guide's latent sites (and none by default), the scope left
even when the guide raises, when a guide counts as ready, and the hand-written ``pyro.param``
tensors it holds as its own parameters (names, values, constraints, gradients)."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch
import torch.nn as nn
from pyro import poutine
from torch.distributions import constraints

from bnn_pyro.guides import AutoGuideWrapper


def _guide(x, y=None):  # noqa: ANN001, ANN202
    loc = pyro.param("layer.w_loc", torch.tensor(0.5))
    scale = pyro.param("w$scale", torch.tensor(0.2), constraint=constraints.positive)
    return pyro.sample("w", dist.Normal(loc, scale))


def test_a_guide_must_be_callable():
    with pytest.raises(TypeError, match="^a guide must be callable, got int$"):
        AutoGuideWrapper(5)


@pytest.mark.parametrize("kl_weight, scale", [(None, 1.0), (1.0, 1.0), (0.25, 0.25), (2.0, 2.0)])
def test_the_kl_weight_scales_the_guides_latent_sites(kl_weight, scale):
    wrapped = AutoGuideWrapper(_guide)
    kwargs = {} if kl_weight is None else {"kl_weight": kl_weight}
    trace = poutine.trace(wrapped).get_trace(torch.zeros(1), **kwargs)
    assert trace.nodes["w"]["scale"] == scale


def test_a_function_guide_is_ready_once_it_has_run():
    wrapped = AutoGuideWrapper(_guide)
    assert wrapped.ready is False
    wrapped(torch.zeros(1))
    assert wrapped.ready is True


def test_hand_written_params_become_the_wrappers_own_and_stay_in_its_scope():
    pyro.clear_param_store()
    wrapped = AutoGuideWrapper(_guide)
    wrapped(torch.zeros(1))
    params = dict(wrapped.named_parameters())
    # dots and dollars cannot name a module's parameter: each maps to one key
    assert sorted(params) == ["free_params.layer__w_loc", "free_params.w_scale"]
    assert all(p.requires_grad for p in params.values())
    assert params["free_params.layer__w_loc"].item() == 0.5
    # the scale is held unconstrained, as Pyro's store holds a constrained param
    assert params["free_params.w_scale"].item() == pytest.approx(float(torch.tensor(0.2).log()))
    with wrapped.scope:
        store = pyro.get_param_store()
        assert store._params["layer.w_loc"] is params["free_params.layer__w_loc"]
        assert store._constraints["w$scale"] is constraints.positive
        assert pyro.param("w$scale").item() == pytest.approx(0.2)
    assert "layer.w_loc" not in pyro.get_param_store()  # the global store is left alone
    # a second call adopts nothing new, and the values it draws from are the held ones
    with torch.no_grad():
        params["free_params.layer__w_loc"].fill_(3.0)
    trace = poutine.trace(wrapped).get_trace(torch.zeros(1))
    assert trace.nodes["w"]["fn"].loc.item() == 3.0
    assert sorted(dict(wrapped.named_parameters())) == sorted(params)


def test_a_gradient_of_the_guides_draw_reaches_the_held_parameters():
    wrapped = AutoGuideWrapper(_guide)
    wrapped(torch.zeros(1))
    trace = poutine.trace(wrapped).get_trace(torch.zeros(1))
    trace.nodes["w"]["value"].backward()
    grads = {n: p.grad for n, p in wrapped.named_parameters()}
    assert grads["free_params.layer__w_loc"].item() == 1.0  # d(loc + scale * eps) / d loc


def test_the_scope_is_left_when_a_module_guide_raises():
    class Failing(nn.Module):
        def forward(self, x, y=None):  # noqa: ANN001, ANN201
            pyro.param("inside", torch.tensor(1.0))
            raise RuntimeError("the guide failed")

    pyro.clear_param_store()
    outside = pyro.get_param_store()._params
    wrapped = AutoGuideWrapper(Failing())
    with pytest.raises(RuntimeError, match="the guide failed"):
        wrapped(torch.zeros(1))
    assert pyro.get_param_store()._params is outside
    assert "inside" not in pyro.get_param_store()


def test_a_parameter_already_held_by_a_module_is_left_and_the_free_ones_after_it_adopted():
    """A ``pyro.param`` whose value is an ``nn.Parameter`` (a module's own) stays its module's;
    the free tensors created after it in the store are still adopted."""
    owned = nn.Parameter(torch.tensor(1.0))

    def guide(x, y=None):  # noqa: ANN001, ANN202
        pyro.param("own", owned)
        pyro.param("free", torch.tensor(2.0))

    wrapped = AutoGuideWrapper(guide)
    wrapped(torch.zeros(1))
    assert list(dict(wrapped.named_parameters())) == ["free_params.free"]
    with wrapped.scope:
        assert pyro.get_param_store()._params["own"] is owned


def test_two_param_names_that_map_to_one_key_are_refused_by_name():
    def guide(x, y=None):  # noqa: ANN001, ANN202
        pyro.param("a.b", torch.tensor(1.0))
        pyro.param("a__b", torch.tensor(2.0))

    with pytest.raises(
        ValueError, match="^two pyro.param names of the guide map to one key 'a__b'$"
    ):
        AutoGuideWrapper(guide)(torch.zeros(1))
