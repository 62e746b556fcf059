"""FastTrace_ELBO is Pyro's Trace_ELBO: same loss, same gradients, under the same draws."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import Trace_ELBO

import bnn_pyro as bp
from bnn_pyro.elbos.stl import StickingTheLanding_ELBO
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


# ---- a one-weight regression whose every term is known: w ~ N(0, 1), y_n ~ N(w x_n, 1)

X = torch.tensor([1.0, -2.0, 0.5])
Y = torch.tensor([0.5, -1.0, 1.0])
STD = dist.Normal(0.0, 1.0)


def _model(x, y, scale=1.0):
    w = pyro.sample("w", dist.Normal(0.0, 1.0))
    with pyro.plate("data", len(y)):
        pyro.sample("obs", dist.Normal(w * x, 1.0), obs=y)


class _Toy:
    """The guide ``w ~ N(loc, scale)`` with one parameter, ``loc``."""

    def __init__(self):
        self.loc = torch.tensor(0.3, requires_grad=True)

    def guide(self, x, y, scale=1.0):
        pyro.sample("w", dist.Normal(self.loc, scale))


def _point_guide(x, y, scale=1.0):
    pyro.sample("w", dist.Delta(torch.tensor(0.7)))


@pytest.mark.parametrize("vectorize", [False, True])
def test_last_nll_is_the_particles_mean_on_both_paths(vectorize):
    """A ``Delta`` guide makes every particle's ``w = 0.7``: the mean over 4 particles of
    ``-sum_n log N(y_n; 0.7 x_n, 1)`` is that one value, on the first (general) call and on the
    fast path after it; so is the loss, minus ``log N(0.7; 0, 1)``."""
    nll = float(-dist.Normal(0.7 * X, 1.0).log_prob(Y).sum())
    prior = float(STD.log_prob(torch.tensor(0.7)))
    elbo = FastTrace_ELBO(num_particles=4, vectorize_particles=vectorize, max_plate_nesting=1)
    for _ in range(2):
        loss = elbo.differentiable_loss(_model, _point_guide, X, Y)
        assert float(elbo.last_nll) == pytest.approx(nll, rel=1e-6)
        assert float(loss) == pytest.approx(nll - prior, rel=1e-6)
    assert elbo.fast


def test_later_calls_take_the_fast_path_without_trace_elbo(monkeypatch):
    """The first call runs ``Trace_ELBO`` (once) and decides; the next ones give its loss under
    the same draws (masked rows, keyword arguments and a plate in the guide included) without
    calling it."""
    keep = torch.tensor([True, False, True])

    def model(x, y, scale=1.0):
        w = pyro.sample("w", dist.Normal(0.0, 1.0))
        with pyro.plate("data", len(y)), pyro.poutine.mask(mask=keep):
            pyro.sample("obs", dist.Normal(w * x, 1.0), obs=y)

    toy = _Toy()

    def guide(x, y, scale=1.0):
        with pyro.plate("data", len(y)):  # a plate's subsample site: not a latent
            pass
        toy.guide(x, y, scale)

    calls = []
    general = Trace_ELBO.differentiable_loss
    monkeypatch.setattr(
        Trace_ELBO, "differentiable_loss", lambda *a, **k: calls.append(1) or general(*a, **k)
    )
    elbo = FastTrace_ELBO()
    elbo.differentiable_loss(model, guide, X, Y, scale=0.5)
    assert calls == [1] and elbo.fast
    for seed in (4, 5):
        torch.manual_seed(seed)
        got = elbo.differentiable_loss(model, guide, X, Y, scale=0.5)
        assert calls == [1]
        torch.manual_seed(seed)
        want = general(Trace_ELBO(), model, guide, X, Y, scale=0.5)
        calls.clear() or calls.append(1)
        assert torch.allclose(got, want, rtol=1e-6)


@pytest.mark.filterwarnings("ignore:Found vars in model but not guide")
def test_a_changed_structure_falls_back_to_trace_elbo_for_good():
    """A model that starts drawing a site of its own after the first call: that call is
    ``Trace_ELBO``'s and the fast path is off from then on. The fast attempt has spent one draw of
    ``w`` and one of ``v`` before it met ``v``: ``Trace_ELBO`` after two such draws gives the
    same loss."""
    extra = []

    def model(x, y, scale=1.0):
        _model(x, y)
        if extra:
            pyro.sample("v", dist.Normal(0.0, 1.0))

    toy = _Toy()
    elbo = FastTrace_ELBO()
    elbo.differentiable_loss(model, toy.guide, X, Y)
    assert elbo.fast
    extra.append(1)
    torch.manual_seed(6)
    got = elbo.differentiable_loss(model, toy.guide, X, Y, scale=0.5)
    torch.manual_seed(6)
    torch.randn(()), torch.randn(())
    want = Trace_ELBO().differentiable_loss(model, toy.guide, X, Y, scale=0.5)
    assert torch.allclose(got, want, rtol=1e-6) and elbo.fast is False
    elbo.differentiable_loss(model, toy.guide, X, Y)
    assert elbo.fast is False


def test_an_enumerated_guide_site_takes_the_general_path():
    toy = _Toy()

    def guide(x, y, scale=1.0):
        pyro.sample("w", dist.Normal(toy.loc, 1.0), infer={"enumerate": "parallel"})

    elbo = FastTrace_ELBO()
    with pytest.warns(UserWarning, match="TraceEnum_ELBO"):
        elbo.differentiable_loss(_model, guide, X, Y)
    assert elbo.fast is False


def test_the_constructor_passes_pyros_arguments_on_and_decides_nothing_yet():
    elbo = FastTrace_ELBO(3)
    assert elbo.num_particles == 3 and elbo.fast is False


@pytest.mark.filterwarnings("ignore:Found non-auxiliary vars in guide but not model")
@pytest.mark.parametrize("elbo_class", [FastTrace_ELBO, StickingTheLanding_ELBO])
def test_an_observed_guide_site_is_scored_as_trace_elbo_scores_it(elbo_class):
    """``Trace_ELBO`` subtracts ``log q`` of every guide site, an observed one too (here
    ``log Bernoulli(1; 0.3) = log 0.3``); the fast path after the first call must as well (it
    once left it out: a loss ``log(1 / 0.3) = 1.2`` too high)."""
    toy = _Toy()

    def guide(x, y, scale=1.0):
        toy.guide(x, y)
        pyro.sample("k", dist.Bernoulli(0.3), obs=torch.tensor(1.0))

    elbo = elbo_class()
    for seed in (7, 8):  # the first call (general) and the fast path
        torch.manual_seed(seed)
        got = elbo.differentiable_loss(_model, guide, X, Y)
        torch.manual_seed(seed)
        want = Trace_ELBO().differentiable_loss(_model, guide, X, Y)
        assert torch.allclose(got, want, rtol=1e-6)
    assert elbo.fast
