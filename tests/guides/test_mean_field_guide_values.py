"""``MeanFieldNormalGuide`` on small hand-made models: its documented defaults, its argument
checks and messages, which sites it skips, and the distribution it gives each kind of support.

The log-densities are recomputed independently of the guide from the change of variables: a
Normal ``N(m, s^2)`` on ``z`` pushed through ``x = a + (b - a) * sigmoid(z)`` has density
``N(logit(t); m, s^2) / ((b - a) t (1 - t))`` at ``x``, with ``t = (x - a) / (b - a)``; pushed
through ``x = c + exp(z)``, ``N(log(x - c); m, s^2) / (x - c)``.
"""

from __future__ import annotations

import math
import re

import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import pytest
import torch
from pyro.distributions import constraints
from pyro.distributions.transforms import AffineTransform

from bnn_pyro.exceptions import NotFittedError
from bnn_pyro.guides import MeanFieldNormalGuide


def _whole(message: str) -> str:
    """An anchored regex matching exactly ``message``."""
    return f"^{re.escape(message)}$"


def _one_weight():
    pyro.sample("w", dist.Normal(torch.zeros(3), 1.0).to_event(1))


def _sites(trace, kind: str) -> dict:
    return {n: s for n, s in trace.nodes.items() if s["type"] == kind}


def test_the_defaults_are_a_scale_of_0_01_params_under_guide_and_kl_weight_one():
    """``init_scale=0.01``, ``name="guide"`` (param sites ``guide.loc.w``, ``guide.rho.w``) and
    ``kl_weight=1.0`` (the latent site's log-density unscaled), as the signature documents."""
    guide = MeanFieldNormalGuide(_one_weight)
    trace = poutine.trace(guide).get_trace()
    assert sorted(_sites(trace, "param")) == ["guide.loc.w", "guide.rho.w"]
    assert trace.nodes["w"]["scale"] == 1.0
    # softplus(inverse_softplus(0.01)) is 0.01 to float32 rounding (relative 1e-7)
    assert torch.allclose(guide.scales()["w"], torch.full((3,), 0.01), rtol=1e-5, atol=0)
    renamed = MeanFieldNormalGuide(_one_weight, name="q")
    assert sorted(_sites(poutine.trace(renamed).get_trace(), "param")) == ["q.loc.w", "q.rho.w"]


@pytest.mark.parametrize("kl_weight", [0.0, 0.5, 2.0])
def test_kl_weight_scales_each_latent_log_density_by_that_weight(kl_weight):
    """``kl_weight`` multiplies the latent sites' ``scale`` (1 by default) by ``kl_weight``;
    the param sites keep scale 1."""
    guide = MeanFieldNormalGuide(_one_weight)
    trace = poutine.trace(guide).get_trace(kl_weight=kl_weight)
    assert trace.nodes["w"]["scale"] == kl_weight
    assert all(s["scale"] == 1.0 for s in _sites(trace, "param").values())


def test_init_scale_must_be_strictly_positive():
    """Zero and negative initial scales are refused with the documented message; the smallest
    positive ones and an int are accepted."""
    for bad in (0, 0.0, -0.5):
        with pytest.raises(
            ValueError, match=_whole(f"init_scale must be a positive float, got {bad!r}")
        ):
            MeanFieldNormalGuide(_one_weight, init_scale=bad)
    for good in (1e-6, 1):
        guide = MeanFieldNormalGuide(_one_weight, init_scale=good)
        assert guide.init_scale == float(good)


def test_a_model_that_is_not_callable_is_refused_naming_its_type():
    with pytest.raises(TypeError, match=_whole("model must be callable, got int")):
        MeanFieldNormalGuide(3)


def test_before_the_first_call_the_guide_has_no_sites_and_refuses_to_report():
    guide = MeanFieldNormalGuide(_one_weight)
    assert guide.site_names() == [] and not guide.is_setup
    message = _whole("the guide has no sites yet: call it (or fit) first")
    for report in (
        guide.distributions,
        guide.means,
        guide.scales,
        lambda: guide.sample_posterior(2),
    ):
        with pytest.raises(NotFittedError, match=message):
            report()
    guide()
    assert guide.site_names() == ["w"] and guide.is_setup


def test_auxiliary_observed_and_subsample_sites_are_skipped_and_later_latents_kept():
    """Only the latent sites get a guide site, whatever comes before them in the model."""

    def model():
        pyro.sample("aux", dist.Normal(0.0, 1.0), infer={"is_auxiliary": True})
        pyro.sample("y0", dist.Normal(0.0, 1.0), obs=torch.tensor(0.5))
        with pyro.plate("data", 10, subsample_size=4):
            pyro.sample("y", dist.Normal(0.0, 1.0), obs=torch.zeros(4))
        pyro.sample("w", dist.Normal(0.0, 1.0))
        pyro.sample("b", dist.Normal(torch.zeros(2), 1.0).to_event(1))

    guide = MeanFieldNormalGuide(model)
    assert sorted(guide()) == ["b", "w"]
    assert guide.site_names() == ["w", "b"]


def test_keyword_arguments_reach_the_model_when_the_guide_finds_its_sites():
    def model(n, *, scale):
        pyro.sample("w", dist.Normal(torch.zeros(n), scale).to_event(1))

    guide = MeanFieldNormalGuide(model)
    assert guide(4, scale=2.0)["w"].shape == (4,)
    other = MeanFieldNormalGuide(model)
    other.setup(2, scale=1.0)
    assert other.site_names() == ["w"] and other.means()["w"].shape == (2,)


def test_a_latent_inside_a_plate_is_refused_with_the_advice():
    def model():
        with pyro.plate("rows", 5):
            pyro.sample("z", dist.Normal(0.0, 1.0))

    message = (
        "latent site 'z' sits inside a plate; MeanFieldNormalGuide handles global latents "
        "only — use an autoguide (e.g. AutoNormal) for local latents"
    )
    with pytest.raises(NotImplementedError, match=_whole(message)):
        MeanFieldNormalGuide(model)()


def test_an_init_loc_of_the_wrong_shape_is_refused_naming_both_shapes():
    guide = MeanFieldNormalGuide(_one_weight, init_loc={"w": torch.zeros(2)})
    with pytest.raises(ValueError, match=_whole("init_loc['w'] has shape (2,), the site has (3,)")):
        guide()


def test_an_init_loc_is_converted_to_the_sites_dtype():
    """A float64 initial value for a float32 site gives a float32 mean of the same value."""
    start = torch.tensor([0.25, -1.5, 3.0], dtype=torch.float64)
    guide = MeanFieldNormalGuide(_one_weight, init_loc={"w": start})
    guide()
    assert guide.means()["w"].dtype == torch.float32
    assert torch.equal(guide.means()["w"], start.float())


def test_a_model_with_no_latent_sites_is_refused():
    def model():
        pyro.sample("y", dist.Normal(0.0, 1.0), obs=torch.tensor(0.0))

    with pytest.raises(
        ValueError, match=_whole("the model has no latent sites: there is nothing to infer")
    ):
        MeanFieldNormalGuide(model)()


def _real_and_bounded():
    pyro.sample("w", dist.Normal(torch.zeros(3), 1.0).to_event(1))  # real: a Normal
    pyro.sample("p", dist.Beta(2.0, 2.0))  # (0, 1): a Normal pushed through a sigmoid


def _three_supports():
    _real_and_bounded()
    pyro.sample("s", dist.LogNormal(torch.zeros(2), 1.0).to_event(1))  # positive: a LogNormal


def _nan_means(model) -> MeanFieldNormalGuide:
    guide = MeanFieldNormalGuide(model)
    guide()
    with torch.no_grad():
        for loc in guide.locs.values():
            loc.fill_(math.nan)
    return guide


@pytest.mark.parametrize("validate", [True, False])
def test_nan_means_give_nan_draws_not_a_constraint_error_inside_the_guide(validate):
    """The guide builds its distributions with ``validate_args=False``: a NaN mean draws NaN,
    so a diverged fit shows up as a non-finite loss (``GuardedSVI``'s
    ``TrainingDivergedError``), not as a constraint error from a constructor inside the guide;
    with Pyro's validation on (its default) and off. (The positive site's ``LogNormal`` only
    with validation off: Pyro's ``LogNormal`` builds its base ``Normal`` with the default
    validation whatever its ``validate_args``.)"""
    guide = _nan_means(_real_and_bounded if validate else _three_supports)
    with pyro.validation_enabled(validate):
        draws = guide()
        assert sorted(guide.distributions()) == sorted(draws)
    assert sorted(draws) == (["p", "w"] if validate else ["p", "s", "w"])
    assert all(bool(v.isnan().all()) for v in draws.values())


def test_a_bounded_site_gets_a_normal_pushed_into_its_interval():
    """``u ~ Uniform(-1, 3)`` (batch 4, one event dim) and ``p ~ Beta(2, 2)``, both started at
    ``t = 1/4`` of their interval: the means are ``logit(1/4) = -log 3`` in unconstrained
    space, every draw lies inside the interval, and the log-density is the change-of-variables
    one (module docstring), summed over ``u``'s event dim. float64 throughout: recovering ``z``
    from a draw costs ~1e-13 here (``|z| < 8``), far inside the 1e-9 tolerance."""
    f64 = torch.float64

    def model():
        low, high = torch.full((4,), -1.0, dtype=f64), torch.full((4,), 3.0, dtype=f64)
        pyro.sample("u", dist.Uniform(low, high).to_event(1))
        pyro.sample("p", dist.Beta(torch.tensor(2.0, dtype=f64), torch.tensor(2.0, dtype=f64)))

    start = {"u": torch.zeros(4, dtype=f64), "p": torch.tensor(0.25, dtype=f64)}
    guide = MeanFieldNormalGuide(model, init_loc=start, init_scale=1.0)
    guide()
    means, scales = guide.means(), guide.scales()
    assert torch.allclose(means["u"], torch.full((4,), -math.log(3.0), dtype=f64))
    assert torch.allclose(means["p"], torch.tensor(-math.log(3.0), dtype=f64))
    found = guide.distributions()
    assert found["u"].batch_shape == () and found["u"].event_shape == (4,)
    torch.manual_seed(0)
    for name, (a, b) in {"u": (-1.0, 3.0), "p": (0.0, 1.0)}.items():
        x = found[name].sample((2000,))
        assert bool(((x > a) & (x < b)).all()), name
        t = (x - a) / (b - a)
        z = t.log() - (-t).log1p()
        expected = (
            dist.Normal(means[name], scales[name]).log_prob(z)
            - math.log(b - a)
            - t.log()
            - (-t).log1p()
        )
        expected = expected.sum(-1) if name == "u" else expected
        got = found[name].log_prob(x)
        assert got.shape == (2000,)
        assert torch.allclose(got, expected, rtol=0, atol=1e-9), name


class _ExponentialAboveOne(dist.TransformedDistribution):
    """``1 + Exponential(1)``: support ``x > 1``, a ``greater_than(1)`` constraint."""

    arg_constraints = {}
    support = constraints.greater_than(1.0)

    def __init__(self) -> None:
        rate = torch.tensor(1.0, dtype=torch.float64)
        super().__init__(dist.Exponential(rate), [AffineTransform(1.0, 1.0)])


def test_a_support_bounded_below_by_one_is_shifted_not_taken_as_positive():
    """Only ``greater_than(0)`` gets the LogNormal: ``x > 1`` gets ``x = 1 + exp(z)``, so a start
    at ``x = 1.5`` is the mean ``log 0.5`` (not ``log 1.5``), every draw exceeds 1 (a LogNormal
    at that scale would put ~30% below 1) and the density is ``N(log(x - 1)) / (x - 1)``."""

    def model():
        pyro.sample("x", _ExponentialAboveOne())

    start = torch.tensor(1.5, dtype=torch.float64)
    guide = MeanFieldNormalGuide(model, init_loc={"x": start}, init_scale=1.0)
    guide()
    loc, scale = guide.means()["x"], guide.scales()["x"]
    assert torch.allclose(loc, torch.tensor(math.log(0.5), dtype=torch.float64))
    q = guide.distributions()["x"]
    torch.manual_seed(1)
    x = q.sample((2000,))
    assert bool((x > 1).all())
    expected = dist.Normal(loc, scale).log_prob((x - 1).log()) - (x - 1).log()
    assert torch.allclose(q.log_prob(x), expected, rtol=0, atol=1e-9)


def test_a_site_keeps_the_models_batch_and_event_dims():
    """``Normal(0, 1)`` of shape (2, 3) with one event dim: the guide's distribution has batch
    shape (2,) and event shape (3,), its log-density the Normal's summed over the last dim."""

    def model():
        pyro.sample("w", dist.Normal(torch.zeros(2, 3), 1.0).to_event(1))

    guide = MeanFieldNormalGuide(model, init_scale=0.5)
    guide()
    q = guide.distributions()["w"]
    assert q.batch_shape == (2,) and q.event_shape == (3,)
    x = torch.linspace(-1.0, 1.0, 6).reshape(2, 3)
    expected = dist.Normal(guide.means()["w"], 0.5).log_prob(x).sum(-1)
    assert torch.allclose(q.log_prob(x), expected, atol=1e-5)
