"""SG-MCMC chains run stacked (``bp.fit_stacked`` of ``sghmc``/``sgld``/``csghmc`` models): each
chain ends as its own seeded ``fit`` would, and what cannot be stacked is refused by name."""

from __future__ import annotations

import pyro.distributions as dist
import pytest
import torch

import bnn_pyro as bp
from bnn_pyro.exceptions import TrainingDivergedError
from bnn_pyro.methods.sgmcmc.method import SGMCMC
from bnn_pyro.methods.sgmcmc.potential import PyroPotential

# Float64 throughout: a chain's own fit steps with the stacked potential at K = 1 (or, where the
# rule refuses it, its Pyro trace), so the two runs differ by the round-off of a batched product
# of K blocks against one (about 1e-16 per step here); over the 60-odd steps of these runs that
# stays many orders below the 1e-9 the tests allow, while a wrong noise draw, minibatch or term
# moves the samples by O(0.01) or more.
TOL = 1e-9


def _data(task: str, chains: int = 3, rows: int = 40) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    X = torch.randn(chains, rows, 3, generator=g, dtype=torch.float64)
    if task == "classification":
        return X, (X[..., 0] > 0).long() + (X[..., 1] > 0).long()
    return X, X.sum(-1) + 0.3 * torch.randn(chains, rows, generator=g, dtype=torch.float64)


def _models(name, likelihoods, prior_scales=None, seed=1):
    torch.manual_seed(seed)
    out = []
    for i, likelihood in enumerate(likelihoods):
        width = 3 if isinstance(likelihood, bp.Categorical) else 1
        options = {} if prior_scales is None else {"prior": bp.IIDPrior(
            dist.Normal(0.0, prior_scales[i]))}  # fmt: skip
        net = bp.nn.mlp(3, [8], width).to(torch.float64)
        out.append(bp.make(name, net, likelihood, **options))
    return out


def _assert_each_chain_is_its_own_fit(stacked, alone, X, y, seeds, per_member, tol=TOL, **fit):
    for i, (m, a) in enumerate(zip(stacked, alone, strict=True)):
        a.fit(X[i] if per_member else X, y[i] if per_member else y, seed=seeds[i], **fit)
        assert m.kept_samples.shape == a.kept_samples.shape
        torch.testing.assert_close(m.kept_samples, a.kept_samples, rtol=0, atol=tol)
        torch.testing.assert_close(m.position, a.position, rtol=0, atol=tol)
        assert m.last_run == a.last_run
        x = X[i, :5] if per_member else X[:5]
        torch.testing.assert_close(m.predict(x, seed=0)[0], a.predict(x, seed=0)[0], atol=tol,
                                   rtol=0)  # fmt: skip


@pytest.mark.parametrize(
    ("name", "task", "likelihood", "per_member", "lr"),
    [
        ("sghmc", "regression", lambda: bp.Gaussian(scale="learned"), True, None),
        ("sghmc", "regression", lambda: bp.Gaussian(scale=0.3), False, None),
        ("sgld", "regression", lambda: bp.Gaussian(scale="learned"), True, 1e-3),
        ("csghmc", "classification", lambda: bp.Categorical(), True, None),
        # measured on minibatches: each step's gradient takes the control variate, from the
        # whole data set the stacked step holds (each chain's own rows)
        ("sghmc", "regression", lambda: bp.Gaussian(scale=0.3), True, "measured"),
        # SGLD measured on minibatches (a hidden layer: no dense preconditioner)
        ("sgld", "regression", lambda: bp.Gaussian(scale=0.3), True, "measured"),
    ],
)
def test_stacked_chains_equal_their_own_fits(name, task, likelihood, per_member, lr):
    """Three chains, and a stack of one (what a benchmark's final fit of a lone split runs)."""
    X, y = _data(task)
    if not per_member:
        X, y = X[0], y[0]
    seeds = [5, 6, 7]
    fit = {"epochs": 6, "batch_size": 16, "lr": lr, "progress": False}
    stacked = _models(name, [likelihood() for _ in seeds])
    history = bp.fit_stacked(stacked, X, y, seeds=seeds, **fit)
    assert len(history["member_loss"][-1]) == 3
    alone = _models(name, [likelihood() for _ in seeds])
    _assert_each_chain_is_its_own_fit(stacked, alone, X, y, seeds, per_member, **fit)
    one = _models(name, [likelihood()])
    bp.fit_stacked(one, X[:1] if per_member else X, y[:1] if per_member else y, seeds=seeds[:1],
                   **fit)  # fmt: skip
    _assert_each_chain_is_its_own_fit(one, _models(name, [likelihood()]), X, y, seeds[:1],
                                      per_member, **fit)  # fmt: skip


def test_chains_with_their_own_prior_and_noise_equal_their_own_fits():
    """Chains whose priors or likelihoods differ are scored one by one (the other branch of the
    stacked potential): still each chain's own fit."""
    X, y = _data("regression")
    seeds, scales = [0, 1, 2], [0.5, 1.0, 2.0]
    noises = [bp.Gaussian(scale=s) for s in (0.2, 0.3, 0.4)]
    stacked = _models("sghmc", noises, scales)
    fit = {"epochs": 5, "batch_size": 20, "progress": False}
    bp.fit_stacked(stacked, X, y, seeds=seeds, **fit)
    alone = _models("sghmc", [bp.Gaussian(scale=s) for s in (0.2, 0.3, 0.4)], scales)
    _assert_each_chain_is_its_own_fit(stacked, alone, X, y, seeds, True, **fit)


def test_chains_of_a_net_with_dropout_equal_their_own_fits():
    """``fit`` runs an SG-MCMC net with its dropout off (the potential is the net's
    deterministic output); the stacked chains' net must too (it was copied in train mode, and
    its masks made the stacked potential disagree with every chain's and the fit refused)."""
    X, y = _data("regression")
    seeds = [3, 4, 5]
    fit = {"epochs": 4, "batch_size": 16, "progress": False}

    def models():
        torch.manual_seed(1)
        return [bp.make("sghmc", bp.nn.mlp(3, [8], 1, dropout=0.2).double(), bp.Gaussian(0.3))
                for _ in seeds]  # fmt: skip

    stacked = models()
    bp.fit_stacked(stacked, X, y, seeds=seeds, **fit)
    _assert_each_chain_is_its_own_fit(stacked, models(), X, y, seeds, True, **fit)


def test_full_batch_chains_equal_their_own_fits():
    """``batch_size=None``: every step sees each chain's rows as they are, as ``fit`` does."""
    X, y = _data("regression")
    seeds = [3, 4, 5]
    fit = {"epochs": 20, "batch_size": None, "progress": False}
    stacked = _models("sghmc", [bp.Gaussian(scale=0.3) for _ in seeds])
    bp.fit_stacked(stacked, X, y, seeds=seeds, **fit)
    alone = _models("sghmc", [bp.Gaussian(scale=0.3) for _ in seeds])
    _assert_each_chain_is_its_own_fit(stacked, alone, X, y, seeds, True, **fit)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda ms: ms[:0], "at least one"),
        (
            lambda ms: [
                ms[0],
                bp.make("sghmc", bp.nn.mlp(3, [8], 1).double(), bp.Gaussian(0.3), mdecay=0.1),
            ],
            "the chains must share mdecay",
        ),  # fmt: skip
        (
            lambda ms: [ms[0], bp.make("sgld", bp.nn.mlp(3, [8], 1).double(), bp.Gaussian(0.3))],
            "the chains must share sampler",
        ),  # fmt: skip
        (
            lambda ms: [ms[0], bp.make("sghmc", bp.nn.mlp(3, [4], 1).double(), bp.Gaussian(0.3))],
            "^these models cannot run stacked: the models differ in their nets or their Bayesian "
            "sites$",
        ),  # fmt: skip
        (  # the same sites, another activation: one forward (the first chain's) would run both
            lambda ms: [
                ms[0],
                bp.make(
                    "sghmc", bp.nn.mlp(3, [8], 1, activation="tanh").double(), bp.Gaussian(0.3)
                ),
            ],
            r"^these models cannot run stacked: the models' nets differ in their layers \(an "
            r"activation, a dropout rate, \.\.\.\)$",
        ),  # fmt: skip
        (  # one likelihood class, but the second chain's noise is a latent site of its own
            lambda ms: [
                ms[0],
                bp.make("sghmc", bp.nn.mlp(3, [8], 1).double(), bp.Gaussian(scale="learned")),
            ],
            r"^the chains' likelihoods must share one setting: a noise learned by every chain or "
            r"fixed for every chain, one heteroscedastic min_scale$",
        ),  # fmt: skip
        (  # one output each, the same sites: the chains differ only in what they score
            lambda ms: [ms[0], bp.make("sghmc", bp.nn.mlp(3, [8], 1).double(), bp.Bernoulli())],
            r"the chains' likelihoods must be of one class; got \['Bernoulli', 'Gaussian'\]",
        ),  # fmt: skip
    ],
)
def test_what_cannot_run_stacked_is_refused_by_name(change, message):
    X, y = _data("regression")
    models = change(_models("sghmc", [bp.Gaussian(0.3), bp.Gaussian(0.3)]))
    with pytest.raises(ValueError, match=message):
        bp.fit_stacked(models, X[0], y[0], seeds=[0, 1][: len(models)], epochs=2,
                       progress=False)  # fmt: skip


def test_a_seed_per_chain_is_required_and_foreign_options_are_named():
    X, y = _data("regression")
    models = _models("sghmc", [bp.Gaussian(0.3), bp.Gaussian(0.3)])
    with pytest.raises(ValueError, match="one seed per model"):
        bp.fit_stacked(models, X[0], y[0], seeds=[0], epochs=2, progress=False)
    with pytest.raises(ValueError, match="kl_weight does not apply to SGMCMC models; their"):
        bp.fit_stacked(models, X[0], y[0], seeds=[0, 1], kl_weight=0.5, progress=False)


class _OwnObserve(bp.Gaussian):
    """A likelihood whose class observes its rows by code of its own."""

    def observe(self, f, y=None, **kwargs):
        return super().observe(f, y, **kwargs)


class _OwnLatents(bp.Gaussian):
    """A likelihood whose class draws its latents by code of its own: one chain reads them
    through Pyro's trace, K chains have no layout for them."""

    def sample_latents(self, f):
        return super().sample_latents(f)


def _hooked(models):
    models[1].bnn.net.register_forward_hook(lambda module, args, out: out)
    return models


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: _models("sghmc", [_OwnObserve(0.3), _OwnObserve(0.3)]),
            r"^these models cannot run stacked: _OwnObserve defines its own observe\(\), which "
            "the plain-torch objective does not read$",
        ),
        (
            lambda: _models("sghmc", [_OwnLatents(scale="learned"), _OwnLatents(scale="learned")]),
            r"^these models cannot run stacked: _OwnLatents draws latent sites of its own, which "
            "a stacked fit does not lay out for several models$",
        ),
        (
            lambda: _hooked(_models("sghmc", [bp.Gaussian(0.3), bp.Gaussian(0.3)])),
            r"^these models cannot run stacked: the nets have forward or backward hooks \(the "
            r"stacked copy would skip them\)$",
        ),
    ],
)
def test_what_the_stacked_potential_does_not_cover_is_refused_by_type(make, message, monkeypatch):
    """Read off the models' types before any work: a likelihood whose class scores its rows by
    code of its own, a net with hooks. No chain is set up (``start_run`` is never called) and
    nothing is kept."""
    X, y = _data("regression")
    models = make()
    started = []
    monkeypatch.setattr(SGMCMC, "start_run", lambda self, *a, **k: started.append(self))
    with pytest.raises(ValueError, match=message):
        bp.fit_stacked(models, X[:2], y[:2], seeds=[0, 1], epochs=2, progress=False)
    assert started == [] and all(m.potential is None for m in models)


def test_a_stacked_run_never_evaluates_a_chains_pyro_potential(monkeypatch):
    """The stacked potential is not compared with the chains' Pyro potentials at run time (the
    parametrised tests of ``test_sgmcmc_stacked_terms.py`` hold them equal): a run whose Pyro
    potentials would raise if called still runs, and ends as before."""
    X, y = _data("regression")
    ref = _models("sghmc", [bp.Gaussian(0.3), bp.Gaussian(0.3)])
    bp.fit_stacked(ref, X[:2], y[:2], seeds=[0, 1], epochs=2, progress=False)

    def refuse(*args, **kwargs):
        raise AssertionError("a Pyro potential was evaluated")

    monkeypatch.setattr(PyroPotential, "gradient", refuse)
    models = _models("sghmc", [bp.Gaussian(0.3), bp.Gaussian(0.3)])
    bp.fit_stacked(models, X[:2], y[:2], seeds=[0, 1], epochs=2, progress=False)
    for a, b in zip(models, ref, strict=True):
        assert torch.equal(a.kept_samples, b.kept_samples)


def test_a_diverging_chain_is_named():
    X, y = _data("regression")
    y = y.clone()
    y[1] = y[1] * 1e200  # chain 2's targets put its potential out of float64's range
    models = _models("sghmc", [bp.Gaussian(0.3), bp.Gaussian(0.3)])
    with pytest.raises(TrainingDivergedError, match=r"chain\(s\) \[2\] of 2"):
        bp.fit_stacked(models, X[:2], y[:2], seeds=[0, 1], epochs=2, progress=False)


def test_the_stacking_helpers_refuse_bad_input_by_name():
    from bnn_pyro.methods.sgmcmc.samplers import standard_normal
    from bnn_pyro.training.stacked_batches import shuffled_member_batches

    gens = [torch.Generator().manual_seed(s) for s in (0, 1)]
    with pytest.raises(ValueError, match="one generator per chain: 2 generators for a stack"):
        standard_normal(torch.zeros(3, 4), gens)
    x = torch.zeros(3, 5, 2)
    with pytest.raises(ValueError, match="one generator per member: 2 for 3 members"):
        shuffled_member_batches(x, x, 2, gens)
    with pytest.raises(ValueError, match="batch_size must be an int >= 1"):
        shuffled_member_batches(x[:2], x[:2], 0, gens)
