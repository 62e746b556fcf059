"""Guides: the mean-field guide's init and isolation, Pyro autoguides, a plain SVI loop."""

from __future__ import annotations

import pyro
import pyro.optim
import pytest
import torch
from pyro.infer import SVI, Trace_ELBO
from pyro.infer.autoguide import AutoDelta, AutoLowRankMultivariateNormal, AutoNormal

import bnn_pyro as bp


def _ours_in_param_store() -> list[str]:
    # (autoguides keep theirs there, under a unique name per instance; see guides.py)
    return [k for k in pyro.get_param_store().keys() if k.startswith(("guide.", "net."))]


def _bnn(guide="meanfield", **kwargs) -> bp.VariationalBNN:
    torch.manual_seed(0)
    return bp.VariationalBNN(bp.nn.mlp(3, [6], 1), bp.Gaussian(scale=0.2), guide=guide, **kwargs)


def test_mean_field_guide_starts_at_the_nets_own_weights(regression_data):
    X, y = regression_data
    torch.manual_seed(4)
    net = bp.nn.mlp(3, [6], 1)
    bnn = bp.VariationalBNN(net, bp.Gaussian(scale=0.2), init_scale=0.03)
    bnn.fit(X, y, epochs=0, progress=False)
    means, scales = bnn.guide.means(), bnn.guide.scales()
    assert torch.equal(means["net.0.weight"], net[0].weight.detach())
    assert torch.equal(means["net.2.bias"], net[2].bias.detach())
    assert not torch.equal(means["net.0.weight"], torch.zeros(6, 3))
    for s in scales.values():
        assert torch.allclose(s, torch.full_like(s, 0.03))
    assert isinstance(net[0], torch.nn.Linear) and not isinstance(net[0], pyro.nn.PyroModule)


def test_two_models_never_share_parameters(regression_data):
    X, y = regression_data
    first, second = _bnn(), _bnn()
    first.fit(X, y, epochs=1, progress=False)
    second.fit(X, y, epochs=1, progress=False)
    before = {k: v.clone() for k, v in second.state_dict().items()}
    first.fit(X, y, epochs=20, progress=False)
    after = second.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert not _ours_in_param_store()  # nothing in Pyro's global store


@pytest.mark.parametrize("guide", [AutoNormal, AutoLowRankMultivariateNormal, AutoDelta, "normal"])
def test_pyro_autoguides_work_and_stay_separate(regression_data, guide):
    X, y = regression_data
    first, second = _bnn(guide), _bnn(guide)
    history = first.fit(X, y, epochs=40, batch_size=32, progress=False, seed=0)
    assert history["loss"][-1] < history["loss"][0]
    second.fit(X, y, epochs=1, progress=False, seed=0)
    before = {k: v.clone() for k, v in second.state_dict().items()}
    first.fit(X, y, epochs=5, progress=False)
    assert all(torch.equal(before[k], v) for k, v in second.state_dict().items())
    mean, var, samples = first.predict(X[:4], num_samples=5, return_samples=True)
    assert samples.shape == (5, 4, 1) and bool((var >= 0).all())
    if guide is AutoDelta:
        assert torch.allclose(var, torch.zeros_like(var))  # a point estimate


def test_a_plain_pyro_svi_loop_trains_the_guide(regression_data):
    X, y = regression_data
    bnn = _bnn()
    bnn.fit(X, y, epochs=0, progress=False)
    start = bnn.guide.means()["net.0.weight"].clone()
    svi = SVI(bnn.model, bnn.guide, pyro.optim.Adam({"lr": 0.05}), Trace_ELBO())
    losses = [svi.step(X, y) for _ in range(200)]
    assert sum(losses[-20:]) < sum(losses[:20])
    assert not torch.equal(bnn.guide.means()["net.0.weight"], start)
    assert not _ours_in_param_store()


def test_guide_names_are_checked():
    with pytest.raises(ValueError, match="guide must be one of"):
        _bnn("nope")
    with pytest.raises(TypeError, match="guide"):
        _bnn(3)


def test_autoguide_options_through_partial(regression_data):
    import functools

    X, y = regression_data
    bnn = _bnn(functools.partial(AutoLowRankMultivariateNormal, rank=3))
    bnn.fit(X, y, epochs=2, progress=False, seed=0)
    assert bnn.guide.autoguide.rank == 3
    # the library's initial values still apply: the guide's location starts at the net's init
    torch.manual_seed(0)
    net = bp.nn.mlp(3, [6], 1)
    fresh = bp.VariationalBNN(
        net, bp.Gaussian(scale=0.2), guide=functools.partial(AutoLowRankMultivariateNormal, rank=3)
    )
    fresh.fit(X, y, epochs=0, progress=False)
    median = fresh.guide.autoguide.median()
    assert torch.allclose(median["net.0.weight"], net[0].weight.detach(), atol=1e-6)


def test_the_mean_field_distributions_are_the_guides_means_and_scales(regression_data):
    """``guide.distributions()``, one per site, at the guide's own means and (softplus) scales;
    a learned noise scale gets a LogNormal; before a fit, a clear refusal."""
    X, y = regression_data
    torch.manual_seed(5)
    bnn = bp.VariationalBNN(bp.nn.mlp(3, [6], 1), bp.Gaussian(scale="learned"), init_scale=0.03)
    with pytest.raises(RuntimeError, match="fit"):
        bnn.guide.distributions()
    bnn.fit(X, y, epochs=0, progress=False)
    found = bnn.guide.distributions()
    means = bnn.guide.means()
    assert sorted(found) == sorted(means) and "likelihood.scale" in found
    for name, d in found.items():
        base = d.base_dist if hasattr(d, "base_dist") else d
        assert torch.equal(base.loc, bnn.guide.locs[bnn.guide.param_key(name)].detach()), name
        assert torch.allclose(base.scale, torch.nn.functional.softplus(
            bnn.guide.rhos[bnn.guide.param_key(name)].detach())), name  # fmt: skip
    assert isinstance(found["likelihood.scale"].base_dist, pyro.distributions.LogNormal)
    assert torch.allclose(found["net.0.weight"].base_dist.scale, torch.full((6, 3), 0.03))


def test_a_named_autoguide_is_pyros_own_with_the_documented_start():
    """``guide="normal"`` is Pyro's ``AutoNormal`` started as documented: the net's own weights
    (``init_to_value``), the prior's median for every other latent site (here the learned
    noise), and ``init_scale``; the same guide built by hand from Pyro's pieces under the same
    seeds holds the same numbers. (Started uniformly instead, the noise's location lands
    elsewhere; at AutoNormal's own scale, every scale is 0.1.)"""
    from pyro.infer.autoguide.initialization import init_to_median, init_to_value

    x, y = torch.randn(4, 3), torch.zeros(4)

    def built(guide):
        torch.manual_seed(0)
        net = bp.nn.mlp(3, [6], 1)
        bnn = bp.VariationalBNN(net, bp.Gaussian(scale="learned"), guide=guide, init_scale=0.05)
        pyro.set_rng_seed(1)
        bnn.setup_guide(x, y)
        return bnn.guide.autoguide

    def by_hand(model):
        torch.manual_seed(0)
        values = {f"net.{k}": v.detach() for k, v in bp.nn.mlp(3, [6], 1).named_parameters()}
        start = init_to_value(values=values, fallback=init_to_median)
        return AutoNormal(model, init_loc_fn=start, init_scale=0.05)

    ours, pyros = built("normal"), built(by_hand)
    mine, theirs = dict(ours.named_parameters()), dict(pyros.named_parameters())
    assert sorted(mine) == sorted(theirs) and "locs.likelihood.scale_unconstrained" in mine
    for name, value in mine.items():
        torch.testing.assert_close(value, theirs[name], rtol=0, atol=0)
    with torch.no_grad():
        for site in ("net.0.weight", "net.0.bias", "likelihood.scale"):
            scale = ours._get_loc_and_scale(site)[1]
            torch.testing.assert_close(scale, torch.full_like(scale, 0.05))


def test_a_built_guide_is_refused_with_the_fix():
    built = AutoNormal(lambda: None)
    with pytest.raises(TypeError) as caught:
        _bnn(built)
    assert str(caught.value) == (
        "guide= takes a class or a factory, not a built AutoNormal: it would be another model's "
        "guide. Pass the class (guide=AutoNormal) or a factory "
        "(guide=lambda model: AutoNormal(model, ...))"
    )


class _CallableDict(dict):
    def __call__(self, *args):
        return None


@pytest.mark.parametrize("returned", [3, _CallableDict()], ids=["int", "callable mapping"])
def test_a_factory_returning_no_guide_is_refused(returned):
    """Neither something that cannot be called nor a mapping (callable or not) is a guide."""
    with pytest.raises(TypeError) as caught:
        _bnn(lambda model: returned)
    assert str(caught.value) == (
        "the guide factory must return a guide (an autoguide, a PyroModule or a function of "
        f"(x, y) calling pyro.sample), got {type(returned).__name__}"
    )


def test_a_factory_guides_pyro_params_live_in_the_models_own_store():
    """A hand-written guide from a factory runs in the model's param store: its ``pyro.param``
    is read there by name, and Pyro's global store stays empty."""

    def factory(model):
        def guide(x, y=None, **kwargs):
            loc = pyro.param("q.loc", torch.zeros(1, 3))
            pyro.sample("net.0.weight", pyro.distributions.Delta(loc).to_event(2))
            pyro.sample("net.0.bias", pyro.distributions.Delta(torch.zeros(1)).to_event(1))

        return guide

    pyro.clear_param_store()
    bnn = bp.VariationalBNN(bp.nn.mlp(3, [], 1), bp.Gaussian(scale=0.2), guide=factory)
    bnn.setup_guide(torch.randn(4, 3), torch.zeros(4))
    assert "q.loc" in bnn.param_scope().names()
    assert "q.loc" not in pyro.get_param_store()
