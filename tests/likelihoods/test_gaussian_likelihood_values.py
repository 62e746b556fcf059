"""The Gaussian likelihoods pinned value by value: the null model's log-likelihood in closed
form, the constructor's checks at their boundaries (and their whole messages), the dtype and
shape of the noise a prediction reads, and the learned noise's prior."""

from __future__ import annotations

import math
import re

import pyro
import pyro.distributions as dist
import pytest
import torch

import bnn_pyro as bp
from bnn_pyro.likelihoods.gaussian import NOISE_SITE

HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _normal_nll(y: torch.Tensor, mean: list[float], sd: list[float]) -> float:
    """Σ over rows and columns of -log N(y; mean_j, sd_j), written out with math."""
    total = 0.0
    for row in y.tolist():
        for v, m, s in zip(row, mean, sd, strict=True):
            total += HALF_LOG_2PI + math.log(s) + 0.5 * ((v - m) / s) ** 2
    return total


# two columns with different means and spreads, and a spread below 1 in the first
Y = torch.tensor([[0.0, 10.0], [0.2, 14.0], [0.4, 12.0], [0.6, 20.0]])


def test_the_null_nll_with_a_fixed_scale_is_the_closed_form_in_double():
    """Column means 0.3 and 14, the fixed sd 0.1 (not the columns' spread): the closed form to
    1e-12 relative, which a float32 copy of 0.1 (off by 1.5e-8 relative) would miss. An int
    scale is read as that float."""
    expected = _normal_nll(Y.double(), [0.3, 14.0], [0.1, 0.1])
    assert bp.Gaussian(scale=0.1).null_nll(Y) == pytest.approx(expected, rel=1e-12)
    expected_2 = _normal_nll(Y.double(), [0.3, 14.0], [2.0, 2.0])
    assert bp.Gaussian(scale=2).null_nll(Y) == pytest.approx(expected_2, rel=1e-12)


@pytest.mark.parametrize(
    "likelihood", [bp.Gaussian(scale="learned"), bp.HeteroscedasticGaussian()], ids=repr
)
def test_the_null_nll_with_a_fitted_scale_uses_each_column_s_own_spread(likelihood):
    """Where the noise is not fixed, each column gets its own mean and its own maximum-
    likelihood (divide-by-N) std: column 0 has values 0, 0.2, 0.4, 0.6, std sqrt(0.05); column
    1 has 10, 14, 12, 20, mean 14, std sqrt(14)."""
    expected = _normal_nll(Y.double(), [0.3, 14.0], [math.sqrt(0.05), math.sqrt(14.0)])
    assert likelihood.null_nll(Y) == pytest.approx(expected, rel=1e-12)


def test_the_default_scale_is_one_and_every_bad_scale_is_refused_with_its_message():
    assert bp.Gaussian().scale == 1.0 and type(bp.Gaussian(scale=2).scale) is float
    for bad in (0.0, -1.0, math.inf):
        with pytest.raises(ValueError, match=rf"^scale must be positive and finite, got {bad}$"):
            bp.Gaussian(scale=bad)
    for bad in (True, None, [1.0]):
        with pytest.raises(
            TypeError,
            match=rf"^scale must be a positive float or 'learned', got {re.escape(repr(bad))}$",
        ):
            bp.Gaussian(scale=bad)
    for bad in (0.0, -2.0):
        with pytest.raises(
            ValueError, match=rf"^scale_init must be positive and finite, got {bad}$"
        ):
            bp.Gaussian(scale="learned", scale_init=bad)
    assert type(bp.Gaussian(scale="learned", scale_init=2).scale_init) is float
    with pytest.raises(ValueError, match=r"^scale_init is only used with scale='learned'$"):
        bp.Gaussian(scale=0.5, scale_init=0.3)
    with pytest.raises(ValueError, match=r"^scale_prior is only used with scale='learned'$"):
        bp.Gaussian(scale=0.5, scale_prior=dist.HalfNormal(1.0))
    with pytest.raises(ValueError, match=r"^scale_prior must have support on the positive"):
        bp.Gaussian(scale="learned", scale_prior=dist.Normal(0.0, 1.0))


def test_the_default_noise_prior_is_lognormal_0_1():
    """Median 1 and 95% of its mass in [exp(-1.96), exp(1.96)] = [0.141, 7.10], as documented."""
    prior = bp.Gaussian(scale="learned").scale_prior
    assert isinstance(prior, dist.LogNormal)
    assert (float(prior.loc), float(prior.scale)) == (0.0, 1.0)


def test_the_noise_prior_has_one_scale_per_output_in_the_output_s_dtype_and_is_kept():
    """Net outputs (S, N, O) = (4, 3, 2): the event is (O,) = (2,), not N; float64 outputs get
    a float64 prior; the second call returns the same object (built once per shape)."""
    lik = bp.Gaussian(scale="learned")
    f = torch.zeros(4, 3, 2, dtype=torch.float64)
    prior = lik.noise_prior(f)
    assert prior.event_shape == (2,) and prior.batch_shape == ()
    assert prior.sample().dtype == torch.float64
    assert lik.noise_prior(f) is prior


def test_a_fixed_scale_is_read_in_the_output_s_dtype():
    f = torch.zeros(5, 1, dtype=torch.float64)
    variance = bp.Gaussian(scale=0.1).noise_variance(f, {})
    assert variance.dtype == torch.float64 and float(variance) == 0.1**2


def test_posterior_scale_samples_line_up_with_each_sample_s_outputs():
    """Scales (S, O) = (3, 2) against outputs (S, N, O) = (3, 2, 2): sample s's scale for
    output j is scales[s, j] on every row, whatever N."""
    scales = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    f = torch.zeros(3, 2, 2)
    _, scale = bp.Gaussian(scale="learned").loc_scale(f, {NOISE_SITE: scales})
    assert torch.equal(torch.broadcast_to(scale, f.shape), scales[:, None, :].expand(3, 2, 2))


def test_the_mean_of_a_heteroscedastic_head_is_its_first_half_of_each_sample():
    """Outputs (S, N, 2O) = (4, 3, 2): the mean is the first column of each sample's rows."""
    f = torch.arange(24.0).reshape(4, 3, 2)
    assert torch.equal(bp.HeteroscedasticGaussian().mean(f), f[..., :1])


def test_a_nan_output_gives_a_nan_density_not_a_constraint_error():
    """The density does not validate its arguments (a fit's NaN check names the step instead
    of Pyro's constraint error from inside the model): a NaN loc gives a NaN log-density."""
    d = bp.Gaussian(scale=1.0).distribution(torch.full((2, 1), math.nan), {})
    assert torch.isnan(d.log_prob(torch.zeros(2, 1))).all()


def test_wrong_targets_are_refused_naming_the_gaussian_likelihood():
    with pytest.raises(
        ValueError,
        match=r"^y must have shape \(N, 2\) for a Gaussian likelihood "
        r"with 2 output\(s\), got \(3, 3\)$",
    ):
        bp.Gaussian().check_targets(torch.zeros(3, 3), 2)


def test_latent_priors_are_the_noise_prior_read_without_pyro_and_unchecked():
    """A learned noise's prior by its site's name, the density ``noise_prior`` gives, built not
    to check the values it scores (a check would break a compiled objective's graph); a fixed
    noise has none; a subclass drawing its own latents is replayed (``None``)."""
    f = torch.zeros(4, 2)
    learned = bp.Gaussian(scale="learned")
    priors = learned.latent_priors(f)
    assert list(priors) == ["likelihood.scale"]
    value = torch.tensor([0.3, 2.0])
    torch.testing.assert_close(
        priors["likelihood.scale"].log_prob(value), learned.noise_prior(f).log_prob(value)
    )
    assert learned.latent_priors(f)["likelihood.scale"] is priors["likelihood.scale"]  # cached
    with pyro.validation_enabled(True):
        with pytest.raises(ValueError, match="support"):
            learned.noise_prior(torch.zeros(4, 3)).log_prob(torch.tensor([-1.0, 1.0, 1.0]))
        bad = learned.latent_priors(torch.zeros(4, 3))["likelihood.scale"]
        assert not torch.isfinite(bad.log_prob(torch.tensor([-1.0, 1.0, 1.0])))  # unchecked
    assert bp.Gaussian(0.3).latent_priors(f) == {}

    class _OwnNoise(bp.Gaussian):
        def sample_latents(self, f):
            return {}

    assert _OwnNoise(scale="learned").latent_priors(f) is None
