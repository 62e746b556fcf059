"""The stacked SG-MCMC potential term by term, and what ``fit_stacked_sgmcmc`` passes on.

Each row of :meth:`StackedPotential.gradient` is checked against that chain's own Pyro potential
(:class:`~bnn_pyro.methods.sgmcmc.potential.PyroPotential`, which traces the model and sums its
log-probabilities: nothing restated) on models that reach the terms the plain-torch sum covers:
two outputs with a learned noise each, priors and noise priors that differ by chain, a prior
that reads the site's name, a layer at the net's root, a Jacobian that reads the transform's
output.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict

import pyro.distributions as dist
import pytest
import torch
from torch import nn
from torch.distributions.transforms import ExpTransform, IndependentTransform

import bnn_pyro as bp
from bnn_pyro.methods.sgmcmc.potential import PyroPotential
from bnn_pyro.methods.sgmcmc.stacked import StackedPotential, fit_stacked_sgmcmc
from bnn_pyro.priors import Prior

# float64 throughout: the two sums differ in their order only, by about 1e-16 relative; a wrong
# term (a prior, a noise, a Jacobian, a scale) moves U and its gradient by far more than the
# 1e-10 allowed here.
TOL = 1e-10


class _ByName(Prior):
    """A Normal prior whose scale is told by the site's name (the keyword
    ``Prior.distribution`` documents) and by the parameter's: 0.5 on the biases, 2 on the
    weights, and half of that on the first layer's. Not cached (``cached = False``: built anew
    on each call, as for a prior with learnable parameters)."""

    cached = False

    def distribution(self, module, param_name, device, dtype, *, name=None):
        scale = 0.5 if param_name == "bias" else 2.0
        scale = scale / 2 if name is not None and name.startswith("net.0.") else scale
        return dist.Normal(torch.tensor(0.0, dtype=dtype, device=device), scale)


def _nets(kind: str) -> nn.Module:
    if kind == "root":  # a single layer: its sites' module name is "" (the path "net")
        return nn.Linear(3, 2)
    if kind == "named":  # layer names used as they are (one ends in an "X")
        return nn.Sequential(
            OrderedDict(hidden=nn.Linear(3, 5), act=nn.Tanh(), outX=nn.Linear(5, 2))
        )
    return bp.nn.mlp(3, [5], 2)


def _models(kind: str, chains: int = 3) -> list:
    torch.manual_seed(0)
    out = []
    for i in range(chains):
        if kind == "own":  # each chain its own weight prior and noise prior: scored one by one
            prior = bp.IIDPrior(dist.Normal(0.0, 0.5 + i))
            noise = bp.Gaussian(scale="learned", scale_prior=dist.LogNormal(0.0, 0.5 + i))
        else:
            prior = _ByName() if kind == "by name" else None
            noise = bp.Gaussian(scale="learned")
        net = _nets(kind).double()
        out.append(bp.make("sgld", net, noise, prior=prior))
    return out


def _stacked(models, rows: int = 6):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(len(models), rows, 3, generator=g, dtype=torch.float64)
    y = torch.randn(len(models), rows, 2, generator=g, dtype=torch.float64)
    steps = [m.start_run(x[i], y[i], steps=4, lr=0.01) for i, m in enumerate(models)]
    stacked = StackedPotential(models, [s.potential for s in steps])
    theta = torch.stack([s.theta for s in steps])
    theta = theta + 0.3 * torch.randn(theta.shape, generator=g, dtype=torch.float64)
    return stacked, theta, x, y


def _assert_rows_are_each_chains_own(stacked, theta, x, y, n):
    values, grads = stacked.gradient(theta, x, y, n)
    assert values.shape == (len(theta),) and grads.shape == theta.shape
    for i, potential in enumerate(stacked.potentials):
        # the Pyro trace, also where start_run built the chain's plain-torch DirectPotential
        value, grad = PyroPotential.gradient(potential, theta[i], x[i], y[i], n)
        torch.testing.assert_close(float(values[i]), value, rtol=TOL, atol=0)
        torch.testing.assert_close(grads[i], grad, rtol=TOL, atol=TOL * float(grad.abs().max()))


@pytest.mark.parametrize("kind", ["shared", "own", "by name", "root", "named"])
def test_each_row_is_its_chains_pyro_potential(kind):
    """Two outputs, each with a learned noise scale (a (2,) site through ``exp``), on a
    minibatch of 6 rows standing for 20: every chain's ``U`` and ``∇U / N``."""
    stacked, theta, x, y = _stacked(_models(kind))
    assert stacked.joint.one_prior is (kind != "own")  # one call on all chains, or one each
    _assert_rows_are_each_chains_own(stacked, theta, x, y, 20)


class _ExpFromOutput(ExpTransform):
    """``exp``, whose log-Jacobian is read from its output: ``log|d exp(x)/dx| = log y``
    (``Transform.log_abs_det_jacobian(x, y)`` may use either)."""

    def log_abs_det_jacobian(self, x, y):
        return y.log()


def test_the_jacobian_is_given_the_transforms_output():
    """A site whose transform computes its Jacobian from ``y``: the stacked sum passes the
    transformed value, as the Pyro potential does."""
    models = _models("shared")
    stacked, theta, x, y = _stacked(models)
    exp = IndependentTransform(_ExpFromOutput(), 1)  # the noise site's (2,) event
    for potential in stacked.potentials:  # stacked.sites is the first chain's list
        potential.sites[:] = [
            dataclasses.replace(s, transform=exp) if s.name == "likelihood.scale" else s
            for s in potential.sites
        ]
    assert stacked.sites[-1].transform is exp
    _assert_rows_are_each_chains_own(stacked, theta, x, y, 20)


SETTINGS_DIFFER = (
    "the chains' likelihoods must share one setting: a noise learned by every chain or fixed "
    "for every chain, one heteroscedastic min_scale"
)


def test_chains_with_a_learned_and_a_fixed_noise_are_refused_before_any_work(monkeypatch):
    """The third chain's noise is learned (a latent site the others lack) on the same net:
    refused by the stacked fit before any chain starts its run, and by the stacked potential
    itself, with the same line."""
    torch.manual_seed(0)
    noises = [0.3, 0.3, "learned"]
    models = [bp.make("sgld", bp.nn.mlp(3, [5], 1), bp.Gaussian(s)) for s in noises]
    x, y = torch.randn(6, 3), torch.randn(6, 1)
    steps = [m.start_run(x, y, steps=4, lr=0.01) for m in models]
    with pytest.raises(ValueError) as caught:
        StackedPotential(models, [s.potential for s in steps])
    assert str(caught.value) == SETTINGS_DIFFER

    def no_run(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("a chain started its run before the refusal")

    for m in models:
        monkeypatch.setattr(m, "start_run", no_run)
    with pytest.raises(ValueError) as caught:
        bp.fit_stacked(models, x, y, seeds=[0, 1, 2], epochs=1)
    assert str(caught.value) == SETTINGS_DIFFER


def _hierarchical():
    torch.manual_seed(0)
    prior = bp.HierarchicalNormalPrior(dist.HalfCauchy(1.0))
    return bp.make("sgld", bp.nn.mlp(3, [4], 1), bp.Gaussian(0.3), prior=prior)


def test_a_prior_with_latent_sites_of_its_own_is_refused_by_name():
    """Refused both by the stacked fit and by the stacked potential itself, naming the first
    latent site of the prior."""
    models = [_hierarchical(), _hierarchical()]
    site = models[0].bnn.prior_sites[0]
    message = (
        f"a prior with latent sites of its own ({site!r}, ...) is not stacked: fit each chain "
        "with its own fit"
    )
    x, y = torch.randn(6, 3), torch.randn(6)
    with pytest.raises(ValueError) as caught:
        fit_stacked_sgmcmc(models, x, y, seeds=[0, 1], epochs=1, progress=False)
    assert str(caught.value) == message
    xs, ys = x, models[0].bnn.prepare_targets(y, x)
    steps = [m.start_run(xs, ys, steps=4, lr=0.01) for m in models]
    with pytest.raises(ValueError) as caught:
        StackedPotential(models, [s.potential for s in steps])
    assert str(caught.value) == message
