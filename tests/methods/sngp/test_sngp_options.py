"""``SNGP``'s options and messages: its defaults are the reference implementation's, every
setting reaches what it sets (the bounds' power iterations, the head's bias, a fixed noise, the
saved settings), and each refusal is its whole message."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn as nn

import bnn_pyro as bp
from bnn_pyro.methods.sngp import SNGP, SpectralBound


def _bounds(m: SNGP) -> list[SpectralBound]:
    return [b for b in m.model.modules() if isinstance(b, SpectralBound)]


def test_the_defaults_are_the_reference_implementation_s():
    """uncertainty-baselines' SNGP (Liu et al. 2020): 1024 random features, spectral norm
    bound 0.95 with one power iteration per step, a unit kernel lengthscale and a unit ridge
    (prior) on the output weights; the library's 100 samples."""
    m = SNGP(bp.nn.mlp(2, [8, 8], 1), "regression")
    assert (m.num_features, m.head.num_features) == (1024, 1024)
    assert (m.lengthscale, m.prior_scale, m.spectral_bound) == (1.0, 1.0, 0.95)
    assert m.power_iterations == 1 and m.num_samples == bp.BaseBayesianMethod.num_samples
    assert [(b.bound, b.power_iterations) for b in _bounds(m)] == [(0.95, 1), (0.95, 1)]


def test_the_settings_reach_the_bounds_and_the_saved_settings():
    m = SNGP(bp.nn.mlp(2, [8, 8], 1), "regression", spectral_bound=0.5, power_iterations=3)
    assert [(b.bound, b.power_iterations) for b in _bounds(m)] == [(0.5, 3), (0.5, 3)]
    config = m.checkpoint_config()
    assert (config["spectral_bound"], config["power_iterations"]) == (0.5, 3)


@pytest.mark.parametrize("bias", [True, False])
def test_the_head_keeps_the_last_layer_s_bias_or_its_absence(bias):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 2, bias=bias))
    m = SNGP(net, "classification", num_features=16)
    if bias:
        assert torch.equal(m.head.bias, net[2].bias)
    else:
        assert m.head.bias is None


def test_a_fixed_noise_from_the_constructor_is_the_predictive_s_before_a_fit():
    """A new model predicts its prior plus the noise it was given; with a learned noise, its
    start (a unit std) until ``fit`` learns it."""
    x = torch.randn(4, 2)
    fixed = SNGP(bp.nn.mlp(2, [8], 1), "regression", num_features=16, noise_scale=0.3)
    learned = SNGP(bp.nn.mlp(2, [8], 1), bp.Gaussian(scale="learned"), num_features=16)
    assert fixed.noise_scale == 0.3
    for m, noise in ((fixed, 0.09), (learned, 1.0)):
        _, f_var = m.predict(x)
        scale = m.predictive_gaussian(x)[1]  # (1, N, O): the std of y
        torch.testing.assert_close(scale.square().reshape(-1), (f_var + noise).reshape(-1))


def test_the_fit_s_bar_names_the_method(capsys):
    m = SNGP(bp.nn.mlp(2, [8], 1), "regression", num_features=16)
    m.fit(torch.randn(16, 2), torch.randn(16), epochs=1, progress=True)
    assert re.search(r"(?<![A-Za-z])SNGP(?![A-Za-z])", capsys.readouterr().err)


class _NoHessian(bp.Gaussian):
    """A Gaussian whose output Hessian is not known (a user's own likelihood)."""

    def output_hessian(self, f, latents):
        raise TypeError("no Hessian")


@pytest.mark.parametrize(("make", "error", "message"), [
    (lambda: SNGP("net", "regression"), TypeError, "model must be a torch.nn.Module, got str"),
    (
        lambda: SNGP(nn.Sequential(nn.Tanh()), "regression"), ValueError,
        "SNGP makes the net's last nn.Linear its last layer, and this net has none: end the net "
        "with an nn.Linear",
    ),
    (
        lambda: SNGP(bp.nn.mlp(2, [4], 1), _NoHessian(scale=0.1)), ValueError,
        "SNGP's Laplace step needs the Hessian of the log-likelihood in the output, and "
        "_NoHessian gives none: use a Gaussian or Categorical likelihood",
    ),
    *[
        (lambda kw=kw: SNGP(bp.nn.mlp(2, [4], 1), "regression", **kw), ValueError, text)
        for kw, text in [
            ({"num_features": 0}, "num_features must be an int >= 1, got 0"),
            ({"lengthscale": 0.0}, "lengthscale must be a finite float > 0.0, got 0.0"),
            ({"prior_scale": 0.0}, "prior_scale must be a finite float > 0.0, got 0.0"),
            ({"spectral_bound": 0.0}, "spectral_bound must be a finite float > 0.0, got 0.0"),
            ({"power_iterations": 0}, "power_iterations must be an int >= 1, got 0"),
            ({"num_samples": 0}, "num_samples must be an int >= 1, got 0"),
        ]
    ],
])  # fmt: skip
def test_each_refusal_is_its_whole_message(make, error, message):
    with pytest.raises(error) as caught:
        make()
    assert str(caught.value) == message


def test_a_net_whose_output_is_not_the_last_layer_s_rows_is_refused_by_the_features():
    """Features of another shape than ``(N, H)``, or an output reshaped after the last layer,
    are named, not read."""
    m = SNGP(bp.nn.mlp(2, [4], 1), "regression", num_features=8)
    flat = SNGP(nn.Sequential(nn.Linear(2, 4), nn.Linear(4, 1), nn.Flatten(0)), "regression",
                num_features=8)  # fmt: skip
    for model, x in ((m, torch.randn(5, 3, 2)), (flat, torch.randn(5, 2))):
        with pytest.raises(ValueError) as caught:
            model.features(x)
        assert str(caught.value).startswith("SNGP needs a net whose output (N, O) is its last")
