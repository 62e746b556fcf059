"""The noise a classic fit estimates (``bnn_pyro/methods/classic/noise.py``): the
maximum-likelihood std of the training residuals of the method's own predictive mean, that
mean taken unnormalised and drawn from the fit's seed, so a seeded fit leaves the global RNG
alone and gives the same noise whatever state the global RNG is in."""

from __future__ import annotations

import torch

import bnn_pyro as bp
from tests.methods.methods_helpers import relu_mlp


def _data(outputs: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(48, 3, generator=g)
    y = torch.stack([x.sum(-1) * (k + 1) for k in range(outputs)], -1)
    return x, y + 0.3 * torch.randn(48, outputs, generator=g)


def _dropout(outputs: int) -> bp.MCDropout:
    torch.manual_seed(0)
    return bp.MCDropout(relu_mlp(3, outputs, 16, dropout=0.2), likelihood="regression")


def test_the_noise_is_the_residual_std_of_the_unnormalised_predictive_mean():
    """Two outputs: a softmax of the mean (``normalize_output=True``) would give another
    residual. The expected value is recomputed from ``predict`` with the fit's seed."""
    x, y = _data(2)
    method = _dropout(2)
    method.fit(x, y, epochs=3, progress=False, seed=5)
    mean, _ = method.predict(x, normalize_output=False, generator=torch.Generator().manual_seed(5))
    want = (y - mean).pow(2).mean(0).sqrt()  # one maximum-likelihood std per output
    torch.testing.assert_close(torch.as_tensor(method.noise_scale), want)


def test_a_seeded_fit_estimates_its_noise_from_its_own_seed():
    """The global RNG is left as it was, and its state does not change the noise."""
    x, y = _data(1)
    noises = []
    for draws in (0, 7):  # the global RNG moved by different amounts before the fit
        method = _dropout(1)
        torch.randn(draws)
        before = torch.get_rng_state()
        method.fit(x, y, epochs=2, progress=False, seed=3)
        assert torch.equal(torch.get_rng_state(), before)
        noises.append(method.noise_scale)
    assert noises[0] == noises[1]
    torch.manual_seed(0)
    swag = bp.SWAG(relu_mlp(3, 1, 16), likelihood="regression")
    before = torch.get_rng_state()
    swag.fit(x, y, epochs=3, progress=False, seed=3)
    assert torch.equal(torch.get_rng_state(), before)
