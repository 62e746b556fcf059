"""``LocalReparameterization``'s layer hook: which estimator it runs, with which ``loc`` and
``scale`` of the weight and of the bias, over which particle dims, for linear and conv layers;
where on Pyro's stack it finds the guide; its refusals, each with its whole message."""

import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import pytest
import torch
from pyro.infer import Trace_ELBO
from pyro.infer.autoguide import AutoDiagonalNormal

from bnn_pyro.guides import MeanFieldNormalGuide
from bnn_pyro.nn import Conv2d, mlp
from bnn_pyro.nn.pyro_net import make_bayesian_
from bnn_pyro.poutine import (
    LocalReparameterization,
    flipout_conv2d,
    flipout_linear,
    local_reparam_conv2d,
    local_reparam_linear,
)
from bnn_pyro.priors import IIDPrior

S = 3  # particles: every weight carries them as a leading dim


def _drawn(shape: tuple[int, ...], seed: int) -> tuple[torch.Tensor, ...]:
    """``(value (S, *shape), loc, scale)`` of a weight drawn from ``N(loc, scale)``."""
    g = torch.Generator().manual_seed(seed)
    loc, scale = torch.randn(shape, generator=g), 0.2 + torch.rand(shape, generator=g)
    return loc + scale * torch.randn(S, *shape, generator=g), loc, scale


def _registered(estimator: str, conv: bool, with_bias: bool = True):  # noqa: ANN202
    """A handler with a registered weight and (optionally) bias, and the tensors."""
    handler = LocalReparameterization(estimator)
    w, loc, scale = _drawn((3, 2, 3, 3) if conv else (2, 3), 1)
    b, b_loc, b_scale = _drawn((3,) if conv else (2,), 2)
    handler.register_weight(w, "w", loc, scale)
    if with_bias:
        handler.register_weight(b, "b", b_loc, b_scale)
    return handler, (w, loc, scale), (b, b_loc, b_scale)


def _hook_and_reference(handler, weight, bias, conv, reference):  # noqa: ANN001, ANN202
    """The hook's output on a batch (of images for ``conv``) and ``reference(x, layer)``, each
    from seed 0: a linear layer's ``(4, 3)`` rows, or a padded 3x3 conv's ``(4, 2, 5, 5)``."""
    layer = Conv2d(2, 3, 3, padding=1) if conv else None
    x = torch.randn(4, 2, 5, 5) if conv else torch.randn(4, 3)
    torch.manual_seed(0)
    got = handler.forward_layer(x, weight, bias, layer)
    torch.manual_seed(0)
    return got, reference(x, layer)


@pytest.mark.parametrize("conv", [False, True])
def test_local_runs_the_local_estimator_on_the_weights_and_the_biases_guides(conv):
    """Under one seed the hook's output is the local estimator's given the weight's and the
    bias's ``loc`` and ``scale`` (not their drawn values) and the S particles the weight
    carries."""
    handler, (w, loc, scale), (b, b_loc, b_scale) = _registered("local", conv)

    def local(x, layer):  # noqa: ANN001, ANN202
        if conv:
            return local_reparam_conv2d(x, loc, scale, b_loc, b_scale, layer, (S,))
        return local_reparam_linear(x, loc, scale, b_loc, b_scale, (S,))

    got, want = _hook_and_reference(handler, w, b, conv, local)
    assert got.shape[0] == S and handler.num_reparameterized == 1
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("conv", [False, True])
def test_flipout_runs_the_flipout_estimator_on_the_drawn_weight_and_bias(conv):
    """``estimator="flipout"``: the flipout estimator from the weight's ``loc`` and the drawn
    weight and bias (their perturbations), under one seed the same numbers."""
    handler, (w, loc, _), (b, _, _) = _registered("flipout", conv)

    def flipout(x, layer):  # noqa: ANN001, ANN202
        return flipout_conv2d(x, loc, w, b, layer) if conv else flipout_linear(x, loc, w, b)

    got, want = _hook_and_reference(handler, w, b, conv, flipout)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("conv", [False, True])
def test_a_bias_drawn_elsewhere_enters_as_its_value(conv):
    """A bias the handler did not see drawn (a point estimate) is added as it is, without a
    scale, to the local estimator's output."""
    handler, (w, loc, scale), (b, _, _) = _registered("local", conv, with_bias=False)

    def local(x, layer):  # noqa: ANN001, ANN202
        if conv:
            return local_reparam_conv2d(x, loc, scale, b, None, layer, (S,))
        return local_reparam_linear(x, loc, scale, b, None, (S,))

    got, want = _hook_and_reference(handler, w, b, conv, local)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_weight_drawn_elsewhere_is_left_to_the_layer():
    handler, _, _ = _registered("local", conv=False)
    assert handler.forward_layer(torch.randn(4, 3), torch.randn(2, 3), None, None) is None
    assert handler.num_reparameterized == 0


def _net_model(wrap_net: bool):  # noqa: ANN202
    net = mlp(3, [4], 1)
    make_bayesian_(net, IIDPrior(dist.Normal(0.0, 1.0)))

    def model(x, y=None):  # noqa: ANN001, ANN202
        if wrap_net:  # another messenger between the replay and the weight sites
            with poutine.scale(scale=1.0):
                f = net(x).squeeze(-1)
        else:
            f = net(x).squeeze(-1)
        extra = pyro.sample("extra", dist.Normal(0.0, 1.0))  # not in the guide below
        with pyro.plate("data", x.shape[0]):
            pyro.sample("y", dist.Normal(f + 0 * extra, 1.0), obs=y)

    guide = MeanFieldNormalGuide(poutine.block(model, hide=["extra"]), init_scale=0.1)
    return model, guide


def test_the_handler_finds_the_guide_below_other_messengers_and_skips_sites_it_lacks():
    """The weights are sampled inside another messenger (``poutine.scale``) and the model has
    a latent the guide does not draw: the handler still finds the replayed guide further
    down Pyro's stack for both layers, and leaves the missing site alone."""
    model, guide = _net_model(wrap_net=True)
    handler = LocalReparameterization()
    x, y = torch.randn(8, 3), torch.randn(8)
    with pytest.warns(UserWarning, match="Found vars in model but not guide"), handler:
        loss = Trace_ELBO().differentiable_loss(model, guide, x, y)
    assert torch.isfinite(loss) and handler.num_reparameterized == 2


def test_a_guide_without_normal_weight_sites_is_refused_naming_the_site_and_the_fix():
    pyro.clear_param_store()
    net = mlp(3, [4], 1)
    make_bayesian_(net, IIDPrior(dist.Normal(0.0, 1.0)))

    def model(x, y=None):  # noqa: ANN001, ANN202
        f = net(x).squeeze(-1)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("y", dist.Normal(f, 1.0), obs=y)

    guide = AutoDiagonalNormal(model)
    with pytest.raises(ValueError) as caught, LocalReparameterization():
        Trace_ELBO().differentiable_loss(model, guide, torch.randn(8, 3), torch.randn(8))
    # (Pyro appends the trace's shapes to an error raised inside a model)
    assert str(caught.value).startswith(
        "local reparameterization needs the weight site 'net.0.weight' drawn from a Normal guide "
        "site, but the guide draws it from Delta. Use the mean-field guide ('meanfield') or "
        "AutoNormal ('normal'), or turn local_reparameterization off"
    )


@pytest.mark.parametrize("label", ["value", "loc", "scale"])
def test_register_weight_names_the_argument_that_is_not_a_tensor(label):
    args = dict(value=torch.zeros(2, 3), loc=torch.zeros(2, 3), scale=torch.ones(2, 3))
    args[label] = [0.0]
    with pytest.raises(TypeError) as caught:
        LocalReparameterization().register_weight(name="w", **args)
    assert str(caught.value) == f"{label} of weight 'w' must be a tensor, got list"


def test_leaving_the_handler_removes_its_own_hook_and_no_other():
    """A hook added while the handler is on (a plain function, with no ``__self__``) stays
    when the handler leaves, and the handler's own hook, now below it, goes."""
    from bnn_pyro.nn.layers import LAYER_HOOKS

    def other(*args):  # noqa: ANN002, ANN202
        return None

    handler = LocalReparameterization()
    try:
        with handler:
            LAYER_HOOKS.append(other)
        assert LAYER_HOOKS == [other]
    finally:
        LAYER_HOOKS[:] = [h for h in LAYER_HOOKS if h is not other]


def test_the_handler_looks_past_a_users_own_replay_of_other_sites():
    """A user's ``poutine.replay`` inside the model, of a trace holding only another site, sits
    above the ELBO's replay of the guide: the weights are not in it, and the handler goes on
    down the stack to the guide's replay for both layers."""
    model, guide = _net_model(wrap_net=False)
    fixed = poutine.trace(lambda: pyro.sample("extra", dist.Normal(0.0, 1.0))).get_trace()

    def replayed(x, y=None):  # noqa: ANN001, ANN202
        return poutine.replay(model, trace=fixed)(x, y)

    handler = LocalReparameterization()
    x, y = torch.randn(8, 3), torch.randn(8)
    with pytest.warns(UserWarning, match="Found vars in model but not guide"), handler:
        Trace_ELBO().differentiable_loss(replayed, guide, x, y)
    assert handler.num_reparameterized == 2
