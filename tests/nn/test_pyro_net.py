"""``make_bayesian_`` and what it builds, on their own: the converted classes, the sites, the
device reference, the refusals, the param statements of point estimates (what a user's Pyro
code and tools see), calls with more than one argument, and ``FixedLatents`` /
``prior_latent_sites``."""

import copy
import pickle

import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import pytest
import torch
import torch.nn as nn
from pyro.distributions import constraints
from pyro.nn import PyroModule

import bnn_pyro as bp
from bnn_pyro.nn.param_scope import ParamScope
from bnn_pyro.nn.pyro_net import (
    DEVICE_REF,
    FixedLatents,
    make_bayesian_,
    prior_latent_sites,
)

NORMAL = bp.IIDPrior(dist.Normal(0.0, 1.0))


def _normed() -> nn.Module:
    return nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), nn.Linear(4, 1))


def _sites_fixed(sites) -> FixedLatents:
    """Every weight at the net's own initial value: the converted net's output is then the
    plain net's."""
    return FixedLatents({s.name: s.init for s in sites})


# ------------------------------------------------------------------ the converted classes
def test_each_layer_becomes_a_local_pyro_class_made_once_per_class():
    a, b = bp.nn.mlp(2, [3], 1), bp.nn.mlp(2, [3], 1)
    make_bayesian_(a, NORMAL)
    make_bayesian_(b, NORMAL)
    layer = type(a[0])
    assert layer.__name__ == "PyroLinear" and layer.__module__ == "bnn_pyro.nn.pyro_net"
    assert type(b[0]) is layer and layer._bnn_module_cls.__module__ == "bnn_pyro.nn.layers"
    assert type(a).__name__ == "PyroSequential" and type(a)._bnn_module_cls is nn.Sequential


def test_a_class_met_for_the_first_time_gets_its_pyro_class_once():
    fresh = type("Fresh", (nn.Sequential,), {})  # a class no conversion has seen
    a, b = fresh(nn.Linear(2, 1)), fresh(nn.Linear(2, 1))
    make_bayesian_(a, NORMAL)
    make_bayesian_(b, NORMAL)
    made = type(a)
    assert made.__name__ == "PyroFresh" and made.__module__ == "bnn_pyro.nn.pyro_net"
    assert made._bnn_module_cls is fresh and type(b) is made


def test_a_converted_net_survives_pickling_with_its_classes():
    net = _normed()
    sites = make_bayesian_(net, NORMAL)
    again = pickle.loads(pickle.dumps(net))
    assert [type(m) for m in again.modules()] == [type(m) for m in net.modules()]
    x = torch.randn(5, 3)
    with _sites_fixed(sites):
        torch.testing.assert_close(again(x), net(x))


def test_a_net_that_holds_a_pyro_module_is_refused_with_the_fix():
    with pytest.raises(TypeError) as caught:
        make_bayesian_(nn.Sequential(PyroModule[nn.Linear](2, 1)), NORMAL)
    assert str(caught.value) == (
        "net already contains a PyroModule (PyroLinear); pass a plain torch nn.Module and let "
        "bnn_pyro make it Bayesian"
    )


def test_what_is_not_a_module_and_a_prior_that_selects_nothing_are_refused():
    with pytest.raises(TypeError) as caught:
        make_bayesian_([1], NORMAL)
    assert str(caught.value) == "net must be a torch.nn.Module, got list"
    with pytest.raises(ValueError) as caught:
        make_bayesian_(nn.Linear(2, 1), bp.IIDPrior(dist.Normal(0.0, 1.0), include=["x*"]))
    assert str(caught.value) == (
        "IIDPrior selects no parameter of the net as Bayesian; check its include/exclude "
        "patterns and types (parameter names: ['weight', 'bias'])"
    )


class _Recording(bp.priors.Prior):
    """A Normal prior whose scale is 5 for a bias and 1 for a weight, recording what it is told:
    the site names to check, and each call's parameter and site names."""

    def __init__(self) -> None:
        super().__init__()
        self.checked: list[str] = []
        self.calls: list[tuple[str, str | None]] = []

    def check_site_names(self, names: list[str]) -> None:
        self.checked = list(names)

    def distribution(self, module, param_name, device, dtype, *, name=None):
        self.calls.append((param_name, name))
        scale = 5.0 if param_name == "bias" else 1.0
        return dist.Normal(torch.tensor(0.0, device=device, dtype=dtype), scale)


@pytest.mark.parametrize("prefix, names", [("net", ["net.0.weight", "net.0.bias"]),
                                           ("", ["0.weight", "0.bias"])])  # fmt: skip
def test_the_prior_is_told_each_sites_name_and_parameter(prefix, names):
    prior, net = _Recording(), nn.Sequential(nn.Linear(2, 3))
    sites = make_bayesian_(net, prior, name=prefix)
    assert prior.checked == names and [s.name for s in sites] == names
    trace = poutine.trace(net).get_trace(torch.randn(4, 2))
    assert set(prior.calls) == {("weight", names[0]), ("bias", names[1])}
    scales = {n: trace.nodes[n]["fn"].base_dist.scale for n in names}
    assert float(scales[names[0]].max()) == 1.0 and float(scales[names[1]].min()) == 5.0


class _WithoutName(bp.priors.Prior):
    """An older prior that overrides ``site_distribution`` without the ``name`` keyword."""

    def distribution(self, module, param_name, device, dtype):
        return dist.Normal(torch.tensor(0.0, device=device, dtype=dtype), 1.0)

    def site_distribution(self, module, param_name, shape, device, dtype):
        return (
            self.distribution(module, param_name, device, dtype).expand(shape).to_event(len(shape))
        )


def test_a_prior_whose_site_distribution_takes_no_name_is_not_given_one():
    net = nn.Linear(2, 1)
    make_bayesian_(net, _WithoutName())
    trace = poutine.trace(net).get_trace(torch.randn(3, 2))
    assert trace.nodes["net.weight"]["value"].shape == (1, 2)


def test_the_device_reference_is_an_empty_unsaved_buffer_of_each_layers_dtype_and_device():
    double = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1)).double()
    make_bayesian_(double, NORMAL)
    ref = getattr(double[0], DEVICE_REF)
    assert ref.dtype == torch.float64 and ref.numel() == 0
    assert not any(k.endswith(DEVICE_REF) for k in double.state_dict())
    trace = poutine.trace(double).get_trace(torch.randn(4, 2, dtype=torch.float64))
    assert trace.nodes["net.0.weight"]["value"].dtype == torch.float64
    on_meta = nn.Linear(2, 1, device="meta")
    make_bayesian_(on_meta, NORMAL)
    assert getattr(on_meta, DEVICE_REF).device.type == "meta"


# ------------------------------------------------------------------ point estimates
def test_point_estimates_are_param_sites_named_by_their_path_holding_the_modules_tensors():
    """A layer norm's parameters (not sampled) are param sites ``net.1.weight``/``bias`` with
    the constraint and event dim ``pyro.param`` gives (what ``pyro.render_model`` reads), whose
    values are the module's own tensors, found again by ``SVI`` through ``unconstrained``."""
    net = _normed()
    make_bayesian_(net, NORMAL)
    trace = poutine.trace(net).get_trace(torch.randn(4, 3))
    params = {n: s for n, s in trace.nodes.items() if s["type"] == "param"}
    assert set(params) == {"net.1.weight", "net.1.bias"}
    site = params["net.1.weight"]
    assert site["value"] is net[1]._parameters["weight"]
    assert site["kwargs"]["constraint"] is constraints.real and site["kwargs"]["event_dim"] is None
    assert site["value"].unconstrained() is site["value"]
    assert isinstance(net[1].weight, nn.Parameter)  # outside a Pyro call: the tensor itself
    with poutine.trace() as tracer:  # read in a user's model, outside a call of the net
        assert net[1].weight is net[1]._parameters["weight"]
    assert list(tracer.trace.nodes) == []


def test_a_copied_nets_parameters_lead_svi_to_themselves_not_the_originals():
    """A deep copy carries each tensor's ``unconstrained`` reference, which would point at the
    original's; it is set again on the copy's first call."""
    net = _normed()
    make_bayesian_(net, NORMAL)
    poutine.trace(net).get_trace(torch.randn(4, 3))
    twin = copy.deepcopy(net)
    trace = poutine.trace(twin).get_trace(torch.randn(4, 3))
    value = trace.nodes["net.1.weight"]["value"]
    assert value is twin[1]._parameters["weight"] and value.unconstrained() is value


def test_inside_a_models_store_each_point_estimate_is_found_by_its_name():
    net = _normed()
    make_bayesian_(net, NORMAL)
    scope = ParamScope()
    with scope:
        poutine.trace(net).get_trace(torch.randn(4, 3))
        assert pyro.param("net.1.bias") is net[1]._parameters["bias"]


class _Shifted(nn.Module):
    """A net with a parameter of its own (not in a layer), and a second argument."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(2, 1)
        self.shift = nn.Parameter(torch.tensor(0.25))

    def forward(self, x: torch.Tensor, scale: float = 1.0, *, offset: float = 0.0) -> torch.Tensor:
        return scale * self.inner(x) + self.shift + offset


@pytest.mark.parametrize("prefix, site", [("net", "net.shift"), ("", "shift")])
def test_the_nets_own_parameter_is_named_with_or_without_the_prefix(prefix, site):
    net = _Shifted()
    make_bayesian_(net, bp.IIDPrior(dist.Normal(0.0, 1.0), types=(nn.Linear,)), name=prefix)
    trace = poutine.trace(net).get_trace(torch.randn(3, 2))
    assert {n for n, s in trace.nodes.items() if s["type"] == "param"} == {site}


def test_a_call_passes_its_other_arguments_on():
    net = _Shifted()
    sites = make_bayesian_(net, bp.IIDPrior(dist.Normal(0.0, 1.0), types=(nn.Linear,)))
    x = torch.randn(3, 2)
    with _sites_fixed(sites):
        plain = net(x) - 0.25
        torch.testing.assert_close(net(x, 2.0) - 0.25, 2 * plain)
        torch.testing.assert_close(net(x, scale=3.0) - 0.25, 3 * plain)
        torch.testing.assert_close(net(x, offset=1.0), net(x) + 1.0)


def test_a_call_without_a_positional_input_runs_as_it_is():
    net = bp.nn.mlp(2, [], 1)
    sites = make_bayesian_(net, NORMAL)
    x = torch.randn(3, 2)
    with _sites_fixed(sites):
        torch.testing.assert_close(net(input=x), net(x))


# ------------------------------------------------------------------ FixedLatents
def _model_with_latents():
    s = pyro.sample("s", dist.HalfCauchy(1.0))
    m = pyro.sample("m", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    k = pyro.sample("k", dist.Bernoulli(1.0))  # a draw is 1: the fixed point is 0
    y = pyro.sample("y", dist.Normal(0.0, 1.0), obs=torch.tensor(3.0))
    return s, m, k, y


def test_fixed_latents_takes_each_supports_fixed_point_and_leaves_observations():
    with poutine.trace() as tracer, FixedLatents():
        s, m, k, y = _model_with_latents()
    assert float(s) == 1.0 and m.tolist() == [0.0, 0.0] and float(k) == 0.0 and float(y) == 3.0
    assert not tracer.trace.nodes["s"]["is_observed"]


def test_given_values_are_taken_as_observed():
    with poutine.trace() as tracer, FixedLatents({"s": torch.tensor(2.0)}):
        s, *_ = _model_with_latents()
    assert float(s) == 2.0 and tracer.trace.nodes["s"]["is_observed"]


def _scale_model():
    pyro.sample("m", dist.Normal(0.0, 1.0))
    return pyro.sample("s", dist.HalfCauchy(1.0))


def test_the_fixed_points_take_the_dtype_and_device_of_like():
    """``like`` given; else the first given value; else torch's defaults."""
    with FixedLatents({"m": torch.zeros((), dtype=torch.float64)}):
        assert _scale_model().dtype == torch.float64
    like = torch.empty(0, dtype=torch.float64, device="meta")
    with FixedLatents({"m": torch.zeros(())}, like=like):
        s = _scale_model()
    assert s.dtype == torch.float64 and s.device.type == "meta"
    with FixedLatents():
        s = _scale_model()
    assert s.dtype == torch.float32 and s.device.type == "cpu"
    with pytest.raises(TypeError) as caught:
        FixedLatents(like=1.0)
    assert str(caught.value) == "like must be a tensor, got float"


def test_a_value_given_by_an_inner_handler_is_kept():
    """Under ``FixedLatents``, a site another handler has already given a value (a replayed
    guide's draw) keeps it."""
    with FixedLatents(), poutine.replay(trace=_trace_with(s=2.5)):
        s, *_ = _model_with_latents()
    assert float(s) == 2.5


def _trace_with(**values):
    """A trace of the model with these values at its latent sites."""
    tracer = poutine.trace(_model_with_latents).get_trace()
    for name, value in values.items():
        tracer.nodes[name]["value"] = torch.tensor(value)
    return tracer


def test_a_subsampled_plate_still_draws_its_indices():
    def model():
        with pyro.plate("rows", 10, subsample_size=3) as idx:
            pyro.sample("z", dist.Normal(0.0, 1.0))
        return idx

    with FixedLatents():
        idx = model()
    assert idx.shape == (3,) and len(set(idx.tolist())) == 3


class _FromOne(dist.TorchDistribution):
    """A discrete distribution on {1, 2, 3}: no fixed point at 0."""

    support = constraints.integer_interval(1, 3)
    arg_constraints = {}

    def sample(self, sample_shape=()):
        return torch.ones(sample_shape)

    def log_prob(self, value):
        return torch.zeros_like(value)


def test_a_discrete_latent_without_zero_in_its_support_is_refused_by_name():
    with pytest.raises(ValueError) as caught, FixedLatents():
        pyro.sample("c", _FromOne())
    assert str(caught.value) == (
        "latent site 'c' has a support (IntegerInterval(lower_bound=1, upper_bound=3)) with no "
        "fixed point to evaluate the net at"
    )


def test_prior_latent_sites_lists_sampled_latents_not_param_sites():
    """A hierarchical prior's scales are its latents; a learned prior's scales are param sites,
    not latents."""
    net = nn.Linear(2, 1)
    prior = bp.priors.HierarchicalNormalPrior()
    sites = make_bayesian_(net, prior)
    assert prior_latent_sites(net, sites, prior) == [
        "net.weight_prior_scale",
        "net.bias_prior_scale",
    ]
    net = nn.Linear(2, 1)
    learned = bp.LearnedNormalPrior().bound_to(net)
    sites = make_bayesian_(net, learned)
    assert prior_latent_sites(net, sites, learned) == []
