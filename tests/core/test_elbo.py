"""FastTrace_ELBO is Pyro's Trace_ELBO: same loss, same gradients, under the same draws."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import Trace_ELBO

import bnn_pyro as bp
from bnn_pyro.elbos.trace import FastTrace_ELBO


def _loss_and_grads(elbo, bnn, x, y, seed):
    pyro.set_rng_seed(seed)
    loss = elbo.differentiable_loss(bnn.model, bnn.guide, x, y, dataset_size=200)
    grads = torch.autograd.grad(loss, list(bnn.guide.parameters()))
    return loss.detach(), grads


@pytest.mark.parametrize("particles", [1, 4])
def test_fast_path_matches_trace_elbo(regression_data, particles):
    X, y = regression_data
    torch.manual_seed(0)
    bnn = bp.VariationalBNN(bp.nn.mlp(3, [5], 1), bp.Gaussian(scale="learned"), init_scale=0.1)
    bnn.fit(X, y, epochs=2, progress=False, seed=0)
    kwargs = dict(num_particles=particles, vectorize_particles=particles > 1, max_plate_nesting=1)
    fast = FastTrace_ELBO(**kwargs)
    _loss_and_grads(fast, bnn, X, y, seed=0)  # first call: the general path, decides
    assert fast.fast
    for seed in (1, 2):
        loss_fast, grads_fast = _loss_and_grads(fast, bnn, X, y, seed)
        loss_ref, grads_ref = _loss_and_grads(Trace_ELBO(**kwargs), bnn, X, y, seed)
        assert torch.allclose(loss_fast, loss_ref, rtol=1e-5)
        for a, b in zip(grads_fast, grads_ref, strict=True):
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-5)


def test_non_reparameterized_guides_take_the_general_path():
    def model():
        pyro.sample("k", dist.Bernoulli(0.3))

    probs = torch.tensor(0.5, requires_grad=True)

    def guide():
        pyro.sample("k", dist.Bernoulli(probs))

    elbo = FastTrace_ELBO()
    elbo.differentiable_loss(model, guide)
    assert not elbo.fast  # score-function terms: Trace_ELBO's general estimator is kept


@pytest.mark.filterwarnings("ignore:Found vars in model but not guide")
def test_model_side_sampling_takes_the_general_path():
    def model():
        pyro.sample("a", dist.Normal(0.0, 1.0))
        pyro.sample("b", dist.Normal(0.0, 1.0))

    loc = torch.tensor(0.0, requires_grad=True)

    def guide():
        pyro.sample("a", dist.Normal(loc, 1.0))

    elbo = FastTrace_ELBO()
    elbo.differentiable_loss(model, guide)
    assert not elbo.fast
