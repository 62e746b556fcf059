"""StackedVI's loss, member by member, against each member's own single-model loss.

The oracle is :class:`~bnn_pyro.methods.vi.fast_loss.DirectLoss` (itself checked against Pyro's
``Trace_ELBO`` in ``test_fast_loss.py``): member ``k``'s entry of
``StackedVI.member_losses`` must be the loss its own model computes on its own minibatch, with
the global generator seeded as member ``k``'s generator is. Each case picks a model that the
stacked fit tests do not build (a prior with a non-zero mean, a prior that reads the site's
name and parameter, priors with no shared loc and scale, several outputs with a learned noise,
a bare layer as the net, float64 weights, a single member).
"""

from __future__ import annotations

from collections import OrderedDict

import pyro.distributions as dist
import pytest
import torch
import torch.nn as nn
from stacked_vi_helpers import Gain

import bnn_pyro as bp
from bnn_pyro.methods.vi.fast_loss import direct_loss_for
from bnn_pyro.methods.vi.stacked import StackedVI
from bnn_pyro.priors.base import Prior
from bnn_pyro.weight_distributions import ScaleMixtureNormal, SharedNormal

N, B, D = 96, 12, 4  # N != B: the likelihood term is scaled by N / B


class _ByName(Prior):
    """A Normal prior with one loc and scale per layer that reads the site it scores: loc 0.3
    for ``net.0.weight`` (0 elsewhere), scale 0.8 for weights and 2.5 for biases."""

    def distribution(self, module, param_name, device, dtype, *, name=None):
        loc = 0.3 if name == "net.0.weight" else 0.0
        return SharedNormal(loc, 0.8 if param_name == "weight" else 2.5, device, dtype)


def _named_net() -> nn.Module:
    # layer names ending in "X": the module path is looked up by name, character for character
    return nn.Sequential(OrderedDict(hidX=nn.Linear(D, 6), act=nn.Tanh(), outX=nn.Linear(6, 1)))


#: case -> (member k's model, output columns of y)
CASES = {
    "prior with a non-zero mean": (
        lambda k: bp.VariationalBNN(
            bp.nn.mlp(D, [6], 1),
            bp.Gaussian(0.2 + 0.1 * k),
            prior=bp.IIDPrior(dist.Normal(0.5, 0.7 + 0.1 * k)),
        ),
        1,
    ),
    "prior reading the name and parameter": (
        lambda k: bp.VariationalBNN(bp.nn.mlp(D, [6], 1), bp.Gaussian(0.3), prior=_ByName()),
        1,
    ),
    "a Laplace prior": (  # no shared loc and scale: each member's own density
        lambda k: bp.VariationalBNN(
            bp.nn.mlp(D, [6], 1),
            bp.Gaussian(0.3),
            prior=bp.IIDPrior(dist.Laplace(0.1 * k, 1.0 + 0.2 * k)),
        ),
        1,
    ),
    "a scale-mixture prior": (  # Blundell et al.'s: a density of the library's own
        lambda k: bp.VariationalBNN(
            bp.nn.mlp(D, [6], 1),
            bp.Gaussian(0.3),
            prior=bp.IIDPrior(ScaleMixtureNormal(0.5, 1.0 + 0.5 * k, 0.1)),
        ),
        1,
    ),
    "fixed noise, two outputs": (
        lambda k: bp.VariationalBNN(bp.nn.mlp(D, [6], 2), bp.Gaussian(0.2 + 0.1 * k)),
        2,
    ),
    "learned noise, two outputs": (
        lambda k: bp.VariationalBNN(bp.nn.mlp(D, [6], 2), bp.Gaussian("learned")),
        2,
    ),
    "a bare layer as the net": (
        lambda k: bp.VariationalBNN(nn.Linear(D, 1, bias=False), bp.Gaussian(0.4)),
        1,
    ),
    "layer names ending in X": (
        lambda k: bp.VariationalBNN(_named_net(), bp.Gaussian(0.4)),
        1,
    ),
    "local reparameterization": (
        lambda k: bp.VariationalBNN(
            bp.nn.mlp(D, [6], 1), bp.Gaussian(0.3), local_reparameterization=True
        ),
        1,
    ),
    "flipout": (
        lambda k: bp.VariationalBNN(
            bp.nn.mlp(D, [6], 1), bp.Gaussian(0.3), local_reparameterization="flipout"
        ),
        1,
    ),
    "dropout": (
        lambda k: bp.VariationalBNN(bp.nn.mlp(D, [6], 1, dropout=0.3), bp.Gaussian("learned")),
        1,
    ),
}


def _data(k: int, out: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    X = torch.randn(k, B, D, generator=g)
    y = X[..., :out] - 0.5 * X[..., out : 2 * out] + 0.1 * torch.randn(k, B, out, generator=g)
    return X, y


def _members(case: str, k: int, dtype: torch.dtype = torch.float32):
    """``k`` models of ``case``, guides set up on float32 data (each under its own seed, so
    their locs and rhos differ), then moved to ``dtype``."""
    make, out = CASES[case]
    X, y = _data(k, out)
    models = []
    for i in range(k):
        torch.manual_seed(100 + i)
        bnn = make(i)
        bnn.setup_guide(X[i], y[i], (X[i], y[i]))
        with torch.no_grad():  # rhos away from their initial value, member by member
            for rho in bnn.guide.rhos.values():
                rho.add_(0.3 * torch.randn(rho.shape))
        models.append(bnn.to(dtype))
    return models, X.to(dtype), y.to(dtype)


def _own_losses(models, X, y, seeds, **kw) -> torch.Tensor:
    """Each member's own single-model loss, the global generator seeded as its stream is."""
    out = []
    for bnn, xk, yk, seed in zip(models, X, y, seeds, strict=True):
        torch.manual_seed(seed)
        out.append(direct_loss_for(bnn)(xk, yk, dataset_size=N, **kw)[0])
    return torch.stack(out)


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("case", sorted(CASES))
def test_member_losses_are_each_members_own_loss(case, k):
    """``member_losses(x, y)[k]`` is member k's own DirectLoss on ``(X[k], y[k])`` with
    ``kl_weight`` left at its default of 1. One member (K = 1) is a valid stack too.

    Tolerance: the same float32 arithmetic batched over members (a bmm instead of a mm), so
    round-off only, ~1e-6 relative on losses of size ~1e2-1e3."""
    models, X, y = _members(case, k)
    seeds = [11 + i for i in range(k)]
    stacked = StackedVI(models, [torch.Generator().manual_seed(s) for s in seeds], N)
    got = stacked.member_losses(X, y)
    want = _own_losses(models, X, y, seeds, kl_weight=1.0)
    assert got.shape == (k,)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)
    # the next step draws the next noise from each stream, again as the member's own loss
    got2 = stacked.member_losses(X, y)
    want2 = []
    for bnn, xk, yk, seed in zip(models, X, y, seeds, strict=True):
        torch.manual_seed(seed)
        own = direct_loss_for(bnn)
        own(xk, yk, dataset_size=N)
        want2.append(own(xk, yk, dataset_size=N)[0])
    torch.testing.assert_close(got2, torch.stack(want2), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    "case", sorted(c for c in CASES if c not in ("local reparameterization", "flipout", "dropout"))
)
def test_the_alpha_energy_of_each_member_is_its_own(case):
    """``mode="alpha"`` with P particles: member k's energy is its own model's alpha energy
    (its DirectLoss with ``alpha`` and ``particles``, itself checked against Pyro's vectorized
    AlphaELBO) under its own generator's draws. Tolerance as above: float32 round-off."""
    models, X, y = _members(case, 3)
    seeds = [21, 22, 23]
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    got = StackedVI(models, gens, N, 0.7, mode="alpha", particles=3).member_losses(X, y)
    want = []
    for bnn, xk, yk, seed in zip(models, X, y, seeds, strict=True):
        torch.manual_seed(seed)
        own = direct_loss_for(bnn, alpha=0.5, particles=3)
        want.append(own(xk, yk, dataset_size=N, kl_weight=0.7)[0])
    torch.testing.assert_close(got, torch.stack(want), rtol=1e-5, atol=1e-4)


def test_the_weight_space_estimator_is_used_outside_training_mode():
    """A local-reparameterization model in eval mode scores its sampled weights (the weight-
    space estimator), as its own DirectLoss does then; in training mode the two estimators
    give different numbers, so the test tells them apart. A single member (K = 1)."""
    models, X, y = _members("local reparameterization", 1)
    models[0].eval()
    eval_loss = StackedVI(models, [torch.Generator().manual_seed(5)], N).member_losses(X, y)
    torch.testing.assert_close(eval_loss, _own_losses(models, X, y, [5]), rtol=1e-5, atol=1e-4)
    models[0].train()
    train_loss = StackedVI(models, [torch.Generator().manual_seed(5)], N).member_losses(X, y)
    torch.testing.assert_close(train_loss, _own_losses(models, X, y, [5]), rtol=1e-5, atol=1e-4)
    assert (train_loss - eval_loss).abs().item() > 1e-2


@pytest.mark.parametrize(
    "case",
    ["prior with a non-zero mean", "learned noise, two outputs", "local reparameterization",
     "flipout"],
)  # fmt: skip
def test_float64_members_are_scored_in_float64(case):
    """Models set up in float32 and then moved to float64: the noise (of the weights, of the
    pre-activations, flipout's signs) is drawn and the prior's constants are made in float64
    (a float32 draw is another number, a float32 prior scale 0.7 is off by ~1e-8 relative),
    so the stacked loss is the members' own float64 loss to 1e-10 relative, far below
    float32's ~1e-7 and far above float64's ~1e-16 round-off."""
    models, X, y = _members(case, 2, torch.float64)
    seeds = [3, 4]
    stacked = StackedVI(models, [torch.Generator().manual_seed(s) for s in seeds], N, 0.25)
    got = stacked.member_losses(X, y)
    assert got.dtype == torch.float64
    want = _own_losses(models, X, y, seeds, kl_weight=0.25)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=0.0)


def test_the_alpha_energy_weighs_its_kl_as_the_elbo_unless_told():
    """The stacked alpha energy's kl_weight defaults to 1 (the energy of Hernandez-Lobato et
    al.) and keeps a weight it is given, as the ELBO's does: a stacked fit sets it every epoch,
    a direct caller relies on the default; its alpha defaults to fit(elbo="alpha")'s 0.5."""
    models, _, _ = _members("prior with a non-zero mean", 2)
    gens = [torch.Generator().manual_seed(s) for s in (1, 2)]
    alpha = StackedVI(models, gens, N, mode="alpha", particles=3)
    assert alpha.kl_weight == 1.0 and alpha.objective.alpha == 0.5
    assert StackedVI(models, gens, N, 0.25, mode="alpha", particles=3).kl_weight == 0.25
    assert (
        StackedVI(models, gens, N, kl_weight=0.5, mode="alpha", particles=3).objective.particles
        == 3
    )


def test_a_scalar_sites_prior_is_read_unwrapped():
    """A site of shape ``()`` gets its prior as the bare SharedNormal (``to_event(0)`` wraps
    nothing), which StackedVI reads as it reads the others' ``Independent`` base: one member
    (``fit_stacked`` refuses such a layer for several, whose twin does not batch it) scores
    as its own DirectLoss. Tolerance as above: float32 round-off."""
    prior = bp.IIDPrior(dist.Normal(0.2, 1.3), types=(nn.Linear, Gain))
    torch.manual_seed(0)
    bnn = bp.VariationalBNN(nn.Sequential(nn.Linear(D, 1), Gain()), bp.Gaussian(0.4), prior=prior)
    X, y = _data(1, 1)
    bnn.setup_guide(X[0], y[0])
    assert [tuple(s.shape) for s in bnn.evaluator.sites][-1] == ()
    got = StackedVI([bnn], [torch.Generator().manual_seed(9)], N).member_losses(X, y)
    torch.testing.assert_close(got, _own_losses([bnn], X, y, [9]), rtol=1e-5, atol=1e-4)


def test_the_members_fixed_noise_is_stacked_once_per_fit():
    """row_log_likelihood stacks the members' fixed scales into the cache a fit keeps, once per
    (K', O, dtype, device); the next steps read it (counted on fixed_latents) and score as
    without a cache."""
    from bnn_pyro.methods.vi.stacked_likelihoods import row_log_likelihood

    calls = []

    class Counted(bp.Gaussian):
        def fixed_latents(self, f):
            calls.append(f.shape)
            return super().fixed_latents(f)

    bnns = [bp.VariationalBNN(bp.nn.mlp(D, [4], 1), Counted(0.2 + 0.1 * k)) for k in range(3)]
    f, y = torch.randn(3, 5, 1), torch.randn(3, 5, 1)
    want = row_log_likelihood(bnns, bnns[0].likelihood, f, y, None)
    assert len(calls) == 3
    cache: dict = {}
    for _ in range(3):
        got = row_log_likelihood(bnns, bnns[0].likelihood, f, y, None, cache)
        torch.testing.assert_close(got, want, rtol=0.0, atol=0.0)
    assert len(calls) == 6 and list(cache) == [(3, 1, torch.float32, f.device)]
    row_log_likelihood(bnns, bnns[0].likelihood, f.double(), y.double(), None, cache)
    assert len(calls) == 9 and len(cache) == 2  # another dtype: stacked again
