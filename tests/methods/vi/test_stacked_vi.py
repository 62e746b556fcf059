"""fit_stacked: K VariationalBNN fits in one pass end where K one-by-one fits end."""

from __future__ import annotations

import pyro.distributions as dist
import pytest
import torch

import bnn_pyro as bp
from bnn_pyro.methods.vi.stacked import why_not_stacked_vi
from bnn_pyro.stacking import fit_stacked

K = 3


def _data(task: str, n: int = 100, members: int | None = None):
    g = torch.Generator().manual_seed(0)
    shape = (n, 4) if members is None else (members, n, 4)
    X = torch.randn(*shape, generator=g)
    raw = X[..., :2].sum(-1, keepdim=True) + 0.1 * torch.randn(*shape[:-1], 1, generator=g)
    if task == "categorical":
        return X, (raw[..., 0] > 0).long() + (raw[..., 0] > 1).long(), 3
    if task == "bernoulli":
        return X, (raw > 0).float(), 1
    return X, raw, 1


class _Shifted(bp.Gaussian):
    """A user's Gaussian whose mean is the net's output plus one: only ``loc_scale`` is its own,
    so the plain-torch objectives (one model's and the stacked one) read it as Pyro does."""

    def loc_scale(self, f, latents):
        loc, scale = super().loc_scale(f, latents)
        return loc + 1.0, scale


CASES = {
    "a user's gaussian": (lambda k: _Shifted(0.2 + 0.1 * k), None, "regression"),
    "fixed noise": (lambda k: bp.Gaussian(0.2 + 0.1 * k), None, "regression"),
    "learned noise": (lambda k: bp.Gaussian("learned"), None, "regression"),
    "heteroscedastic": (lambda k: bp.HeteroscedasticGaussian(), None, "regression"),
    "categorical": (lambda k: bp.Categorical(), None, "categorical"),
    "bernoulli": (lambda k: bp.Bernoulli(), None, "bernoulli"),
    "layerwise prior": (
        lambda k: bp.Gaussian(0.3),
        lambda k: bp.LayerwiseNormalPrior("radford", gain=1.0 + k),
        "regression",
    ),
    "laplace prior": (  # no shared loc and scale: each member's own density, member by member
        lambda k: bp.Gaussian(0.3),
        lambda k: bp.IIDPrior(dist.Laplace(0.0, 1.0 + 0.2 * k)),
        "regression",
    ),
    "local reparameterization": (lambda k: bp.Gaussian("learned"), None, "regression", "local"),
    "flipout": (lambda k: bp.Categorical(), None, "categorical", "flipout"),
    # nets with nn.Dropout: each member's masks from its own generator, drawn by F.dropout
    "dropout": (lambda k: bp.Gaussian("learned"), None, "regression"),
    "dropout, local reparameterization": (lambda k: bp.Categorical(), None, "categorical", "local"),
}


def _models(case: str, out: int):
    likelihood, prior, _, *estimator = CASES[case]
    out = likelihood(0).output_dim(out) if case == "heteroscedastic" else out
    models = []
    for k in range(K):
        torch.manual_seed(100 + k)  # each member's own initial weights
        models.append(
            bp.VariationalBNN(
                bp.nn.mlp(4, [8], out, dropout=0.2 if "dropout" in case else 0.0),
                likelihood(k),
                prior=None if prior is None else prior(k),
                local_reparameterization=estimator[0] if estimator else False,
            )
        )
    return models


def _one_by_one(models, X, y, per_member: bool, **fit):
    histories = []
    for k, bnn in enumerate(models):
        xk, yk = (X[k], y[k]) if per_member else (X, y)
        histories.append(bnn.fit(xk, yk, seed=k, progress=False, **fit))
    return histories


def _assert_same_fits(alone, histories, together, history):
    """The stacked fit's members end as the one-by-one fits: a few steps of the same arithmetic
    batched differently (per-member noise streams and orders are the one-by-one ones), so
    float32 round-off only, ~1e-7 relative per operation."""
    for a, b in zip(alone, together, strict=True):
        for p, q in zip(a.parameters(), b.parameters(), strict=True):
            assert torch.allclose(p, q, rtol=1e-4, atol=1e-5)
    for k in range(K):
        got = [row[k] for row in history["member_loss"]]
        assert got == pytest.approx(histories[k]["loss"], rel=1e-4)


@pytest.mark.parametrize("per_member", [False, True], ids=["shared data", "own data"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_stacked_fit_is_each_models_own_fit(case, per_member):
    X, y, out = _data(CASES[case][2], members=K if per_member else None)
    fit = dict(epochs=4, batch_size=32, lr=1e-2)
    alone = _models(case, out)
    histories = _one_by_one(alone, X, y, per_member, **fit)
    together = _models(case, out)
    history = fit_stacked(together, X, y, seeds=list(range(K)), progress=False, **fit)
    _assert_same_fits(alone, histories, together, history)
    x_new = X[0, :5] if per_member else X[:5]
    for a, b in zip(alone, together, strict=True):  # the models predict as their own fits do
        assert torch.allclose(
            a.predict(x_new, num_samples=20, seed=0)[0],
            b.predict(x_new, num_samples=20, seed=0)[0],
            rtol=1e-4,
            atol=1e-5,
        )


@pytest.mark.parametrize("elbo", ["stl", "meanfield"])
@pytest.mark.parametrize(
    "case", ["learned noise", "laplace prior", "local reparameterization", "categorical"]
)
def test_the_other_one_particle_objectives_are_each_models_own_fit_too(case, elbo):
    """``elbo="stl"`` (the guide's density at detached parameters) and ``"meanfield"`` (closed-
    form KL where Pyro has one: the Normal priors and the learned noise's LogNormal; the draw's
    log q - log p for the Laplace prior) stack as the ELBO does: each member ends where its own
    ``fit(elbo=...)`` ends, and elsewhere than under the default ELBO (the objective is passed
    on, not dropped). Tolerance as above: round-off only."""
    X, y, out = _data(CASES[case][2])
    fit = dict(epochs=3, batch_size=32, lr=1e-2, elbo=elbo)
    alone = _models(case, out)
    histories = _one_by_one(alone, X, y, False, **fit)
    together = _models(case, out)
    history = fit_stacked(together, X, y, seeds=list(range(K)), progress=False, **fit)
    _assert_same_fits(alone, histories, together, history)
    trace = _models(case, out)
    fit_stacked(trace, X, y, seeds=list(range(K)), progress=False, **{**fit, "elbo": "trace"})
    moved = max((p - q).abs().max().item() for p, q in zip(
        together[0].parameters(), trace[0].parameters(), strict=True))  # fmt: skip
    assert moved > 1e-4


def test_full_batch_and_a_schedule_match_too():
    X, y, _ = _data("regression")
    X, y = X.numpy(), y.numpy()  # array-likes, as fit takes them
    fit = dict(epochs=5, batch_size=1000, lr=3e-2, lr_schedule="constant", kl_weight=0.5)
    alone = _models("fixed noise", 1)
    _one_by_one(alone, X, y, False, **fit)
    together = _models("fixed noise", 1)
    fit_stacked(together, X, y, seeds=[0, 1, 2], progress=False, **fit)
    for a, b in zip(alone, together, strict=True):
        for p, q in zip(a.parameters(), b.parameters(), strict=True):
            assert torch.allclose(p, q, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("elbo", ["trace", "alpha"])
def test_a_kl_weight_schedule_is_each_models_own_too(elbo):
    # fit's kl_weight may be fn(epoch) (a warm-up); the stacked run sets the same beta at the
    # start of each epoch, so each member ends where its own fit ends (round-off only)
    X, y, _ = _data("regression")
    warm = bp.training.callbacks.linear_annealing(3)  # beta 0, 1/3, 2/3, then 1
    particles = 2 if elbo == "alpha" else 1
    fit = dict(epochs=5, batch_size=32, lr=1e-2, kl_weight=warm, elbo=elbo, num_particles=particles)
    alone = _models("learned noise", 1)
    histories = _one_by_one(alone, X, y, False, **fit)
    assert [round(b, 4) for b in histories[0]["kl_weight"]] == [0.0, 0.3333, 0.6667, 1.0, 1.0]
    together = _models("learned noise", 1)
    history = fit_stacked(together, X, y, seeds=list(range(K)), progress=False, **fit)
    _assert_same_fits(alone, histories, together, history)
    plain = _models("learned noise", 1)  # beta 1 throughout ends elsewhere: the schedule is used
    fit_stacked(plain, X, y, seeds=list(range(K)), progress=False, **{**fit, "kl_weight": 1.0})
    moved = plain[0].guide.locs["net__0__weight"] - together[0].guide.locs["net__0__weight"]
    assert moved.abs().max() > 1e-3
    with pytest.raises(ValueError, match="kl_weight must be a finite float >= 0"):
        fit_stacked(plain, X, y, seeds=[0, 1, 2], progress=False, epochs=2, kl_weight=lambda e: -1)
    with pytest.raises(ValueError, match="kl_weight"):
        fit_stacked(plain, X, y, seeds=[0, 1, 2], progress=False, kl_weight=-0.5)


@pytest.mark.parametrize("per_member", [False, True], ids=["shared data", "own data"])
def test_map_initialised_stacked_fit_is_each_models_own(per_member):
    X, y, _ = _data("regression", members=K if per_member else None)
    fit = dict(epochs=4, batch_size=32, lr=1e-2, init="map", map_epochs=3)
    alone = _models("learned noise", 1)
    _one_by_one(alone, X, y, per_member, **fit)
    together = _models("learned noise", 1)
    fit_stacked(together, X, y, seeds=list(range(K)), progress=False, **fit)
    # 12 MAP steps one member at a time, then 16 stacked SVI steps: round-off only, as above
    for a, b in zip(alone, together, strict=True):
        assert a.map_history["loss"] == b.map_history["loss"]  # the same MAP phase, alone
        for p, q in zip(a.parameters(), b.parameters(), strict=True):
            assert torch.allclose(p, q, rtol=1e-4, atol=1e-5)
    plain = _models("learned noise", 1)  # without the MAP phase the members end elsewhere
    fit_stacked(plain, X, y, seeds=list(range(K)), progress=False, epochs=4, batch_size=32)
    moved = plain[0].guide.locs["net__0__weight"] - together[0].guide.locs["net__0__weight"]
    assert moved.abs().max() > 1e-2
    with pytest.raises(ValueError, match="map_epochs is used only with init='map'"):
        fit_stacked(plain, X, y, seeds=list(range(K)), progress=False, map_epochs=2)


def test_callbacks_see_the_models_as_trained_so_far():
    X, y, _ = _data("regression")
    models = _models("fixed noise", 1)
    seen = []

    def callback(bnns, epoch, history):
        assert list(bnns) == models  # the models themselves (in a ModuleList)
        seen.append(float(bnns[1].guide.locs["net__0__weight"].detach().sum()))

    fit_stacked(models, X, y, seeds=[0, 1, 2], epochs=3, progress=False, callbacks=[callback])
    assert len(seen) == 3 and len(set(seen)) == 3
    assert seen[-1] == pytest.approx(float(models[1].guide.locs["net__0__weight"].detach().sum()))


def test_what_cannot_be_stacked_is_refused_by_name():
    X, y, _ = _data("regression")
    make = lambda **kw: bp.VariationalBNN(bp.nn.mlp(4, [8], 1), bp.Gaussian(0.3), **kw)  # noqa: E731
    assert "differ in local" in why_not_stacked_vi([make(local_reparameterization=True), make()])
    assert "learned prior" in why_not_stacked_vi([make(prior=bp.LearnedNormalPrior())])
    other = bp.VariationalBNN(bp.nn.mlp(4, [9], 1), bp.Gaussian(0.3))
    assert "differ" in why_not_stacked_vi([make(), other])
    assert "guide" in why_not_stacked_vi([make(guide="normal")])
    het = lambda m: bp.VariationalBNN(bp.nn.mlp(4, [8], 2), bp.HeteroscedasticGaussian(m))  # noqa: E731
    assert why_not_stacked_vi([het(1e-3), het(1e-3)]) is None
    assert "min_scale" in why_not_stacked_vi([het(1e-3), het(1e-2)])
    hooked = make()
    hooked.net[0].register_forward_hook(lambda module, inputs, output: None)
    assert "hooks" in why_not_stacked_vi([make(), hooked])
    with pytest.raises(ValueError, match="one seed per model"):
        fit_stacked([make(), make()], X, y, seeds=[0], epochs=1, progress=False)
    with pytest.raises(TypeError, match="X must be numeric"):
        fit_stacked([make()], "rows", y, seeds=[0], progress=False)
    with pytest.raises(ValueError, match="elementwise"):
        fit_stacked([make()], X, y, seeds=[0], optimizer=torch.optim.LBFGS, progress=False)


@pytest.mark.parametrize(
    "case", ["fixed noise", "learned noise", "heteroscedastic", "categorical", "layerwise prior"]
)
def test_stacked_alpha_fit_is_each_models_own_fit(case):
    """``elbo="alpha"``: each member's P draws come from its own stream in the order of Pyro's
    particle plate, so the stacked energy is each member's own ``fit(elbo="alpha")``."""
    X, y, out = _data(CASES[case][2], members=K)
    fit = dict(epochs=3, batch_size=32, lr=1e-2, elbo="alpha", num_particles=4)
    alone = _models(case, out)
    histories = _one_by_one(alone, X, y, True, **fit)
    together = _models(case, out)
    history = fit_stacked(together, X, y, seeds=list(range(K)), progress=False, **fit)
    _assert_same_fits(alone, histories, together, history)
    plain = _models(case, out)  # the ELBO ends elsewhere: the test can tell the two apart
    fit_stacked(plain, X, y, seeds=list(range(K)), progress=False, epochs=3, batch_size=32)
    moved = plain[0].guide.locs["net__0__weight"] - together[0].guide.locs["net__0__weight"]
    assert moved.abs().max() > 1e-4


def test_stacked_alpha_refuses_what_it_does_not_cover():
    X, y, _ = _data("regression")
    models = _models("local reparameterization", 1)
    with pytest.raises(ValueError, match="weight-space estimator only"):
        fit_stacked(models, X, y, seeds=[0, 1, 2], elbo="alpha", progress=False)
    # with dropout a stacked alpha fit ran, but its members ended elsewhere than their own fits
    # (their particles' masks fell on another memory layout): refused, before any step
    dropout = _models("dropout", 1)
    with pytest.raises(ValueError, match="not stacked for nets with dropout"):
        fit_stacked(dropout, X, y, seeds=[0, 1, 2], elbo="alpha", progress=False)
    assert not list(dropout[0].parameters())  # no guide was set up
    fit_stacked(dropout, X, y, seeds=[0, 1, 2], epochs=1, progress=False)  # elbo="trace" runs
    for bad in [dict(elbo="stl", num_particles=2), dict(elbo="trace", num_particles=3)]:
        with pytest.raises(ValueError, match="fit_stacked takes elbo"):
            fit_stacked(_models("fixed noise", 1), X, y, seeds=[0, 1, 2], progress=False, **bad)
    for bad in [0, 2.5, True]:
        with pytest.raises((TypeError, ValueError), match="num_particles"):
            fit_stacked(_models("fixed noise", 1), X, y, seeds=[0, 1, 2], progress=False,
                        elbo="alpha", num_particles=bad)  # fmt: skip
