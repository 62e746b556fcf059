"""``Prior``, the base of the priors, on its own: its argument checks (whole messages), the
selection of a root module's parameters, the cache of site distributions and what the prior's
``distribution`` is called with, :func:`takes_name` on every kind of signature, and checkpoint
configs with custom layer types, missing keys and user-defined priors."""

from __future__ import annotations

import gc
import re
import weakref

import pyro
import pyro.distributions as dist
import pytest
import torch
import torch.nn as nn

from bnn_pyro.priors import IIDPrior, Prior, prior_from_config
from bnn_pyro.priors.base import takes_name

N01 = dist.Normal(0.0, 1.0)


class RecordingPrior(Prior):
    """``Normal(0, 1)``, noting every call of ``distribution`` and its arguments."""

    def __init__(self, **selection):
        super().__init__(**selection)
        self.calls = []

    def distribution(self, module, param_name, device, dtype, *, name=None):
        self.calls.append((module, param_name, device, dtype, name))
        return dist.Normal(torch.zeros((), dtype=dtype), torch.ones((), dtype=dtype))

    def _own_config(self):
        return {}


class UncachedRecordingPrior(RecordingPrior):
    cached = False


class NoConfigPrior(Prior):
    """A prior with a constructor of its own and no ``_own_config``."""

    def __init__(self, width=1.0):
        super().__init__()
        self.width = width

    def distribution(self, module, param_name, device, dtype):
        return dist.Normal(0.0, self.width)


class PlainPrior(Prior):
    """A user's prior keeping ``Prior``'s constructor: it reloads by its class name."""

    def distribution(self, module, param_name, device, dtype):
        return dist.Normal(torch.zeros((), dtype=dtype), 2 * torch.ones((), dtype=dtype))


class PlatedPrior(RecordingPrior):
    """A cached prior that opens a plate (a subsample site, not a draw) while building."""

    def distribution(self, module, param_name, device, dtype, *, name=None):
        with pyro.plate("units", 3):
            return super().distribution(module, param_name, device, dtype, name=name)


class MyLinear(nn.Linear):
    pass


def test_the_selection_patterns_are_checked_naming_the_argument():
    for arg in ("include", "exclude"):
        msg = f"{arg} must be a pattern or a list of patterns, got 3"
        with pytest.raises(TypeError, match="^" + re.escape(msg) + "$"):
            IIDPrior(N01, **{arg: 3})
        with pytest.raises(
            TypeError, match="^" + re.escape(f"{arg} must contain strings, got (1,)") + "$"
        ):
            IIDPrior(N01, **{arg: [1]})


def test_the_layer_types_must_be_module_classes():
    msg = "types must be nn.Module subclasses, got (<class 'torch.nn.modules.linear.Linear'>, 3)"
    with pytest.raises(TypeError, match="^" + re.escape(msg) + "$"):
        IIDPrior(N01, types=[nn.Linear, 3])
    with pytest.raises(TypeError, match=r"^types must be nn\.Module subclasses"):
        IIDPrior(N01, types=[int])  # a class, but not a layer


def test_a_root_modules_parameters_are_named_without_a_leading_dot():
    """A bare ``nn.Linear`` as the net: its module path is ``""``, its parameters ``"weight"``
    and ``"bias"``."""
    prior = IIDPrior(N01, include="weight")
    assert prior.is_bayesian("", nn.Linear(2, 3), "weight")
    assert not prior.is_bayesian("", nn.Linear(2, 3), "bias")
    assert IIDPrior(N01, include="0.weight").is_bayesian("0", nn.Linear(2, 3), "weight")


def test_a_cached_prior_builds_each_site_once_with_the_modules_arguments():
    """Two calls with the same parameter, device and dtype give the same site, built by one
    call of ``distribution`` with the module, the parameter's name, device, dtype and site
    name; another dtype is built anew; the module stays an ordinary module (``dir`` works)."""
    prior, layer, cpu = RecordingPrior(), nn.Linear(2, 3), torch.device("cpu")
    first = prior.site_distribution(
        layer, "weight", torch.Size([3, 2]), cpu, torch.float64, name="w"
    )
    again = prior.site_distribution(
        layer, "weight", torch.Size([3, 2]), cpu, torch.float64, name="w"
    )
    assert again is first and prior.calls == [(layer, "weight", cpu, torch.float64, "w")]
    assert (tuple(first.batch_shape), tuple(first.event_shape)) == ((), (3, 2))
    w = torch.randn(3, 2, dtype=torch.float64)
    assert torch.allclose(first.log_prob(w), torch.distributions.Normal(0.0, 1.0).log_prob(w).sum())
    other = prior.site_distribution(
        layer, "weight", torch.Size([3, 2]), cpu, torch.float32, name="w"
    )
    assert other is not first and len(prior.calls) == 2
    assert "weight" in dir(layer)


def test_an_uncached_prior_builds_a_site_on_every_call_with_the_modules_arguments():
    prior, layer, cpu = UncachedRecordingPrior(), nn.Linear(2, 3), torch.device("cpu")
    first = prior.site_distribution(layer, "bias", torch.Size([3]), cpu, torch.float64, name="b")
    again = prior.site_distribution(layer, "bias", torch.Size([3]), cpu, torch.float64, name="b")
    assert again is not first
    assert prior.calls == [(layer, "bias", cpu, torch.float64, "b")] * 2


def test_a_cached_prior_may_open_a_plate_while_building():
    """A plate's subsample site is not a draw: only sampled latents are refused."""
    prior = PlatedPrior()
    site = prior.site_distribution(nn.Linear(2, 3), "bias", torch.Size([3]), "cpu", torch.float32)
    assert tuple(site.event_shape) == (3,)


def test_a_cached_prior_that_samples_gets_the_whole_message():
    class Drawing(RecordingPrior):
        def distribution(self, module, param_name, device, dtype, *, name=None):
            pyro.sample("s", dist.HalfNormal(1.0))
            return super().distribution(module, param_name, device, dtype, name=name)

    msg = (
        "Drawing.distribution samples the latent site(s) ['s'], but the prior caches its "
        "distributions: set cached = False on the class"
    )
    with pytest.raises(ValueError, match="^" + re.escape(msg) + "$"):
        Drawing().site_distribution(nn.Linear(2, 3), "bias", torch.Size([3]), "cpu", torch.float32)


def test_takes_name_reads_each_kind_of_signature():
    """``name`` as a keyword-only or ordinary parameter, or a ``**kwargs``, takes it; other
    keyword-only parameters, a positional-only ``name`` or ``*name`` do not."""

    def keyword_only(module, *, name=None): ...
    def ordinary(module, name=None): ...
    def var_keyword(module, **kwargs): ...
    def other_keyword(module, *, label=None): ...
    def positional_only(name, /): ...
    def star_name(*name): ...
    def plain(module, param_name): ...

    for fn in (keyword_only, ordinary, var_keyword):
        assert takes_name(fn) is True and takes_name(fn) is True  # (the second from the memo)
    for fn in (other_keyword, positional_only, star_name, plain):
        assert takes_name(fn) is False and takes_name(fn) is False
    assert takes_name(RecordingPrior().distribution) is True
    assert takes_name(PlainPrior().distribution) is False


def test_asking_whether_a_priors_method_takes_the_name_keeps_no_hold_on_the_prior():
    """The answer is remembered per function, not per bound method: the prior can be freed."""
    prior = RecordingPrior()
    assert takes_name(prior.distribution) is True
    ref = weakref.ref(prior)
    del prior
    gc.collect()
    assert ref() is None


def test_torch_nn_layer_types_round_trip_through_a_config():
    prior = IIDPrior(N01, types=[nn.Linear, nn.Conv1d])
    config = prior.config()
    assert config["types"] == ["Linear", "Conv1d"]
    assert prior_from_config(config).types == (nn.Linear, nn.Conv1d)


def test_a_layer_type_outside_torch_nn_cannot_be_saved():
    msg = "only torch.nn layer types can be saved in a checkpoint"
    with pytest.raises(ValueError, match="^" + re.escape(msg) + "$"):
        IIDPrior(N01, types=[MyLinear]).config()


def test_a_config_without_selection_keys_takes_the_default_selection():
    """An older checkpoint without ``include``/``exclude``/``types``: everything selected."""
    config = {k: v for k, v in IIDPrior(N01, exclude="*.bias").config().items()}
    for key in ("include", "exclude", "types"):
        del config[key]
    rebuilt = prior_from_config(config)
    assert (rebuilt.include, rebuilt.exclude) == (("*",), ())
    assert rebuilt.types == IIDPrior(N01).types


def test_a_config_of_an_unknown_or_missing_type_is_refused_listing_the_known_ones():
    for config, kind in (({"type": "NoSuchPrior"}, "'NoSuchPrior'"), ({}, "None")):
        msg = (
            f"unknown prior type {kind} in checkpoint (known: {sorted(Prior._subclasses)}); "
            "import the module that defines it before loading"
        )
        with pytest.raises(ValueError, match="^" + re.escape(msg) + "$"):
            prior_from_config(config)


def test_a_users_prior_reloads_by_its_class_name():
    """Defining the class registers it (here inside the test, so that the registration runs
    with the test)."""

    class ReloadedPrior(PlainPrior):
        pass

    rebuilt = prior_from_config(ReloadedPrior(exclude="*.bias").config())
    assert type(rebuilt) is ReloadedPrior and rebuilt.exclude == ("*.bias",)
    assert repr(rebuilt) == "ReloadedPrior()"


def test_a_prior_with_its_own_constructor_must_say_what_to_save():
    msg = (
        "NoConfigPrior has a constructor of its own: define _own_config() returning its "
        "settings, so that a saved model rebuilds the same prior"
    )
    with pytest.raises(NotImplementedError, match="^" + re.escape(msg) + "$"):
        NoConfigPrior().config()
    assert repr(NoConfigPrior()) == "NoConfigPrior(...)"
