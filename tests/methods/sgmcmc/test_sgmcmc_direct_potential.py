"""A chain's own ``fit`` steps with the plain-torch potential (``DirectPotential``, the stacked
run's one chain) where ``why_not_stacked_chains`` passes the chain alone, chosen by type before
any work, and with its Pyro model's trace (``PyroPotential``, the reference) where it does not.

The oracle for the whole runs is the same run forced onto the Pyro trace: the two potentials sum
the same terms in another order, so in float64 the runs differ by round-off only (about 1e-16
per step, over the 40-odd steps here); 1e-9 allows that many orders over, while a missing or
wrong term (a prior, a noise, a Jacobian, the N/B scale) moves the samples by O(0.01) or more.
"""

from __future__ import annotations

import pyro.distributions as dist
import pytest
import torch

import bnn_pyro as bp
from bnn_pyro.methods.sgmcmc import stacked
from bnn_pyro.methods.sgmcmc.potential import PyroPotential
from bnn_pyro.methods.sgmcmc.stacked import DirectPotential

TOL = 1e-9


class _OwnObserve(bp.Gaussian):
    """A Gaussian likelihood that observes its rows by code of its own."""

    def observe(self, f, y=None, dataset_size=None, subsample=None):
        return super().observe(f, y, dataset_size, subsample)


def _data(task: str = "regression", rows: int = 24):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(rows, 3, generator=g, dtype=torch.float64)
    if task == "classification":
        return X, (X[:, 0] > 0).long() + (X[:, 1] > 0).long()
    return X, X.sum(-1) + 0.3 * torch.randn(rows, generator=g, dtype=torch.float64)


def _model(name="sghmc", likelihood=None, hidden=(6,), out=1, prior=None, **options):
    torch.manual_seed(0)
    net = bp.nn.mlp(3, list(hidden), out).double()
    likelihood = bp.Gaussian(0.3) if likelihood is None else likelihood
    return bp.make(name, net, likelihood, prior=prior, **options)


def _hooked(m):
    m.bnn.net.register_forward_hook(lambda module, args, output: output)
    return m


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (lambda: _model("sghmc"), DirectPotential),
        (lambda: _model("sgld", bp.Gaussian(scale="learned")), DirectPotential),
        (lambda: _model("csghmc", bp.Categorical(), out=3), DirectPotential),
        (lambda: _model("sghmc", bp.Bernoulli()), DirectPotential),
        (lambda: _model("sghmc", _OwnObserve(0.3)), PyroPotential),
        (lambda: _hooked(_model("sgld")), PyroPotential),
        (
            lambda: _model("sgld", prior=bp.HierarchicalNormalPrior(dist.HalfCauchy(1.0))),
            PyroPotential,
        ),
    ],
)
def test_the_potential_is_chosen_by_type(make, kind):
    """Where the stacked rule passes the chain alone (any built-in likelihood, fixed or learned
    noise), the plain-torch potential; a likelihood observing by its own code, a net with hooks,
    a prior with latent sites of its own: the Pyro trace. The fitted model keeps the run's."""
    m = make()
    task = "classification" if isinstance(m.likelihood, bp.Categorical) else "regression"
    X, y = _data(task)
    if isinstance(m.likelihood, bp.Bernoulli):
        y = (y > 0).double()
    m.fit(X, y, epochs=2, batch_size=8, lr=0.001, progress=False, seed=0)
    assert type(m.potential) is kind


def _pyro_only(monkeypatch):
    """Every chain refused by the rule: its fit steps on the Pyro trace."""
    monkeypatch.setattr(stacked, "why_not_stacked_chains", lambda models: "forced")


@pytest.mark.parametrize(
    ("make", "fit"),
    [
        # the step measured on the posterior, the whole data set: the control variate's paths
        (lambda: _model("sghmc"), {"lr": None}),
        (lambda: _model("sgld", bp.Gaussian(scale="learned")), {"lr": 0.002, "batch_size": 8}),
        (lambda: _model("csghmc", bp.Categorical(), out=3), {"lr": 0.01, "batch_size": 8}),
        # minibatches with a measured step: the control variate and the noise it measures
        (
            lambda: _model("sghmc", bp.Gaussian(scale="learned")),
            {"lr": "measured", "batch_size": 8},
        ),
        # a net linear in its weights: SGLD's dense preconditioner, measured on the potential
        (lambda: _model("sgld", hidden=()), {"lr": None}),
    ],
)
def test_a_run_on_the_plain_torch_potential_is_the_run_on_the_pyro_trace(make, fit, monkeypatch):
    """The same seeded fit, once as chosen (plain torch) and once forced onto the Pyro trace:
    the same kept samples, position, run record and predictions, to round-off."""
    m = make()
    task = "classification" if isinstance(m.likelihood, bp.Categorical) else "regression"
    X, y = _data(task)
    options = {"epochs": 10, "progress": False, "seed": 3, **fit}
    m.fit(X, y, **options)
    assert type(m.potential) is DirectPotential
    with monkeypatch.context() as patch:
        _pyro_only(patch)
        ref = make()
        ref.fit(X, y, **options)
    assert type(ref.potential) is PyroPotential
    assert m.kept_samples.shape == ref.kept_samples.shape and len(m.kept_samples) > 0
    torch.testing.assert_close(m.kept_samples, ref.kept_samples, rtol=0, atol=TOL)
    torch.testing.assert_close(m.position, ref.position, rtol=0, atol=TOL)
    assert m.last_run == ref.last_run
    if ref.step_size is None:  # a given lr
        assert m.step_size is None
    else:
        assert m.step_size == pytest.approx(ref.step_size, rel=TOL, abs=0)
    torch.testing.assert_close(m.predict(X[:4], seed=0)[0], ref.predict(X[:4], seed=0)[0],
                               rtol=0, atol=TOL)  # fmt: skip


def test_a_chain_on_the_plain_torch_potential_never_traces_the_pyro_model(monkeypatch):
    """The choice is made once, by type: a run whose Pyro trace would raise if evaluated still
    runs (the potential's equivalence is the parametrised test above and the stacked terms'
    test, not a comparison at run time); a refused chain does evaluate it."""
    calls = []
    reference = PyroPotential.gradient

    def counted(self, *args, **kwargs):
        calls.append(type(self))
        return reference(self, *args, **kwargs)

    monkeypatch.setattr(PyroPotential, "gradient", counted)
    X, y = _data()
    _model("sghmc").fit(X, y, epochs=2, batch_size=8, lr=0.001, progress=False, seed=0)
    assert calls == []
    _hooked(_model("sghmc")).fit(X, y, epochs=2, batch_size=8, lr=0.001, progress=False, seed=0)
    assert calls and set(calls) == {PyroPotential}


def test_the_direct_gradient_is_the_pyro_gradient_on_one_chain():
    """``DirectPotential.gradient`` on ``(P,)`` and a ``(B, ...)`` minibatch: ``(U, ∇U / N)`` as
    a float and a ``(P,)`` tensor, equal to the Pyro trace's at a point off the start."""
    m = _model("sgld", bp.Gaussian(scale="learned"))
    X, y = _data()
    y = m.bnn.prepare_targets(y, X)
    potential = DirectPotential(m, X[:2], y[:2])
    g = torch.Generator().manual_seed(1)
    theta = potential.flat() + 0.3 * torch.randn(potential.size, generator=g, dtype=torch.float64)
    value, grad = potential.gradient(theta, X[:8], y[:8], 24)
    ref_value, ref_grad = PyroPotential.gradient(potential, theta, X[:8], y[:8], 24)
    assert isinstance(value, float) and grad.shape == (potential.size,)
    assert value == pytest.approx(ref_value, rel=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-10, atol=1e-12)


class _Named(bp.Gaussian):
    """A Gaussian likelihood whose observation site has a name of its own."""

    name = "target"


@pytest.mark.parametrize("hooked", [False, True])
@pytest.mark.parametrize("likelihood", [bp.Gaussian, _Named])
def test_a_potential_found_without_targets_leaves_the_observation_out(hooked, likelihood):
    """Sites found on inputs alone (``y=None``: the observation drawn, as a loaded model finds
    them): the observation site (the likelihood's name) is not a latent, on either path and in
    a ``DirectPotential`` built by hand (which reads that name off the method): the weights and
    the learned noise only."""
    m = _model("sgld", likelihood(scale="learned"))
    if hooked:
        _hooked(m)
    X, _ = _data()
    expected = ["net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias", "likelihood.scale"]
    found = stacked.chain_potential(m, X[:2], None)
    assert type(found) is (PyroPotential if hooked else DirectPotential)
    assert sorted(s.name for s in found.sites) == sorted(expected)
    if not hooked:
        assert [s.name for s in DirectPotential(m, X[:2], None).sites] == [
            s.name for s in found.sites
        ]
