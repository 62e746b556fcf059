"""Device placement of the priors, the metrics and the calibration helpers, checked without a
GPU (``meta`` stands in for a second device).

As in ``test_meta_stand_in_methods.py``: a prior built for ``device="meta"`` must be on
``meta`` (its draws too), and a function fed CPU inputs under ``with torch.device("meta")``
(the default device) must give the same CPU numbers as outside it; a factory that forgot its
device makes a ``meta`` tensor there, which then fails to read or to mix with the inputs.
"""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine

from bnn_pyro.calibration.moments import calibration_targets, predictive_moments
from bnn_pyro.metrics._validation import check_scales, check_y_scale
from bnn_pyro.metrics.function_space import empirical_quantiles, wasserstein2
from bnn_pyro.priors import (
    HierarchicalNormalPrior,
    HorseshoePrior,
    IIDPrior,
    LayerwiseNormalPrior,
    ScaleMixturePrior,
)
from bnn_pyro.priors._latent import scale_prior_config

META = torch.device("meta")


def _under_meta(fn):  # noqa: ANN001, ANN202
    """``fn()`` with ``meta`` as the default device."""
    with torch.device("meta"):
        return fn()


# ---------------------------------------------------------------------- priors
@pytest.mark.parametrize(
    "prior",
    [
        IIDPrior(dist.Normal(0.0, 2.0)),  # the shared-normal path
        IIDPrior(dist.Laplace(0.0, 2.0)),  # rebuilt on the device
        ScaleMixturePrior(),
        LayerwiseNormalPrior(),
    ],
    ids=["iid-normal", "iid-laplace", "scale-mixture", "layerwise"],
)
def test_a_per_element_prior_is_built_on_the_device_it_is_asked_for(prior):
    """``distribution(module, name, meta, float64)``: draws on ``meta`` in float64 (argument
    checks, which read values, off)."""
    with pyro.validation_enabled(False):
        d = prior.distribution(torch.nn.Linear(3, 2), "weight", META, torch.float64)
        draw = d.sample()
    assert draw.device == META and draw.dtype == torch.float64


@pytest.mark.parametrize(
    "prior",
    [HorseshoePrior(), HorseshoePrior(local="weight"), HierarchicalNormalPrior()],
    ids=["horseshoe", "horseshoe-per-weight", "hierarchical"],
)
def test_a_prior_with_latent_scales_draws_them_on_the_device_it_is_asked_for(prior):
    """``site_distribution(..., meta, float64, name="w")``: every latent scale site it samples
    and the weight prior it returns are on ``meta``."""
    with poutine.trace() as tracer, pyro.validation_enabled(False):
        d = prior.site_distribution(
            torch.nn.Linear(3, 2), "weight", torch.Size([2, 3]), META, torch.float64, name="w"
        )
        draw = d.sample()
    sites = [s for s in tracer.trace.nodes.values() if s["type"] == "sample"]
    assert sites and all(s["value"].device == META for s in sites)
    assert draw.device == META and draw.shape == (2, 3) and draw.dtype == torch.float64


def test_a_hierarchical_prior_per_element_draws_its_scale_on_the_device_asked_for():
    with poutine.trace() as tracer, pyro.validation_enabled(False):
        d = HierarchicalNormalPrior().distribution(
            torch.nn.Linear(3, 2), "weight", META, torch.float64, name="w"
        )
    (site,) = [s for s in tracer.trace.nodes.values() if s["type"] == "sample"]
    assert site["value"].device == META and d.scale.device == META


def test_a_scale_prior_s_python_number_parameter_is_saved_on_the_cpu_whatever_the_default():
    """A checkpoint's settings stay on the CPU under another default device (a user who set
    ``torch.set_default_device("cuda")``): the Python-float parameter becomes a CPU tensor."""

    class HalfNormal(dist.HalfNormal):
        @property
        def scale(self):  # noqa: ANN202
            return 0.5

    d = HalfNormal(1.0, validate_args=False)
    saved = _under_meta(lambda: scale_prior_config(d))["params"]["scale"]
    assert saved.device.type == "cpu" and float(saved) == 0.5


# ---------------------------------------------------------------------- metrics
def test_the_empirical_quantile_levels_are_indexed_on_the_samples_device():
    """``empirical_quantiles``: the same CPU quantiles under a ``meta`` default device as
    outside it (its level indices are made on the samples' device)."""
    samples = torch.randn(40, 3, generator=torch.Generator().manual_seed(0))
    expected = empirical_quantiles(samples, 7)
    got = _under_meta(lambda: empirical_quantiles(samples, 7))
    assert got.device.type == "cpu" and torch.equal(got, expected)


def test_wasserstein2_moves_the_reference_to_the_samples_device():
    """Samples on ``meta`` and a CPU reference: the reference is moved to the samples' device,
    and the distance comes out there (``meta``: shape only, one per point)."""
    got = wasserstein2(torch.zeros(5, 4, device=META), torch.randn(6, 4), num_levels=10)
    assert got.device == META and got.shape == (4,)


def test_the_scale_checks_put_a_number_on_the_data_s_device():
    """``check_scales``/``check_y_scale`` with a float: a CPU tensor (the data's device) under a
    ``meta`` default device too, with its value."""
    locs = torch.zeros(3, 2, dtype=torch.float64)
    scales = _under_meta(lambda: check_scales(0.5, locs))
    assert scales.device.type == "cpu" and scales.dtype == torch.float64
    assert float(scales) == 0.5
    y = torch.zeros(4, 1)
    y_scale = _under_meta(lambda: check_y_scale(2.0, y))
    assert y_scale.device.type == "cpu" and y_scale.shape == () and float(y_scale) == 2.0


class _Predictive:
    """A fitted regression method's Gaussian predictive: fixed CPU locs, a float noise."""

    locs = torch.tensor([[[0.0], [1.0]], [[2.0], [1.0]]], dtype=torch.float64)  # (S=2, N=2, 1)

    def predictive_gaussian(self, x, **options):  # noqa: ANN001, ANN003, ANN202
        return self.locs, 0.5


def test_the_predictive_moments_put_a_float_noise_on_the_locs_device():
    """``predictive_moments`` with a float noise under a ``meta`` default device: CPU numbers,
    mean ``(1, 1)``, sd ``sqrt(spread + 0.25)`` = ``sqrt(1.25)`` and ``0.5`` (hand-worked)."""
    x = torch.zeros(2, 1)
    mean, sd = _under_meta(lambda: predictive_moments(_Predictive(), x))
    assert mean.device.type == sd.device.type == "cpu"
    torch.testing.assert_close(mean, torch.tensor([[1.0], [1.0]], dtype=torch.float64))
    torch.testing.assert_close(sd, torch.tensor([[1.25**0.5], [0.5]], dtype=torch.float64))


def test_the_calibration_targets_go_to_the_predictions_device():
    """A list of targets becomes ``(n, 1)`` on ``like``'s device (``meta``) in its dtype (the
    finiteness check reads the values before the move)."""
    y = calibration_targets([1.0, 2.0, 3.0], torch.zeros(3, 1, dtype=torch.float64, device=META))
    assert y.device == META and y.dtype == torch.float64 and y.shape == (3, 1)
