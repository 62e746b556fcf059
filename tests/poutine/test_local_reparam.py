"""Local reparameterization and flipout: the estimators' moments, and the effect handler."""

import math

import pyro
import pyro.distributions as dist
import pytest
import torch
import torch.nn as nn
from pyro.infer import Predictive, Trace_ELBO
from pyro.infer.autoguide import AutoDiagonalNormal, AutoNormal

from bnn_pyro.elbos.trace import FastTrace_ELBO
from bnn_pyro.guides import MeanFieldNormalGuide
from bnn_pyro.nn import Conv2d, batched_conv2d, mlp
from bnn_pyro.nn.layers import LAYER_HOOKS
from bnn_pyro.nn.pyro_net import make_bayesian_
from bnn_pyro.poutine import (
    LocalReparameterization,
    flipout_conv2d,
    flipout_linear,
    local_reparam_conv2d,
    local_reparam_linear,
)
from bnn_pyro.priors import IIDPrior

N_DRAWS = 20000


@pytest.fixture(autouse=True)
def _seeded():
    state = torch.get_rng_state()
    torch.manual_seed(0)
    yield
    torch.set_rng_state(state)


def _check_moments(draws, mean, std):
    """Sample mean within 5 standard errors (std / sqrt(n)), sample std within 5 of its own
    (about std / sqrt(2 n) for a Gaussian, and the estimators' outputs are Gaussian here or a
    Gaussian mixture close to it): a false alarm has probability below 1e-5 per entry."""
    n = draws.shape[0]
    assert ((draws.mean(0) - mean).abs() < 5 * std / math.sqrt(n)).all()
    assert ((draws.std(0) - std).abs() < 5 * std / math.sqrt(n)).all()


def _linear_params():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 3, generator=g)
    loc, scale = torch.randn(2, 3, generator=g), 0.2 + torch.rand(2, 3, generator=g)
    b_loc, b_scale = torch.randn(2, generator=g), 0.2 + torch.rand(2, generator=g)
    mean = x @ loc.T + b_loc
    std = (x.square() @ scale.square().T + b_scale.square()).sqrt()
    return x, loc, scale, b_loc, b_scale, mean, std


# ------------------------------------------------------------------ the estimators
def test_local_reparam_linear_has_the_weight_space_moments():
    x, loc, scale, b_loc, b_scale, mean, std = _linear_params()
    draws = local_reparam_linear(x, loc, scale, b_loc, b_scale, sample_shape=(N_DRAWS,))
    assert draws.shape == (N_DRAWS, 4, 2)
    _check_moments(draws, mean, std)


def test_flipout_linear_has_the_weight_space_moments():
    x, loc, scale, b_loc, b_scale, mean, std = _linear_params()
    weight = loc + scale * torch.randn(N_DRAWS, 2, 3)
    bias = b_loc + b_scale * torch.randn(N_DRAWS, 2)
    draws = flipout_linear(x, loc, weight, bias)
    assert draws.shape == (N_DRAWS, 4, 2)
    _check_moments(draws, mean, std)


@pytest.mark.parametrize("estimator", ["local", "flipout", "weights"])
def test_estimators_decorrelate_examples_that_share_a_weight(estimator):
    x, loc, scale, *_ = _linear_params()
    x = x[:1].expand(2, 3)  # the same example twice
    weight = loc + scale * torch.randn(N_DRAWS, 1, 2, 3)
    if estimator == "local":
        draws = local_reparam_linear(x, loc, scale, sample_shape=(N_DRAWS,))
    elif estimator == "flipout":
        draws = flipout_linear(x, loc, weight)
    else:
        draws = torch.matmul(x, weight.squeeze(1).transpose(-1, -2))
    corr = torch.corrcoef(torch.stack([draws[:, 0, 0], draws[:, 1, 0]]))[0, 1]
    # weight-space sampling: one weight, identical outputs (corr 1). LRT: independent noise,
    # corr 0. Flipout: the two perturbations carry independent random output signs, so their
    # covariance is 0 as well. A correlation estimated from n draws has a sampling error of
    # about 1 / sqrt(n) = 0.007; 0.05 is 7 of them.
    if estimator == "weights":
        assert corr > 0.999
    else:
        assert abs(corr) < 0.05


def _conv_params():
    g = torch.Generator().manual_seed(2)
    conv = Conv2d(2, 3, 3, padding=1, stride=2)
    x = torch.randn(2, 2, 5, 5, generator=g)
    loc, scale = torch.randn(3, 2, 3, 3, generator=g), 0.2 + torch.rand(3, 2, 3, 3, generator=g)
    b_loc, b_scale = torch.randn(3, generator=g), 0.2 + torch.rand(3, generator=g)
    with torch.no_grad():
        mean = conv._conv_forward(x, loc, b_loc)
        std = conv._conv_forward(x.square(), scale.square(), b_scale.square()).sqrt()
    return conv, x, loc, scale, b_loc, b_scale, mean, std


def test_local_reparam_conv2d_has_the_weight_space_moments():
    conv, x, loc, scale, b_loc, b_scale, mean, std = _conv_params()
    draws = local_reparam_conv2d(x, loc, scale, b_loc, b_scale, conv, sample_shape=(N_DRAWS,))
    assert draws.shape == (N_DRAWS, 2, 3, 3, 3)
    _check_moments(draws, mean, std)


def test_flipout_conv2d_has_the_weight_space_moments_and_weights_agree():
    conv, x, loc, scale, b_loc, b_scale, mean, std = _conv_params()
    n = 4000  # grouped conv over n draws; 5 standard errors as above
    weight = loc + scale * torch.randn(n, 3, 2, 3, 3)
    bias = b_loc + b_scale * torch.randn(n, 3)
    draws = flipout_conv2d(x, loc, weight, bias, conv)
    assert draws.shape == (n, 2, 3, 3, 3)
    _check_moments(draws, mean, std)
    weight_space = batched_conv2d(x, weight, bias, conv)
    _check_moments(weight_space, mean, std)


def test_particle_layout_and_input_sample_dims():
    x, loc, scale, b_loc, b_scale, *_ = _linear_params()
    expanded = loc.expand(5, 1, 2, 3)  # what a guide site looks like under 5 particles
    out = local_reparam_linear(x, expanded, scale.expand(5, 1, 2, 3), b_loc, sample_shape=(5,))
    assert out.shape == (5, 4, 2)
    assert local_reparam_linear(x.expand(5, 4, 3), loc, scale).shape == (5, 4, 2)
    weight = loc + scale * torch.randn(5, 1, 2, 3)
    assert flipout_linear(x, expanded, weight).shape == (5, 4, 2)


# ------------------------------------------------------------------ the handler
def _bayesian_mlp(guide="meanfield"):
    net = mlp(3, [8], 1)
    make_bayesian_(net, IIDPrior(dist.Normal(0.0, 1.0)))

    def model(x, y=None):
        f = net(x).squeeze(-1)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("y", dist.Normal(f, 1.0), obs=y)
        return f

    if guide == "meanfield":
        return net, model, MeanFieldNormalGuide(model, init_scale=0.1)
    return net, model, guide(model)


@pytest.mark.parametrize("guide", ["meanfield", AutoNormal])
@pytest.mark.parametrize("estimator", ["local", "flipout"])
def test_handler_reparameterizes_every_layer(guide, estimator):
    pyro.clear_param_store()
    _, model, guide = _bayesian_mlp(guide)
    x, y = torch.randn(16, 3), torch.randn(16)
    handler = LocalReparameterization(estimator)
    with handler:
        loss = Trace_ELBO().differentiable_loss(model, guide, x, y)
        vectorized = Trace_ELBO(num_particles=3, vectorize_particles=True, max_plate_nesting=1)
        vectorized.differentiable_loss(model, guide, x, y).backward()
    assert torch.isfinite(loss)
    assert handler.num_reparameterized == 4  # 2 layers x 2 calls
    assert LAYER_HOOKS == []


def test_handler_follows_the_fast_elbo_path():
    _, model, guide = _bayesian_mlp()
    x, y = torch.randn(16, 3), torch.randn(16)
    elbo = FastTrace_ELBO()
    handler = LocalReparameterization()
    with handler:
        elbo.differentiable_loss(model, guide, x, y)  # first call: Trace_ELBO
        assert elbo.fast
        elbo.differentiable_loss(model, guide, x, y)  # the recorder path
    assert handler.num_reparameterized == 4


def test_handler_leaves_conditioned_and_predictive_weights_alone():
    net, model, guide = _bayesian_mlp()
    x = torch.randn(5, 3)
    guide(x, torch.zeros(5))
    weights = guide.sample_posterior(1)
    weights = {k: v[0] for k, v in weights.items()}
    handler = LocalReparameterization()
    with handler:
        conditioned = pyro.poutine.condition(model, data=weights)(x)
        samples = Predictive(model, guide=guide, num_samples=4, return_sites=["_RETURN"])(x)
    plain = pyro.poutine.condition(model, data=weights)(x)
    torch.testing.assert_close(conditioned, plain)
    assert samples["_RETURN"].shape == (4, 5)
    assert handler.num_reparameterized == 0


def test_handler_rejects_a_guide_without_normal_weight_sites():
    pyro.clear_param_store()
    _, model, guide = _bayesian_mlp(AutoDiagonalNormal)
    x, y = torch.randn(16, 3), torch.randn(16)
    with pytest.raises(ValueError, match="drawn from a Normal guide site"):
        with LocalReparameterization():
            Trace_ELBO().differentiable_loss(model, guide, x, y)
    assert LAYER_HOOKS == []  # removed on the way out of an exception too


def test_handler_rejects_an_unknown_estimator():
    with pytest.raises(ValueError, match="estimator must be one of"):
        LocalReparameterization("dropout")


def _conv_model():
    net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(start_dim=-3), nn.Linear(8, 1))
    make_bayesian_(net, IIDPrior(dist.Normal(0.0, 1.0)))

    def model(x, y=None):
        f = net(x).squeeze(-1)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("y", dist.Normal(f, 1.0), obs=y)

    return model, MeanFieldNormalGuide(model, init_scale=0.1)


@pytest.mark.parametrize("estimator", ["local", "flipout"])
def test_handler_covers_conv_layers_with_particles(estimator):
    model, guide = _conv_model()
    x, y = torch.randn(6, 1, 4, 4), torch.randn(6)
    handler = LocalReparameterization(estimator)
    with handler:
        elbo = Trace_ELBO(num_particles=2, vectorize_particles=True, max_plate_nesting=1)
        elbo.differentiable_loss(model, guide, x, y).backward()
    assert handler.num_reparameterized == 2  # conv and linear


def test_lrt_reduces_the_gradient_variance():
    """Kingma et al. (2015): at batch 64 the LRT gradient of the expected log-likelihood w.r.t.
    the first layer's means varies less than the weight-space one. Measured ratio ~5-10x; the
    test asks for 1.5x over 60 draws each (an F-test at this ratio and size has p < 1e-3)."""
    _, model, guide = _bayesian_mlp()
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(64, 3, generator=g), torch.randn(64, generator=g)
    guide(x, y)
    loc = guide.locs[guide.param_key("net.0.weight")]

    def grads(handler):
        out = []
        for _ in range(60):
            with handler:
                loss = Trace_ELBO().differentiable_loss(model, guide, x, y)
            out.append(torch.autograd.grad(loss, loc)[0])
        return torch.stack(out).var(0).mean()

    from contextlib import nullcontext

    assert grads(nullcontext()) > 1.5 * grads(LocalReparameterization())
