"""The base class of every method (``bnn_pyro/base.py``): what a subclass gets by being one
(registration, a fit that leaves the method as it was on an error and trains under
``no_grad``, every predictive call on bnn_pyro's thread count), the shared argument checks,
and the two summaries. A subclass here is defined inside a test, so that the class-creation
hook runs under the test, not at import time."""

from __future__ import annotations

import math

import pytest
import torch

import bnn_pyro as bp
from bnn_pyro.base import BaseBayesianMethod, summarize_samples, to_probabilities
from bnn_pyro.training import distributed

THREADED = ("fit", "predict", "predictive_gaussian", "log_predictive_density", "sample_posterior")


def _toy_class(name: str) -> type:
    """A minimal method: ``fit`` adds 1 to its weight (and fails on request), every threaded
    call reports the thread count it runs on; ``predict`` draws ``weight + noise``."""

    def fit(self, X, y=None, fail=False, **kwargs):
        with torch.no_grad():
            self.weight.add_(1.0)
        self.seen = {"grad": torch.is_grad_enabled(), "threads": torch.get_num_threads()}
        if fail:
            raise RuntimeError("a failing fit")
        return self.seen

    def predict(self, x, return_samples=False, num_samples=None, seed=None, **kwargs):
        self.seen = {"threads": torch.get_num_threads()}
        draws = self._samples_to_draw(num_samples)
        samples = self.weight + torch.zeros(draws, len(x), 1)
        return summarize_samples(samples, return_samples)

    def report(self, *args, **kwargs):
        return torch.get_num_threads()

    def __init__(self, net=None, likelihood=None, scale=1.0):
        BaseBayesianMethod.__init__(self)
        self.weight = torch.nn.Parameter(torch.zeros(()))
        self.likelihood, self.scale = likelihood, scale

    body = {"__init__": __init__, "fit": fit, "predict": predict}
    body.update(log_predictive_density=report, sample_posterior=report)
    return type(name, (BaseBayesianMethod,), body)


# ---------------------------------------------------------------------- what a subclass gets
def test_a_subclass_is_registered_by_its_name():
    toy = _toy_class("BaseToyRegistered")
    assert BaseBayesianMethod.subclass("BaseToyRegistered") is toy


def test_a_subclass_fit_that_raises_leaves_the_method_as_it_was():
    method = _toy_class("BaseToyKept")()
    method.fit(None)
    with pytest.raises(RuntimeError, match="a failing fit"):
        method.fit(None, fail=True)
    assert method.weight.item() == 1.0  # the failed fit's +1 undone
    with torch.no_grad():  # and a fit under no_grad trains with gradients on
        assert method.fit(None)["grad"] is True
    assert method.weight.item() == 2.0


def test_every_predictive_call_of_a_subclass_runs_on_bnn_pyros_thread_count():
    method = _toy_class("BaseToyThreads")()
    before = torch.get_num_threads()
    bp.set_threads(before + 2)
    try:
        assert method.fit(None)["threads"] == before + 2
        method.predict(torch.zeros(2, 1))
        assert method.seen["threads"] == before + 2
        assert method.log_predictive_density(None) == before + 2
        assert method.sample_posterior() == before + 2
        assert torch.get_num_threads() == before  # torch's own setting given back
    finally:
        bp.set_threads(1)


def test_a_subclass_that_reuses_a_wrapped_call_does_not_wrap_it_again():
    toy = _toy_class("BaseToyWrapped")
    for name in THREADED[:2]:
        assert getattr(toy, name) is not _toy_class("BaseToyBare").__dict__[name]
    again = type("BaseToyAgain", (toy,), {"fit": toy.fit, "predict": toy.predict})
    assert again.fit is toy.fit and again.predict is toy.predict
    inherited = type("BaseToyInherited", (toy,), {})  # nothing of its own: nothing wrapped
    assert "fit" not in inherited.__dict__ and "predict" not in inherited.__dict__
    assert toy.fit.__bnn_pyro_kept__ is True and toy.predict.__bnn_pyro_threads__ is True


def test_from_net_passes_the_options_on():
    toy = _toy_class("BaseToyFromNet")
    net = torch.nn.Linear(1, 1)
    method = toy.from_net(net, "regression", scale=2.5)
    assert (method.likelihood, method.scale) == ("regression", 2.5)


def test_a_subclass_without_checkpoint_hooks_is_refused_naming_it():
    toy = _toy_class("BaseToyUnsaved")
    with pytest.raises(NotImplementedError, match="^BaseToyUnsaved cannot be saved yet$"):
        toy().checkpoint_config()
    with pytest.raises(NotImplementedError, match="^BaseToyUnsaved cannot be loaded yet$"):
        toy.from_checkpoint_config(None, {})
    assert toy().fitted_state() == {} and toy().restore_fitted_state({}) is None


# ---------------------------------------------------------------------- shared checks
def test_the_number_of_samples_is_checked_naming_where_it_came_from():
    method = _toy_class("BaseToySamples")()
    assert method.predict(torch.zeros(3, 1), num_samples=4, return_samples=True)[2].shape == (
        4, 3, 1,
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"^num_samples must be an int >= 1, got 0$"):
        method.predict(torch.zeros(3, 1), num_samples=0)
    method.num_samples = 0  # set by hand
    with pytest.raises(
        ValueError, match=r"^num_samples \(the method's default\) must be an int >= 1, got 0$"
    ):
        method.predict(torch.zeros(3, 1))


def test_a_predict_seed_is_checked_or_drawn_from_the_generator_or_shared_across_ranks(
    monkeypatch,
):
    seed_of = BaseBayesianMethod._predict_seed
    with pytest.raises(ValueError, match="^pass seed or generator, not both$"):
        seed_of(1, torch.Generator())
    with pytest.raises(ValueError, match=r"^seed must be an int >= 0, got -1$"):
        seed_of(-1, None)
    assert seed_of(7, None) == 7 and seed_of(None, None) is None
    drawn = seed_of(None, torch.Generator().manual_seed(3))
    assert drawn == seed_of(None, torch.Generator().manual_seed(3)) and drawn is not None
    # under torch.distributed, a predict without a seed takes one shared by every rank
    monkeypatch.setattr(distributed, "active", lambda: True)
    monkeypatch.setattr(distributed, "shared_seed", lambda seed: 1234)
    assert seed_of(None, None) == 1234
    assert seed_of(7, None) == 7  # a seed given is every rank's already


def test_load_passes_map_location_on(tmp_path):
    method = bp.MCDropout(bp.nn.mlp(2, [4], 1, dropout=0.1), likelihood="regression")
    path = tmp_path / "m.pt"
    method.save(path)
    where = []

    def map_location(storage, location):
        where.append(location)
        return storage

    loaded = bp.MCDropout.load(path, bp.nn.mlp(2, [4], 1, dropout=0.1), map_location)
    assert where and set(where) == {"cpu"}
    assert all(map(torch.equal, loaded.parameters(), method.parameters()))


# ---------------------------------------------------------------------- the summaries
def test_to_probabilities_turns_only_multi_column_logits_into_probabilities():
    logits = torch.tensor([[[0.0, math.log(3.0)]]])  # (S, N, C) = (1, 1, 2): 1/4 and 3/4
    assert torch.allclose(to_probabilities(logits), torch.tensor([[[0.25, 0.75]]]))
    assert to_probabilities(logits, normalize_output=False) is logits
    one_column = torch.randn(2, 3, 1)  # a regression output (N > 1), not logits
    assert to_probabilities(one_column) is one_column
    flat = torch.randn(2, 3)
    assert to_probabilities(flat) is flat
    with pytest.raises(TypeError, match="^outputs must be a torch.Tensor, got list$"):
        to_probabilities([1.0])


def test_summarize_samples_reduces_over_the_samples_and_checks_its_input():
    samples = torch.tensor([[1.0, 2.0], [3.0, 6.0]])  # (S, N) = (2, 2)
    mean, variance = summarize_samples(samples)
    assert mean.tolist() == [2.0, 4.0] and variance.tolist() == [1.0, 4.0]  # population variance
    assert summarize_samples(samples, return_samples=True)[2] is samples
    with pytest.raises(TypeError, match="^samples must be a torch.Tensor, got list$"):
        summarize_samples([1.0])
    with pytest.raises(
        ValueError, match=r"^samples must have shape \(S, N, \.\.\.\), got shape \(3,\)$"
    ):  # noqa: E501
        summarize_samples(torch.ones(3))


def test_predictive_gaussian_needs_a_positive_noise_scale():
    method = _toy_class("BaseToyNoise")()
    with pytest.raises(NotImplementedError, match="^BaseToyNoise has no observation noise: set"):
        method.predictive_gaussian(torch.zeros(2, 1))
    method.noise_scale = 0.0
    with pytest.raises(ValueError, match="^noise_scale must be positive, got 0.0$"):
        method.predictive_gaussian(torch.zeros(2, 1))
    method.noise_scale = 0.5
    locs, scales = method.predictive_gaussian(torch.zeros(2, 1), num_samples=3)
    assert locs.shape == (3, 2, 1) and scales.item() == 0.5


def test_device_and_dtype_are_read_off_the_tensors():
    empty = _toy_class("BaseToyEmpty")()
    del empty.weight
    assert empty.device == torch.device("cpu") and empty.dtype == torch.get_default_dtype()
    method = _toy_class("BaseToyDouble")().double()
    method.register_buffer("count", torch.zeros((), dtype=torch.long))  # not floating
    assert method.dtype == torch.float64
