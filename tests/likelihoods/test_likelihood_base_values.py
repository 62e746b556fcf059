"""The likelihood base module pinned value by value: the data plate's name, size, subsample,
dim, device and the scale it gives the observed site; each target layout ``observed_targets``
accepts and its refusal in full; ``float_targets``' cast and reshape; and the registry of
subclasses, their repr and the refusals of ``likelihood_from_config``; ``latent_priors``."""

from __future__ import annotations

import math
import re

import pyro
import pyro.distributions as dist
import pytest
import torch

import bnn_pyro as bp
from bnn_pyro.likelihoods.base import (
    Likelihood,
    _data_plate,
    float_targets,
    likelihood_from_config,
    observed_targets,
)


class _ScaledNormal(Likelihood):
    """A likelihood of the test's own: y ~ Normal(f, latents["s"]) per column, two settings."""

    def __init__(self, a: int = 1, b: str = "x") -> None:
        self.a, self.b = a, b

    def check_targets(self, y: torch.Tensor, out_dim: int) -> torch.Tensor:
        return y

    def distribution(self, f, latents):
        return dist.Normal(f, latents["s"]).to_event(1)

    def mean(self, f: torch.Tensor) -> torch.Tensor:
        return f

    def _own_config(self):
        return {"a": self.a, "b": self.b}


def _observe_trace(n: int, dataset_size: int | None) -> pyro.poutine.Trace:
    f = torch.zeros(n, 1)
    y = torch.ones(n)  # a (B,) vector for a one-column event: observed as (B, 1)
    return pyro.poutine.trace(bp.Gaussian(scale=1.0).observe).get_trace(f, y, {}, dataset_size)


def test_observe_scales_the_rows_by_dataset_size_over_batch_in_the_data_plate():
    """4 rows standing for 10: the site's scale is 10/4 = 2.5, the plate is "data" of size 10
    at dim -1 with the subsample 0..3, on the net output's device. Each row's log N(1; 0, 1) is
    -1/2 log 2π - 1/2, so the trace's log-density is 2.5 · 4 · that."""
    tr = _observe_trace(4, 10)
    site = tr.nodes["obs"]
    assert site["scale"] == pytest.approx(2.5)
    (frame,) = site["cond_indep_stack"]
    assert (frame.name, frame.size, frame.dim) == ("data", 4, -1)  # size: the subsample's
    assert tr.nodes["data"]["fn"].size == 10
    assert tr.nodes["data"]["value"].tolist() == [0, 1, 2, 3]
    assert tr.nodes["data"]["fn"].device == torch.device("cpu")
    assert site["value"].shape == (4, 1)
    row = -0.5 * math.log(2 * math.pi) - 0.5
    assert tr.log_prob_sum().item() == pytest.approx(2.5 * 4 * row, rel=1e-6)


def test_observe_without_a_dataset_size_or_with_the_batch_s_own_leaves_the_scale_at_one():
    """dataset_size None or equal to the rows: a plate of size 4 over all its rows, scale 1."""
    for dataset_size in (None, 4):
        site = _observe_trace(4, dataset_size).nodes["obs"]
        assert site["scale"] == 1.0
        assert site["cond_indep_stack"][0].size == 4


def test_the_data_plate_takes_the_dim_and_device_it_is_given():
    """dim=-2 is where the plate sits (Pyro would allocate -1 on its own), and the device is
    kept on the plate; a site of batch shape (3, 1) under it is scaled by 6/3 = 2."""
    cpu = torch.device("cpu")
    plate = _data_plate(3, 6, dim=-2, device=cpu)
    assert (plate.name, plate.size, plate.dim, plate.device) == ("data", 6, -2, cpu)

    def model():
        with _data_plate(3, 6, dim=-2, device=cpu):
            pyro.sample("z", dist.Normal(torch.zeros(3, 1), 1.0))

    site = pyro.poutine.trace(model).get_trace().nodes["z"]
    assert site["cond_indep_stack"][0].dim == -2
    assert site["scale"] == pytest.approx(2.0)


def test_the_data_plate_refuses_a_dataset_smaller_than_the_batch_in_full():
    """dataset_size 4 < 5 rows is refused; 5 (equal) is the boundary and is accepted."""
    msg = "dataset_size must be >= the number of rows passed, got dataset_size=4, batch=5"
    with pytest.raises(ValueError, match=rf"^{re.escape(msg)}$"):
        _data_plate(5, 4)
    assert _data_plate(5, 5).size == 5


def _fn(event: tuple[int, ...], rows: int = 4) -> dist.Distribution:
    return dist.Normal(torch.zeros(rows, *event), 1.0).to_event(len(event))


def test_observed_targets_reshapes_only_the_two_column_vector_forms():
    """Event (1,): (B,) → (B, 1). Event () (class labels): (B, 1) → (B,), the last axis only.
    (B, *event), with leading sample dims or not, is kept as is."""
    assert observed_targets(torch.zeros(4), _fn((1,)), 4).shape == (4, 1)
    assert observed_targets(torch.zeros(4, 1), _fn(()), 4).shape == (4,)
    # B = 1: a (1, 1) is (S, B) = (1, 1) already, kept as it is
    assert observed_targets(torch.zeros(1, 1), _fn((), 1), 1).shape == (1, 1)
    assert observed_targets(torch.zeros(4, 2), _fn((2,)), 4).shape == (4, 2)
    assert observed_targets(torch.zeros(5, 4, 3, 4), _fn((3, 4)), 4).shape == (5, 4, 3, 4)
    y = torch.arange(4.0)
    assert observed_targets(y, _fn(()), 4) is y


@pytest.mark.parametrize(
    ("event", "shape", "forms"),
    [
        ((), (3,), "(B,) or (B, 1)"),
        ((1,), (4, 2), "(B,) or (B, 1)"),
        ((2,), (4, 1), "(B, 2)"),
        ((2,), (4,), "(B, 2)"),
        ((3, 4), (4, 4, 3), "(B, 3, 4)"),
        ((3, 4), (3, 4), "(B, 3, 4)"),
    ],
)
def test_observed_targets_refuses_every_other_shape_in_full(event, shape, forms):
    """Rows B = 4: a (3,) vector for labels (right length, wrong size), a (4, 1) column for a
    two-column event (not squeezed: only an event of () takes that form), and the (3, 4) event
    written out as (B, 3, 4)."""
    msg = f"y has shape {shape}, not {forms} with B = 4 (the rows of x)"
    with pytest.raises(ValueError, match=rf"^{re.escape(msg)}$"):
        observed_targets(torch.zeros(shape), _fn(event), 4)


def test_float_targets_casts_integers_to_float32_and_keeps_a_float_dtype():
    """Integer (N,) labels become an (N, 1) float32 column of the same values; float64 stays
    float64 (no cast to float32)."""
    y = float_targets(torch.tensor([0, 1, 2]), 1, "it")
    assert y.dtype == torch.float32
    assert y.tolist() == [[0.0], [1.0], [2.0]]
    d = float_targets(torch.tensor([[0.5, 1.5]], dtype=torch.float64), 2, "it")
    assert d.dtype == torch.float64
    # (N,) targets are one output's: for two outputs the message names (N, 2) and the shape given
    msg = "y must have shape (N, 2) for it with 2 output(s), got (3,)"
    with pytest.raises(ValueError, match=rf"^{re.escape(msg)}$"):
        float_targets(torch.tensor([1, 2, 3]), 2, "it")


def test_likelihood_from_config_refuses_an_unknown_or_missing_type_in_full():
    """The message names the type (repr: 'Nope', or None when absent) and the known names."""
    known = sorted(Likelihood._subclasses)
    for config, kind in (({"type": "Nope"}, "'Nope'"), ({}, "None")):
        msg = (
            f"unknown likelihood type {kind} in checkpoint (known: {known}); import the module "
            "that defines it before loading"
        )
        with pytest.raises(ValueError, match=rf"^{re.escape(msg)}$"):
            likelihood_from_config(config)
    assert "Gaussian" in known and "Categorical" in known
    assert not [name for name in known if name.startswith("_")]  # no private base (_ProbitLink)


def test_a_subclass_defined_now_registers_by_name_and_round_trips_with_its_repr():
    """A class defined inside the test is registered by its name when defined: its config
    reloads to an equal object, the repr lists its settings as k=repr(v) joined by ', '."""

    class RoundTripLik(_ScaledNormal):
        pass

    try:
        assert Likelihood._subclasses["RoundTripLik"] is RoundTripLik
        lik = RoundTripLik(a=3, b="y")
        assert repr(lik) == "RoundTripLik(a=3, b='y')"
        assert lik.config() == {"type": "RoundTripLik", "a": 3, "b": "y"}
        back = likelihood_from_config(lik.config())
        assert type(back) is RoundTripLik
        assert (back.a, back.b) == (3, "y")
    finally:
        Likelihood._subclasses.pop("RoundTripLik", None)


def test_log_prob_reads_the_latents_it_is_given():
    """y = 1 under Normal(0, s = 2): -1/2 log 2π - log 2 - 1/8 per column, two columns."""
    lp = _ScaledNormal().log_prob(torch.zeros(1, 1, 2), torch.ones(1, 2), {"s": torch.tensor(2.0)})
    col = -0.5 * math.log(2 * math.pi) - math.log(2.0) - 0.125
    assert lp.shape == (1, 1)
    assert lp.item() == pytest.approx(2 * col, rel=1e-6)


def test_the_data_plate_follows_the_net_output_s_device_not_torch_s_default():
    """With torch's default device set to "meta", a CPU net output still gets a CPU plate: its
    subsample indices and its subsample site's device are the output's, so the scaled
    log-likelihood is computed where the output lives (scale 10/4 = 2.5 as on the CPU)."""
    f, y, lik = torch.zeros(4, 1), torch.ones(4), bp.Gaussian(scale=1.0)
    with torch.device("meta"):
        tr = pyro.poutine.trace(lik.observe).get_trace(f, y, {}, 10)
    cpu = torch.device("cpu")
    assert tr.nodes["data"]["fn"].device == cpu
    assert tr.nodes["data"]["value"].device == cpu
    assert tr.nodes["obs"]["scale"] == pytest.approx(2.5)


def test_a_subclass_without_a_distribution_says_so_by_its_class_name():
    """The base distribution() is a refusal naming the subclass, and observe and log_prob
    (which read it) pass it on."""

    class NoDistLik(Likelihood):
        def check_targets(self, y, out_dim):
            return y

        def mean(self, f):
            return f

    try:
        msg = r"^NoDistLik defines no distribution\(\)$"
        with pytest.raises(NotImplementedError, match=msg):
            NoDistLik().log_prob(torch.zeros(1, 2, 1), torch.zeros(2, 1), {})
        with pytest.raises(NotImplementedError, match=msg):
            NoDistLik().observe(torch.zeros(2, 1), None, {})
    finally:
        Likelihood._subclasses.pop("NoDistLik", None)


def test_latent_priors_are_none_by_default_and_unknown_for_a_class_that_draws_its_own():
    f = torch.zeros(3, 1)
    assert bp.Categorical().latent_priors(f) == {} and bp.Bernoulli().latent_priors(f) == {}
    assert bp.HeteroscedasticGaussian().latent_priors(torch.zeros(3, 2)) == {}
    assert _OwnLatents(0.1).latent_priors(f) is None


class _OwnLatents(bp.Gaussian):
    def sample_latents(self, f):
        return {"likelihood.c": pyro.sample("likelihood.c", pyro.distributions.Beta(2.0, 2.0))}
