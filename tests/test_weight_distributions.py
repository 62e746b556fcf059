"""The weight distributions: ``ReparamNormal`` scores its own draw from its noise and anything
else as a Normal; ``SharedNormal`` and ``ScaleMixtureNormal`` build, expand and draw in their
parameters' dtype and on their device; ``rebuild_on`` names what it cannot rebuild."""

import math

import pyro.distributions as dist
import pytest
import torch

from bnn_pyro.weight_distributions import (
    LOG_SQRT_2PI,
    ReparamNormal,
    ScaleMixtureNormal,
    SharedNormal,
    rebuild_on,
)


def _reparam(dtype=torch.float32) -> ReparamNormal:  # noqa: ANN001
    g = torch.Generator().manual_seed(0)
    loc = torch.randn(4, 3, generator=g, dtype=dtype)
    return ReparamNormal(loc, 0.1 + torch.rand(4, 3, generator=g, dtype=dtype))


def test_reparam_normal_scores_its_own_draw_from_the_noise_that_made_it():
    """Its last draw is scored as ``-eps²/2 - log(scale) - log(2π)/2`` from the noise itself,
    not from the value: changing the drawn tensor in place afterwards leaves the score as the
    noise's (``Normal.log_prob`` would read the new numbers)."""
    d = _reparam()
    torch.manual_seed(1)
    value = d.rsample()
    torch.manual_seed(1)
    eps = torch.randn(4, 3)
    value.add_(100.0)  # the same tensor object, other numbers
    want = -0.5 * eps.square() - d.scale.log() - LOG_SQRT_2PI
    torch.testing.assert_close(d.log_prob(value), want)


def test_reparam_normal_scores_any_other_value_as_a_normal():
    d = _reparam()
    d.rsample()
    other = torch.randn(4, 3)
    torch.testing.assert_close(d.log_prob(other), dist.Normal(d.loc, d.scale).log_prob(other))


def test_reparam_normal_expands_into_a_reparam_normal():
    d = _reparam().expand((2, 4, 3))
    assert type(d) is ReparamNormal and d.rsample().shape == (2, 4, 3)


def test_reparam_normal_draws_float64_noise_for_float64_parameters():
    """``loc + scale * eps`` with ``eps`` drawn in float64 (a float32 draw cast up would give
    other numbers under the same seed)."""
    d = _reparam(torch.float64)
    torch.manual_seed(2)
    got = d.rsample()
    torch.manual_seed(2)
    want = d.loc + d.scale * torch.randn(4, 3, dtype=torch.float64)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def _cpu_draws_under_meta(draw):  # noqa: ANN001, ANN202
    """``draw()`` outside and inside a ``meta`` default device, from one seed each time."""
    torch.manual_seed(3)
    want = draw()
    torch.manual_seed(3)
    with torch.device("meta"):
        got = draw()
    return got, want


@pytest.mark.parametrize(
    "make",
    [
        lambda: _reparam().rsample,
        lambda: ScaleMixtureNormal(torch.full((5,), 0.5), 1.0, 0.05).sample,
    ],
)
def test_draws_are_made_on_the_parameters_device_whatever_the_default_device(make):
    """Under a ``meta`` default device (a stand-in for a second device) the CPU distribution
    draws the same CPU numbers as outside it."""
    got, want = _cpu_draws_under_meta(make())
    assert got.device.type == "cpu"
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_shared_normal_puts_its_parameters_on_the_given_device():
    with torch.device("meta"):
        d = SharedNormal(0.0, 2.0, torch.device("cpu"), torch.float64)
    assert d.loc.device.type == "cpu" and d.scale.dtype == torch.float64


def test_a_scale_mixture_has_its_parameters_batch_shape_and_draws_in_their_dtype():
    """Tensor parameters give the batch shape; float64 ones give float64 draws whose noise is
    drawn in float64: under one seed, ``eps * (s1 where u < pi else s2)`` as written here."""
    pi = torch.tensor([0.3, 0.7], dtype=torch.float64)
    d = ScaleMixtureNormal(pi, torch.tensor(1.0, dtype=torch.float64), 0.05)
    assert d.batch_shape == (2,)
    torch.manual_seed(4)
    got = d.sample((6,))
    torch.manual_seed(4)
    wide = torch.rand(6, 2) < pi
    scale = torch.where(wide, d.scale1.expand(6, 2), d.scale2.expand(6, 2))
    want = torch.randn(6, 2, dtype=torch.float64) * scale
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_an_expanded_scale_mixture_keeps_the_validation_setting():
    """A mixture built unvalidated (here with a weight outside [0, 1]) expands without a check;
    a validating one still checks the values it scores after expanding."""
    loose = ScaleMixtureNormal(1.5, 1.0, 0.1, validate_args=False).expand((3,))
    assert loose.batch_shape == (3,)
    strict = ScaleMixtureNormal(0.5, 1.0, 0.1, validate_args=True).expand((3,))
    with pytest.raises(ValueError, match="support"):
        strict.log_prob(torch.tensor([0.0, math.nan, 0.0]))


class Renamed(dist.Normal):
    """A Normal whose constructor names its parameters otherwise than its constraints."""

    def __init__(self, mu, sigma, validate_args=None):  # noqa: ANN001
        super().__init__(mu, sigma, validate_args=validate_args)


def test_rebuild_on_names_a_distribution_it_cannot_rebuild():
    with pytest.raises(TypeError) as caught:
        rebuild_on(Renamed(0.0, 1.0), torch.device("cpu"), torch.float64)
    assert str(caught.value) == (
        "cannot rebuild Renamed from its arg_constraints ['loc', 'scale'] on cpu; use a "
        "distribution whose constructor takes them (Renamed.__init__() got an unexpected "
        "keyword argument 'loc')"
    )


class TaggedShared(SharedNormal):
    """A subclass with a constructor of its own, expanding by torch's protocol."""

    def __init__(self, tag: str) -> None:
        super().__init__(0.0, 2.0, torch.device("cpu"), torch.float32)
        self.tag = tag

    def expand(self, batch_shape, _instance=None):  # noqa: ANN001, ANN201
        new = self._get_checked_instance(TaggedShared, _instance)
        return super().expand(batch_shape, _instance=new)


class TaggedMixture(ScaleMixtureNormal):
    """As ``TaggedShared``, for the scale mixture."""

    def __init__(self, tag: str) -> None:
        super().__init__(0.5, 1.0, 0.1)
        self.tag = tag

    def expand(self, batch_shape, _instance=None):  # noqa: ANN001, ANN201
        new = self._get_checked_instance(TaggedMixture, _instance)
        return super().expand(batch_shape, _instance=new)


@pytest.mark.parametrize("cls", [TaggedShared, TaggedMixture])
def test_a_subclass_expands_into_its_own_instance(cls):
    """``expand`` builds its copy in the ``_instance`` a subclass hands it, so the copy is of
    the subclass and scores as the original does."""
    d = cls("t")
    expanded = d.expand((3,))
    assert type(expanded) is cls and expanded.batch_shape == (3,)
    value = torch.tensor([0.0, 0.5, -1.0])
    torch.testing.assert_close(expanded.log_prob(value), d.log_prob(value).expand(3))
