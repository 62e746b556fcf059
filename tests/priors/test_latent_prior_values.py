"""Values of the priors with latent scales, built directly (no net): the horseshoe's and the
hierarchical Normal's sites with their scales given, against ``torch.distributions``; the checks
of a scale's prior and the other helpers of ``bnn_pyro.priors._latent``, with whole messages."""

from __future__ import annotations

import math
import re

import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import pytest
import torch
import torch.nn as nn
from pyro.distributions import constraints

from bnn_pyro.priors import HierarchicalNormalPrior, HorseshoePrior, prior_from_config
from bnn_pyro.priors._latent import (
    check_scale_prior,
    normal_given_scale,
    require_name,
    scale_prior_config,
    scale_prior_from_config,
)

CPU = torch.device("cpu")
EXAMPLES = "e.g. dist.HalfCauchy(1.0), dist.HalfNormal(1.0), dist.LogNormal(0.0, 1.0)"


def _traced(fn, data):
    """Run ``fn`` with its latent sites set to ``data``; its result and its trace."""
    with poutine.trace() as tracer, poutine.condition(data=data):
        out = fn()
    return out, tracer.trace


# --- _latent ----------------------------------------------------------------------------------


def test_a_scale_prior_must_be_a_distribution():
    msg = f"s must be a distribution with positive support ({EXAMPLES}), got float"
    with pytest.raises(TypeError, match="^" + re.escape(msg) + "$"):
        check_scale_prior("s", 1.0)


def test_a_scale_prior_must_be_univariate_naming_its_shapes():
    msg = "s must be univariate with scalar parameters, got batch_shape={}, event_shape={}"
    with pytest.raises(ValueError, match="^" + re.escape(msg.format("(2,)", "()")) + "$"):
        check_scale_prior("s", dist.HalfCauchy(torch.ones(2)))
    with pytest.raises(ValueError, match="^" + re.escape(msg.format("()", "(2,)")) + "$"):
        check_scale_prior("s", dist.HalfCauchy(1.0).expand([2]).to_event(1).expand([]))


def test_a_scale_prior_needs_support_with_lower_bound_zero():
    """``(0, inf)`` and ``[0, inf)`` are accepted; the real line, ``[0, 1]`` and ``[1, inf)``
    (a Pareto with scale 1) are not."""
    for good in (dist.LogNormal(0.0, 1.0), dist.Exponential(2.0), dist.HalfNormal(1.0)):
        assert check_scale_prior("s", good) is good
    for bad in (dist.Normal(0.0, 1.0), dist.Uniform(0.0, 1.0), dist.Pareto(1.0, 1.0)):
        msg = f"s must have support on the positive reals ({EXAMPLES}), got {bad.support}"
        with pytest.raises(ValueError, match="^" + re.escape(msg) + "$"):
            check_scale_prior("s", bad)


def test_a_scale_prior_with_parameters_out_of_range_is_refused_naming_them():
    msg = "s has parameters that are not finite or out of range: {}"
    for value in (-1.0, 0.0, math.inf):
        with pytest.raises(ValueError, match="^" + re.escape(msg.format({"scale": value})) + "$"):
            check_scale_prior("s", dist.HalfCauchy(value, validate_args=False))


def test_a_scale_prior_must_be_a_class_of_pyro_distributions():
    class MyHalfNormal(dist.HalfNormal):
        pass

    msg = (
        "s must be a pyro.distributions class (a checkpoint rebuilds it by name), got MyHalfNormal"
    )
    with pytest.raises(ValueError, match="^" + re.escape(msg) + "$"):
        check_scale_prior("s", MyHalfNormal(1.0))


def test_a_scale_priors_config_holds_its_class_and_parameters_and_rebuilds_it():
    config = scale_prior_config(dist.LogNormal(0.5, 2.0))
    assert config["distribution"] == "LogNormal"
    assert {k: float(v) for k, v in config["params"].items()} == {"loc": 0.5, "scale": 2.0}
    rebuilt = scale_prior_from_config(config)
    assert type(rebuilt) is dist.LogNormal
    assert (float(rebuilt.loc), float(rebuilt.scale)) == (0.5, 2.0)
    msg = "unknown scale prior 'Nope' in checkpoint"
    with pytest.raises(ValueError, match="^" + re.escape(msg) + "$"):
        scale_prior_from_config({"distribution": "Nope", "params": {}})


def test_a_scale_prior_that_cannot_be_rebuilt_is_refused_naming_it():
    """A class of the same name as Pyro's whose ``arg_constraints`` name a parameter it does
    not have passes the other checks, but cannot be rebuilt on a device from them."""

    class HalfNormal(dist.HalfNormal):
        arg_constraints = {**dist.HalfNormal.arg_constraints, "width": constraints.positive}

    msg = "cannot rebuild HalfNormal from its arg_constraints ['scale', 'width'] on cpu"
    with pytest.raises(TypeError, match="^" + re.escape(msg)):
        check_scale_prior("s", HalfNormal(1.0, validate_args=False))


def test_a_scale_priors_config_keeps_float64_parameters_exactly():
    """0.1 is not a float32: a float64 parameter is saved as it is, not rounded."""
    scale = torch.tensor(0.1, dtype=torch.float64)
    saved = scale_prior_config(dist.HalfNormal(scale))["params"]["scale"]
    assert saved.dtype == torch.float64 and float(saved) == 0.1


def test_a_scale_priors_config_turns_a_python_number_parameter_into_a_cpu_tensor():
    """A distribution may hold a parameter as a Python float: it is saved as a tensor."""

    class HalfNormal(dist.HalfNormal):
        @property
        def scale(self):
            return 0.5

    saved = scale_prior_config(HalfNormal(1.0, validate_args=False))["params"]["scale"]
    assert isinstance(saved, torch.Tensor) and saved.device.type == "cpu"
    assert float(saved) == 0.5


def test_a_prior_with_latent_scales_requires_a_non_empty_site_name():
    msg = (
        "HorseshoePrior names its latent sites after the weight site: call site_distribution "
        "with name='net.0.weight' (make_bayesian_ passes it)"
    )
    for name in (None, ""):
        with pytest.raises(ValueError, match="^" + re.escape(msg) + "$"):
            require_name(HorseshoePrior(), name)
    assert require_name(HorseshoePrior(), "w") == "w"


def test_normal_given_scale_gives_each_row_its_own_scale():
    """``dims=1``: row ``i`` of a ``(2, 3)`` tensor is ``Normal(0, scale[i])``; under a batch
    of 4 draws each draw has its own scales."""
    g = torch.Generator().manual_seed(0)
    scale = torch.rand(4, 2, generator=g, dtype=torch.float64) + 0.5
    w = torch.randn(4, 2, 3, generator=g, dtype=torch.float64)
    d = normal_given_scale(scale, 1, torch.Size([2, 3]))
    assert (tuple(d.batch_shape), tuple(d.event_shape)) == ((4,), (2, 3))
    expected = torch.distributions.Normal(0.0, scale[..., None]).log_prob(w).sum((-1, -2))
    assert torch.allclose(d.log_prob(w), expected)


def test_normal_given_scale_skips_validation_even_when_pyro_validates():
    """The scale was drawn from a checked prior: the Normal of every step is built
    unvalidated, so even under Pyro's validation a NaN weight scores NaN, without an error."""
    with pyro.validation_enabled(True):
        d = normal_given_scale(torch.tensor(1.0), 0, torch.Size([2]))
        assert bool(torch.isnan(d.log_prob(torch.tensor([math.nan, 0.0]))))


# --- HorseshoePrior ---------------------------------------------------------------------------


@pytest.mark.parametrize("local", ["unit", "weight"])
def test_the_horseshoe_site_is_normal_given_the_product_of_its_scales(local):
    """Given ``tau`` and ``lambda``, the weight ``(3, 2)`` is ``Normal(0, tau * lambda)``
    (``lambda`` per row for ``"unit"``, per element for ``"weight"``), and the two scale sites
    are half-Cauchy with scales ``global_scale`` and ``local_scale``."""
    prior = HorseshoePrior(global_scale=0.5, local_scale=2.0, local=local)
    g = torch.Generator().manual_seed(1)
    lam_shape = (3, 2) if local == "weight" else (3,)
    tau = torch.tensor(0.7, dtype=torch.float64)
    lam = torch.rand(lam_shape, generator=g, dtype=torch.float64) + 0.2
    w = torch.randn(3, 2, generator=g, dtype=torch.float64)
    d, trace = _traced(
        lambda: prior.site_distribution(
            nn.Linear(2, 3), "weight", (3, 2), "cpu", torch.float64, name="w"
        ),
        {"w_global_scale": tau, "w_local_scale": lam},
    )
    s = tau * (lam if local == "weight" else lam[:, None])
    assert torch.allclose(d.log_prob(w), torch.distributions.Normal(0.0, s).log_prob(w).sum())
    half = torch.distributions.HalfCauchy
    expected_tau = half(torch.tensor(0.5, dtype=torch.float64)).log_prob(tau)
    assert torch.allclose(trace.nodes["w_global_scale"]["fn"].log_prob(tau), expected_tau)
    expected_lam = half(torch.tensor(2.0, dtype=torch.float64)).log_prob(lam).sum()
    assert torch.allclose(trace.nodes["w_local_scale"]["fn"].log_prob(lam), expected_lam)
    assert prior.local_shape(torch.Size([3, 2])) == lam_shape


def test_the_horseshoe_scales_are_scored_unvalidated_even_when_pyro_validates():
    """The scale priors were checked once, in the constructor: the half-Cauchys of every step
    are built unvalidated, so even under Pyro's validation a negative scale scores
    ``log 0 = -inf`` instead of raising."""
    prior = HorseshoePrior()
    with pyro.validation_enabled(True):
        _, trace = _traced(
            lambda: prior.site_distribution(
                nn.Linear(2, 3), "weight", (3, 2), "cpu", torch.float32, name="w"
            ),
            {},
        )
        tau = trace.nodes["w_global_scale"]["fn"].log_prob(torch.tensor(-1.0))
        lam = trace.nodes["w_local_scale"]["fn"].log_prob(-torch.ones(3))
    assert float(tau) == -math.inf and float(lam) == -math.inf


def test_the_horseshoe_says_it_needs_the_site_name():
    msg = (
        "HorseshoePrior names its latent sites after the weight site: call site_distribution "
        "with name='net.0.weight' (make_bayesian_ passes it)"
    )
    with pytest.raises(ValueError, match="^" + re.escape(msg) + "$"):
        HorseshoePrior().site_distribution(nn.Linear(2, 3), "weight", (3, 2), "cpu", torch.float32)


def test_the_horseshoe_has_no_per_element_distribution():
    msg = (
        "HorseshoePrior builds whole weight sites: call site_distribution(module, param_name, "
        "shape, device, dtype, name=...)"
    )
    with pytest.raises(NotImplementedError, match="^" + re.escape(msg) + "$"):
        HorseshoePrior().distribution(nn.Linear(2, 3), "weight", CPU, torch.float32, name="w")


def test_the_horseshoe_checks_its_scales_at_zero_and_its_local_choice():
    for arg in ("global_scale", "local_scale"):
        with pytest.raises(ValueError, match=rf"^{arg} must be a finite float > 0\.0, got 0\.0$"):
            HorseshoePrior(**{arg: 0.0})
    msg = "local must be one of ('unit', 'weight'), got 'layer'"
    with pytest.raises(ValueError, match="^" + re.escape(msg) + "$"):
        HorseshoePrior(local="layer")
    prior = HorseshoePrior(global_scale=1e-9, local_scale=1e-9)
    assert prior.config() == {
        "type": "HorseshoePrior",
        "include": ["*"],
        "exclude": [],
        "types": None,
        "global_scale": 1e-9,
        "local_scale": 1e-9,
        "local": "unit",
    }
    default = HorseshoePrior()
    assert (default.global_scale, default.local_scale, default.local) == (1.0, 1.0, "unit")


# --- HierarchicalNormalPrior ------------------------------------------------------------------


def test_the_hierarchical_site_is_normal_given_its_drawn_scale():
    """Given ``s = 0.3``, a ``(3, 2)`` weight is ``Normal(0, 0.3)`` in every element, the
    scale site ``"w_prior_scale"`` follows the scale prior (a ``HalfNormal(2)`` in float64),
    and ``distribution`` gives the same Normal per element."""
    prior = HierarchicalNormalPrior(dist.HalfNormal(2.0))
    s = torch.tensor(0.3, dtype=torch.float64)
    w = torch.randn(3, 2, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    d, trace = _traced(
        lambda: prior.site_distribution(
            nn.Linear(2, 3), "weight", (3, 2), "cpu", torch.float64, name="w"
        ),
        {"w_prior_scale": s},
    )
    expected = torch.distributions.Normal(0.0, 0.3).log_prob(w).sum()
    assert torch.allclose(d.log_prob(w), expected)
    fn = trace.nodes["w_prior_scale"]["fn"]
    assert type(fn) is dist.HalfNormal and fn.scale.dtype == torch.float64
    assert torch.allclose(fn.log_prob(s), torch.distributions.HalfNormal(2.0).log_prob(s))
    elem, _ = _traced(
        lambda: prior.distribution(nn.Linear(2, 3), "weight", CPU, torch.float64, name="w"),
        {"w_prior_scale": s},
    )
    assert torch.allclose(elem.log_prob(w), torch.distributions.Normal(0.0, 0.3).log_prob(w))


def test_the_first_matching_layer_pattern_gives_the_scale_prior():
    """Patterns are tried in the mapping's order; a name no pattern matches takes the default
    ``HalfCauchy(1)``."""
    prior = HierarchicalNormalPrior(
        layers={"net.2.*": dist.HalfNormal(0.5), "net.*": dist.HalfNormal(3.0)}
    )
    assert float(prior.scale_prior_for("net.2.weight").scale) == 0.5
    assert float(prior.scale_prior_for("net.0.weight").scale) == 3.0
    default = prior.scale_prior_for("head.weight")
    assert type(default) is dist.HalfCauchy and float(default.scale) == 1.0
    assert prior.scale_site("net.0.weight") == "net.0.weight_prior_scale"
    with pytest.raises(TypeError, match=r"^name must be a weight site's name, got int$"):
        prior.scale_prior_for(0)


def test_a_layer_pattern_matching_no_site_is_refused_with_three_example_names():
    prior = HierarchicalNormalPrior(layers={"a*": dist.HalfNormal(1.0), "b*": dist.HalfNormal(1.0)})
    msg = (
        "layers pattern(s) ['b*'] match no weight site; the patterns are over the site names, "
        "e.g. ['a1', 'a2', 'a3']"
    )
    with pytest.raises(ValueError, match="^" + re.escape(msg) + "$"):
        prior.check_site_names(["a1", "a2", "a3", "a4"])
    prior.check_site_names(["a1", "b1"])


def test_the_hierarchical_prior_checks_its_layers_with_whole_messages():
    msg = "layers must be a mapping {pattern: distribution}, got list"
    with pytest.raises(TypeError, match="^" + re.escape(msg) + "$"):
        HierarchicalNormalPrior(layers=[("net.0.*", dist.HalfCauchy(1.0))])
    with pytest.raises(TypeError, match=r"^layers must have string patterns as keys, got 0$"):
        HierarchicalNormalPrior(layers={0: dist.HalfCauchy(1.0)})
    msg = f"layers['n*'] must have support on the positive reals ({EXAMPLES}), got Real()"
    with pytest.raises(ValueError, match="^" + re.escape(msg) + "$"):
        HierarchicalNormalPrior(layers={"n*": dist.Normal(0.0, 1.0)})
    msg = f"scale_prior must have support on the positive reals ({EXAMPLES}), got Real()"
    with pytest.raises(ValueError, match="^" + re.escape(msg) + "$"):
        HierarchicalNormalPrior(dist.Normal(0.0, 1.0))


def test_the_hierarchical_prior_rebuilds_from_its_config_and_shows_its_scale_priors():
    prior = HierarchicalNormalPrior(
        dist.HalfNormal(2.0),
        layers={"net.2.*": dist.LogNormal(0.5, 0.25), "net.0.*": dist.HalfCauchy(3.0)},
        exclude="*.bias",
    )
    expected = (
        "HierarchicalNormalPrior(scale_prior=HalfNormal(scale=2), "
        "layers={'net.2.*': LogNormal(loc=0.5, scale=0.25), 'net.0.*': HalfCauchy(scale=3)})"
    )
    assert repr(prior) == expected
    rebuilt = prior_from_config(prior.config())
    assert repr(rebuilt) == expected and rebuilt.exclude == ("*.bias",)
    config = prior.config()
    del config["layers"]  # a checkpoint written before per-layer priors
    assert repr(prior_from_config(config)) == (
        "HierarchicalNormalPrior(scale_prior=HalfNormal(scale=2), layers={})"
    )


def test_the_hierarchical_scale_under_a_plate_of_draws_gives_each_draw_its_normal():
    """A scale drawn under a plate of 4 particles has shape ``(4,)``: the weight site has
    batch shape ``(4,)`` and draw ``k`` is ``Normal(0, s[k])`` over the whole ``(3, 2)``."""
    prior = HierarchicalNormalPrior()
    g = torch.Generator().manual_seed(3)
    s = torch.rand(4, generator=g, dtype=torch.float64) + 0.2
    w = torch.randn(4, 3, 2, generator=g, dtype=torch.float64)
    d, _ = _traced(
        lambda: prior.site_distribution(
            nn.Linear(2, 3), "weight", (3, 2), "cpu", torch.float64, name="w"
        ),
        {"w_prior_scale": s},
    )
    assert (tuple(d.batch_shape), tuple(d.event_shape)) == ((4,), (3, 2))
    expected = torch.distributions.Normal(0.0, s[:, None, None]).log_prob(w).sum((-1, -2))
    assert torch.allclose(d.log_prob(w), expected)


def test_the_hierarchical_scale_prior_is_built_once_per_site_device_and_dtype():
    """Every run of the model draws the scale from the same built distribution (in the
    site's dtype, for ``distribution`` too); another dtype gets its own."""
    prior = HierarchicalNormalPrior(dist.HalfNormal(2.0))

    def fn(method, dtype):
        args = (nn.Linear(2, 3), "weight", (3, 2)) if method == "site" else (nn.Linear(2, 3), "w")
        call = prior.site_distribution if method == "site" else prior.distribution
        _, trace = _traced(lambda: call(*args, "cpu", dtype, name="w"), {})
        return trace.nodes["w_prior_scale"]["fn"]

    first = fn("site", torch.float64)
    assert fn("site", torch.float64) is first and fn("element", torch.float64) is first
    other = fn("element", torch.float32)
    assert other is not first and other.scale.dtype == torch.float32
    assert first.scale.dtype == torch.float64


def test_the_hierarchical_normal_is_scored_unvalidated_even_when_pyro_validates():
    """The scale's prior was checked in the constructor: the weight's Normal is built
    unvalidated, so even under Pyro's validation a NaN weight scores NaN without an error."""
    prior = HierarchicalNormalPrior()
    with pyro.validation_enabled(True):
        d, _ = _traced(
            lambda: prior.distribution(nn.Linear(2, 3), "w", CPU, torch.float32, name="w"),
            {"w_prior_scale": torch.tensor(1.0)},
        )
        assert bool(torch.isnan(d.log_prob(torch.tensor(math.nan))))


def test_the_hierarchical_prior_says_it_needs_the_site_name():
    msg = (
        "HierarchicalNormalPrior names its latent sites after the weight site: call "
        "site_distribution with name='net.0.weight' (make_bayesian_ passes it)"
    )
    prior = HierarchicalNormalPrior()
    with pytest.raises(ValueError, match="^" + re.escape(msg) + "$"):
        prior.site_distribution(nn.Linear(2, 3), "weight", (3, 2), "cpu", torch.float32)
    with pytest.raises(ValueError, match="^" + re.escape(msg) + "$"):
        prior.distribution(nn.Linear(2, 3), "weight", CPU, torch.float32)
