"""The VI engine (bnn_pyro.methods.vi.engine): ``fit`` steps with the plain-torch objective or
Pyro's ``SVI``, chosen by type before any work; the two fit alike; one step class serves one
model and K stacked."""

from __future__ import annotations

import math
import re
import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import Trace_ELBO

import bnn_pyro as bp
import bnn_pyro.methods.vi.svi_model as svi_model
from bnn_pyro.exceptions import TrainingDivergedError
from bnn_pyro.methods.vi.engine import ObjectiveStep, direct_objective, why_not_direct
from bnn_pyro.methods.vi.svi import GuardedSVI
from bnn_pyro.priors import HierarchicalNormalPrior
from bnn_pyro.stacking import fit_stacked

FIT = dict(epochs=6, batch_size=16, progress=False, seed=0)


def _data(task="regression"):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(64, 4, generator=g)
    y = X[:, :2].sum(-1, keepdim=True) + 0.1 * torch.randn(64, 1, generator=g)
    return X, ((y[:, 0] > 0).long() if task == "categorical" else y)


class _Contaminated(bp.Gaussian):
    """A user's Gaussian with a latent noise share ``c`` in (0, 1) of its own."""

    def sample_latents(self, f):
        return {"likelihood.c": pyro.sample("likelihood.c", dist.Beta(2.0, 2.0))}

    def loc_scale(self, f, latents):
        c = latents["likelihood.c"]
        return f, 0.2 + (c.unsqueeze(-1) if c.dim() else c)


class _OwnObserve(bp.Gaussian):
    """A user's Gaussian that observes its rows by code of its own (here: Pyro's, unchanged),
    which the plain-torch objective cannot know."""

    def observe(self, f, y, latents, dataset_size=None):
        super().observe(f, y, latents, dataset_size)


def _model(likelihood=None, **options):
    torch.manual_seed(0)
    out = 2 if isinstance(likelihood, bp.Categorical) else 1
    return bp.VariationalBNN(bp.nn.mlp(4, [6], out), likelihood or bp.Gaussian(0.3), **options)


def _hooked():
    bnn = _model()
    bnn.net[0].register_forward_pre_hook(lambda module, inputs: None)
    return bnn


# (model, fit options, the reason why_not_direct gives; None: the plain-torch objective)
CHOICES = {
    "the default": (_model, {}, None),
    "meanfield": (_model, {"elbo": "meanfield"}, None),
    "stl": (_model, {"elbo": "stl"}, None),
    "alpha": (_model, {"elbo": "alpha"}, None),
    "alpha, four particles": (_model, {"elbo": "alpha", "num_particles": 4}, None),
    "learned noise": (lambda: _model(bp.Gaussian("learned")), {}, None),
    "categorical": (lambda: _model(bp.Categorical()), {}, None),
    "local reparameterization": (lambda: _model(local_reparameterization=True), {}, None),
    "a user's latent, one particle": (lambda: _model(_Contaminated()), {}, None),
    "scale mixture prior": (lambda: _model(prior=bp.ScaleMixturePrior()), {}, None),
    "a torch optimizer class": (_model, {"optimizer": torch.optim.SGD, "lr": 1e-5}, None),
    "an autoguide": (
        lambda: _model(guide="normal"),
        {},
        "guide='normal' is not the library's mean-field guide (guide='meanfield')",
    ),
    "a prior with latents": (
        lambda: _model(prior=HierarchicalNormalPrior()),
        {},
        "the prior has latent sites of its own (a hierarchical scale), which Pyro scores",
    ),
    "hooks": (
        _hooked,
        {},
        "the net's modules have forward or backward hooks, which the plain-torch twin skips",
    ),
    "two particles": (
        _model,
        {"num_particles": 2},
        "elbo='trace' with num_particles=2: Pyro's vectorized particles",
    ),
    "an ELBO instance": (
        _model,
        {"elbo": Trace_ELBO(max_plate_nesting=1)},
        "elbo is an ELBO instance (Trace_ELBO): Pyro's SVI runs it as given",
    ),
    "a pyro optimizer": (
        _model,
        {"optimizer": pyro.optim.Adam({"lr": 0.01})},
        "the optimizer is a pyro.optim one (PyroOptim), which SVI steps",
    ),
    "a user's observe": (
        lambda: _model(_OwnObserve(0.3)),
        {},
        "_OwnObserve defines its own observe(), which the plain-torch objective does not read",
    ),
    "a user's latent, several particles": (
        lambda: _model(_Contaminated()),
        {"elbo": "alpha"},
        "_Contaminated draws latent sites of its own, laid out under several particles by "
        "Pyro's vectorized plate",
    ),
    "alpha with local reparameterization": (
        lambda: _model(local_reparameterization=True),
        {"elbo": "alpha"},
        "elbo='alpha' with local reparameterization: Pyro's vectorized particles",
    ),
}


@pytest.mark.parametrize("case", sorted(CHOICES))
def test_fit_runs_the_engine_its_types_choose_and_no_other(monkeypatch, case):
    """``why_not_direct`` names the reason before the guide exists, and ``fit`` runs that
    engine alone: Pyro's ELBO is never called on the objective's path (no first-step
    comparison), and the objective never on Pyro's."""
    make, options, reason = CHOICES[case]
    bnn = make()
    elbo, particles = options.get("elbo", "trace"), options.get("num_particles", 1)
    assert why_not_direct(bnn, elbo, particles, options.get("optimizer")) == reason
    calls = {"svi": 0, "objective": 0}
    svi_step, objective_step = GuardedSVI.step, ObjectiveStep.__call__

    def count(name, fn):
        def counted(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)

        return counted

    monkeypatch.setattr(GuardedSVI, "step", count("svi", svi_step))
    monkeypatch.setattr(ObjectiveStep, "__call__", count("objective", objective_step))
    X, y = _data("categorical" if isinstance(bnn.likelihood, bp.Categorical) else "regression")
    with warnings.catch_warnings():  # one epoch: the stds have not moved (collapse warnings)
        warnings.simplefilter("ignore")
        bnn.fit(X, y, **{**FIT, "epochs": 1, **options})
    used, other = ("objective", "svi") if reason is None else ("svi", "objective")
    assert calls == {used: 4, other: 0}  # 64 rows in minibatches of 16


def _fit(monkeypatch, engine: str, make, **options):
    """A fit on the engine named: the objective's where the model's types choose it, Pyro's
    ``SVI`` (with the library's ELBOs) when ``why_not_direct`` is made to refuse it."""
    if engine == "svi":
        monkeypatch.setattr(svi_model, "why_not_direct", lambda *args: "the test's choice")
    bnn = make()
    task = "categorical" if isinstance(bnn.likelihood, bp.Categorical) else "regression"
    X, y = _data(task)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        history = bnn.fit(X, y, **{**FIT, **options})
    monkeypatch.undo()
    return bnn, history


FITS = {
    "trace": (lambda: _model(bp.Gaussian("learned")), {}),
    "stl": (lambda: _model(bp.Gaussian("learned")), {"elbo": "stl"}),
    "meanfield": (lambda: _model(bp.Gaussian("learned")), {"elbo": "meanfield"}),
    "alpha": (lambda: _model(bp.Gaussian("learned")), {"elbo": "alpha"}),
    "categorical, annealed": (
        lambda: _model(bp.Categorical()),
        {"kl_weight": lambda epoch: min(1.0, (epoch + 1) / 4)},
    ),
    "local reparameterization": (lambda: _model(local_reparameterization=True), {}),
    "a user's latent": (lambda: _model(_Contaminated()), {"elbo": "meanfield"}),
}


@pytest.mark.parametrize("case", sorted(FITS))
def test_the_two_engines_fit_alike(monkeypatch, case):
    """Whole fits (24 Adam steps, a cosine schedule) from the same seed on either engine: the
    same draws, so only float32 rounding of the same sums in another order separates them
    (1e-4 relative after 24 steps; the per-step losses agree to 1e-5, test_fast_loss.py)."""
    make, options = FITS[case]
    fast, fast_history = _fit(monkeypatch, "objective", make, **options)
    slow, slow_history = _fit(monkeypatch, "svi", make, **options)
    for a, b in zip(fast.parameters(), slow.parameters(), strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5)
    for key in ("loss", "nll", "kl_weight"):
        assert fast_history[key] == pytest.approx(slow_history[key], rel=1e-4), key
    assert fast_history["std/net.0.weight"] == pytest.approx(
        slow_history["std/net.0.weight"], rel=1e-4
    )


def test_compile_is_refused_by_name_where_fit_runs_svi():
    X, y = _data()
    for make, options, words in [
        (_model, {"optimizer": pyro.optim.Adam({"lr": 0.01})}, "pyro.optim"),
        (lambda: _model(_OwnObserve(0.3)), {}, "defines its own observe()"),
    ]:
        bnn = make()
        with pytest.raises(ValueError, match=r"^compile=True compiles the plain-torch loss, and "):
            bnn.fit(X, y, compile=True, **FIT, **options)
        with pytest.raises(ValueError, match=re.escape(words)):
            bnn.fit(X, y, compile=True, **FIT, **options)
        assert not bnn.is_fitted()  # refused before any work


class _Fixed:
    """An objective whose loss and data part are given per call: ``(loss, nll)`` of a
    parameter ``w`` at 0 (stepped with a zero learning rate, so it stays there): the step's
    bookkeeping is checked against plain arithmetic."""

    def __init__(self, values):
        self.w = torch.nn.Parameter(torch.zeros(torch.as_tensor(values[0][0]).shape))
        self.values, self.betas = iter(values), []

    def __call__(self, x, y, beta):
        loss, nll = next(self.values)
        self.betas.append(beta)
        loss = torch.as_tensor(loss, dtype=torch.float32)
        return loss + self.w, torch.as_tensor(nll, dtype=torch.float32)


def test_one_models_row_is_the_mean_of_its_minibatch_estimates():
    objective = _Fixed([(3.0, 1.0), (5.0, 2.0), (7.0, 4.0)])
    step = ObjectiveStep(objective, torch.optim.SGD([objective.w], lr=0.0), lambda e: 0.5)
    step.start_epoch(0)
    values = [step(None, None) for _ in range(2)]
    assert values == [3.0, 5.0] and objective.betas == [0.5, 0.5]
    # loss 4, nll 1.5, kl = (4 - 1.5) / 0.5
    assert step.end_epoch(values, [1, 1]) == {"loss": 4.0, "nll": 1.5, "kl": 5.0, "kl_weight": 0.5}
    step.start_epoch(1)  # a new epoch starts from nothing
    assert step.end_epoch([step(None, None)], [1])["loss"] == 7.0


def test_k_members_rows_add_each_members_loss_and_a_zero_weight_has_no_kl():
    objective = _Fixed([([1.0, 3.0], [0.5, 1.0]), ([3.0, 5.0], [1.5, 2.0])])
    step = ObjectiveStep(objective, torch.optim.SGD([objective.w], lr=0.0), 0.0, desc="stacked")
    step.start_epoch(0)
    values = [step(None, None) for _ in range(2)]
    assert values == [2.0, 4.0]  # the members' mean of each step
    row = step.end_epoch(values, [1, 1])
    assert row["member_loss"] == [2.0, 4.0] and row["loss"] == 3.0 and row["nll"] == 1.25
    assert math.isnan(row["kl"]) and row["kl_weight"] == 0.0


@pytest.mark.parametrize(
    ("values", "desc", "message"),
    [
        ((float("nan"), 0.0), None, r"^the loss is nan$"),
        ((float("inf"), 0.0), "mine", r"^mine: the loss is inf$"),
        (
            ([1.0, float("nan"), float("inf")], [0.0, 0.0, 0.0]),
            "fit_stacked",
            r"^fit_stacked: the loss of member\(s\) \[2, 3\] of 3 is not finite$",
        ),
    ],
)
def test_a_non_finite_loss_is_refused_before_the_optimizer_moves(values, desc, message):
    objective = _Fixed([values])  # (a step of lr 0.1 would move w off 0)
    step = ObjectiveStep(objective, torch.optim.SGD([objective.w], lr=0.1), desc=desc)
    step.start_epoch(0)
    with pytest.raises(TrainingDivergedError, match=message):
        step(None, None)
    assert objective.w.grad is None and not objective.w.detach().any()


def test_a_stacked_fits_history_has_its_members_own_nll_and_kl():
    """The stacked fit steps with the same ``ObjectiveStep``: its ``nll`` and ``kl`` are the
    members' mean of what their own fits record (float rounding of the stacked sums)."""
    X, y = _data()
    alone = [_model(bp.Gaussian("learned")) for _ in range(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        own = [b.fit(X, y, **{**FIT, "seed": s}) for s, b in enumerate(alone)]
        together = [_model(bp.Gaussian("learned")) for _ in range(2)]
        options = {k: v for k, v in FIT.items() if k != "seed"}
        history = fit_stacked(together, X, y, seeds=[0, 1], **options)
    for key in ("loss", "nll", "kl"):
        mean = [(a + b) / 2 for a, b in zip(own[0][key], own[1][key], strict=True)]
        assert history[key] == pytest.approx(mean, rel=1e-4), key
    assert [m[1] for m in history["member_loss"]] == pytest.approx(own[1]["loss"], rel=1e-4)


def test_the_lightning_module_steps_with_the_engine_fit_chooses():
    pytest.importorskip("lightning")
    from bnn_pyro.methods.vi.lightning import BNNLightningModule

    X, y = _data()
    module = BNNLightningModule(_model(), dataset_size=64, example=(X[:4], y[:4]))
    assert module.direct is not None
    pyro.set_rng_seed(3)
    got = module.loss(X[:16], y[:16])
    pyro.set_rng_seed(3)
    method = module.method
    want = module.elbo.differentiable_loss(method.model, method.guide, X[:16], y[:16], 64)
    assert torch.allclose(got, want, rtol=1e-5)
    autoguide = BNNLightningModule(_model(guide="normal"), 64, (X[:4], y[:4]))
    assert autoguide.direct is None


def test_direct_objective_builds_each_named_objective():
    bnn = _model()
    X, y = _data()
    bnn.setup_guide(X, bnn.prepare_targets(y, X))
    made = {e: direct_objective(bnn, e, 1) for e in ("trace", "stl", "meanfield", "alpha")}
    assert [made[e].objective.mode for e in made] == ["trace", "stl", "meanfield", "alpha"]
    assert made["alpha"].objective.particles == 10  # num_particles 1: the alpha default
    assert direct_objective(bnn, "alpha", 4).objective.particles == 4


def test_a_fixed_kl_weight_holds_from_construction_and_a_schedule_is_asked_per_epoch():
    objective = _Fixed([(1.0, 0.0), (1.0, 0.0)])
    step = ObjectiveStep(objective, torch.optim.SGD([objective.w], lr=0.0))
    step(None, None)  # before any start_epoch: the default weight, 1
    assert objective.betas == [1.0]
    assert step.end_epoch([1.0], [1])["loss"] == 1.0  # what was stepped so far is the epoch
    asked = []
    scheduled = _Fixed([(1.0, 0.0)])
    step = ObjectiveStep(
        scheduled, torch.optim.SGD([scheduled.w], lr=0.0), lambda e: asked.append(e) or 0.25 + e
    )
    assert asked == [] and math.isnan(step.beta)  # not asked before its epoch starts
    step.start_epoch(1)
    step(None, None)
    assert asked == [1] and scheduled.betas == [1.25]


def test_the_objectives_own_distributions_are_not_validated():
    """A scale that underflowed to 0 inside the objective is a non-finite loss, which the step
    refuses as a divergence, not a distribution's ValueError (Pyro's validation is on here, as
    a user's session has it)."""
    w = torch.nn.Parameter(torch.zeros(()))

    def objective(x, y, beta):
        loss = -dist.Normal(w, torch.zeros(())).log_prob(torch.ones(()))
        return loss, loss.detach()

    step = ObjectiveStep(objective, torch.optim.SGD([w], lr=0.1))
    with pyro.validation_enabled(True):
        with pytest.raises(TrainingDivergedError, match=r"^the loss is (inf|nan)$"):
            step(None, None)
        with pytest.raises(ValueError, match="scale"):  # what validation would have said
            dist.Normal(w, torch.zeros(()))


def test_bad_arguments_are_refused_by_name_before_any_work():
    w = torch.nn.Parameter(torch.zeros(()))
    opt = torch.optim.SGD([w], lr=0.1)
    with pytest.raises(TypeError, match=r"^objective must be callable, got int$"):
        ObjectiveStep(3, opt)
    with pytest.raises(TypeError, match=r"^optimizer must be a torch optimizer, got list$"):
        ObjectiveStep(lambda x, y, beta: (w, w), [w])
    with pytest.raises(
        ValueError,
        match=r"^elbo must be one of \('trace', 'stl', 'meanfield', 'alpha'\), got 'renyi'$",
    ):
        direct_objective(_model(), "renyi", 1)
