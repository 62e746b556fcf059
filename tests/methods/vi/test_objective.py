"""VIObjective called directly: its defaults (the ELBO at kl_weight 1), its refusals word for
word, a parameter list that does not match the guide's sites, and its draws on the parameters'
device whatever the default device (``meta`` standing in for a GPU). Its values against Pyro's
ELBOs and against each member's own fit are in ``test_fast_loss.py`` and ``test_stacked_vi*.py``.
"""

from __future__ import annotations

import pyro
import pytest
import torch

import bnn_pyro as bp
from bnn_pyro.methods.vi.objective import MODES, VIObjective


def _models(k: int, likelihood=lambda: bp.Gaussian("learned")):
    models = []
    X = torch.randn(k, 16, 3, dtype=torch.float64)
    y = X[..., :1] - X[..., 1:2]
    for i in range(k):
        torch.manual_seed(i)
        bnn = bp.VariationalBNN(bp.nn.mlp(3, [4], 1), likelihood()).double()
        bnn.setup_guide(X[i], y[i], (X[i], y[i]))
        models.append(bnn)
    return models, X, y


def _params(models, stacked: bool):
    guides, specs = [b.guide for b in models], models[0].guide.site_specs
    locs = [[g.locs[g.param_key(s.name)] for g in guides] for s in specs]
    rhos = [[g.rhos[g.param_key(s.name)] for g in guides] for s in specs]
    if not stacked:
        return [t[0] for t in locs], [t[0] for t in rhos]
    return [torch.stack(t) for t in locs], [torch.stack(t) for t in rhos]


def test_the_defaults_are_the_elbo_at_kl_weight_one():
    """Left unset, the mode is Trace_ELBO's estimator and the KL weight 1: the same number as
    ``mode="trace", kl_weight=1.0`` under the same draws, and another at kl_weight 2."""
    models, X, y = _models(1)
    locs, rhos = _params(models, False)

    def loss(**kw):
        pyro.set_rng_seed(0)
        return VIObjective(models, **kw.pop("build", {}))(locs, rhos, X[0], y[0], 64, **kw)[0]

    default = loss()
    assert torch.equal(default, loss(build={"mode": "trace"}, kl_weight=1.0))
    assert not torch.equal(default, loss(kl_weight=2.0))
    assert MODES == ("trace", "stl", "meanfield", "alpha")


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (dict(mode="renyi"),
         "mode must be one of ('trace', 'stl', 'meanfield', 'alpha'), got 'renyi'"),
        (dict(mode="trace", particles=3), "mode='trace' draws one particle, got particles=3"),
        (dict(mode="alpha", particles=1), "num_particles must be an int >= 2, got 1"),
        (dict(k=2), "K stacked models need one generator each (generators=)"),
    ],
)  # fmt: skip
def test_refusals_name_the_problem(build, message):
    build = dict(build)  # (the parameter is shared by every run of the test: not popped)
    models, _, _ = _models(build.pop("k", 1))
    with pytest.raises(ValueError) as info:
        VIObjective(models, **build)
    assert str(info.value) == message


def test_a_parameter_list_that_misses_a_site_is_refused():
    """One ``loc`` and one ``rho`` per guide site, in order: a list one short is an error, not
    a loss without that site."""
    models, X, y = _models(1)
    locs, rhos = _params(models, False)
    refusal = r"one loc and one rho per guide site \(5\).*got 4 locs and 4 rhos"
    with pytest.raises(ValueError, match=refusal):
        VIObjective(models)(locs[:-1], rhos[:-1], X[0], y[0], 64)


@pytest.mark.parametrize("stacked", [False, True])
@pytest.mark.parametrize("mode", ["trace", "alpha"])
def test_the_draws_follow_the_parameters_not_the_default_device(stacked, mode):
    """Under a ``meta`` default device the loss is the same float64 CPU number as outside it:
    every ``eps`` is drawn on the parameters' device (one model's from the global generator,
    stacked members' from theirs)."""
    models, X, y = _models(2 if stacked else 1)
    locs, rhos = _params(models, stacked)
    particles = 3 if mode == "alpha" else 0

    def loss():
        gens = [torch.Generator().manual_seed(s) for s in (4, 5)] if stacked else None
        objective = VIObjective(models, gens, mode=mode, particles=particles)
        pyro.set_rng_seed(0)
        return objective(locs, rhos, X if stacked else X[0], y if stacked else y[0], 64)[0]

    want = loss()
    with torch.device("meta"):
        got = loss()
    assert got.device.type == "cpu" and got.dtype == torch.float64
    assert torch.equal(got, want)


def test_one_models_particles_are_drawn_in_its_dtype():
    """A float64 model's alpha energy draws its P particles in float64, as Pyro's vectorized
    guide does: the direct energy equals AlphaELBO's under the same seed to float64 round-off
    (a float32 draw would be other numbers, ~1e-8 apart)."""
    from bnn_pyro.elbos.alpha import AlphaELBO

    models, X, y = _models(1)
    locs, rhos = _params(models, False)
    pyro.set_rng_seed(3)
    got = VIObjective(models, mode="alpha", particles=4)(locs, rhos, X[0], y[0], 64)[0]
    pyro.set_rng_seed(3)
    want = AlphaELBO(num_particles=4).differentiable_loss(
        models[0].model, models[0].guide, X[0], y[0], 64
    )
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=1e-12, atol=0)


@pytest.mark.parametrize("noise_scale", ["learned", 0.3])
@pytest.mark.parametrize("stacked", [False, True])
def test_noise_handed_in_is_the_noise_a_call_draws(stacked, noise_scale):
    """``noise(locs)`` draws what a call draws itself, in its order: handed back, the same loss
    and data term; zero noise puts every weight at its mean (the loss of the means, with no
    draw made, whatever the seed). With a fixed noise every site is real: one model then draws
    into the flat vector when not handed the noise, and takes it when handed."""
    k = 2 if stacked else 1
    models, X, y = _models(k, lambda: bp.Gaussian(noise_scale))
    locs, rhos = _params(models, stacked)
    x, t = (X, y) if stacked else (X[0], y[0])

    def gens():
        return [torch.Generator().manual_seed(7 + i) for i in range(k)] if stacked else None

    def call(noise=None, generators=None):
        pyro.set_rng_seed(5)
        objective = VIObjective(models, generators or gens())
        return objective(locs, rhos, x, t, 64, 0.5, noise=noise)

    pyro.set_rng_seed(5)
    noise = VIObjective(models, gens()).noise(locs)
    drawn, given = call(), call(noise)
    for a, b in zip(drawn, given, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=0)
    zeros = [torch.zeros_like(n) for n in noise]
    at_means = call(zeros)
    assert not torch.allclose(at_means[0], drawn[0])
    pyro.set_rng_seed(6)  # another seed, other generators: nothing is drawn
    other = [torch.Generator().manual_seed(30 + i) for i in range(k)] if stacked else None
    objective = VIObjective(models, other)
    again = objective(locs, rhos, x, t, 64, 0.5, noise=zeros)
    assert torch.equal(at_means[0], again[0]) and torch.equal(at_means[1], again[1])
