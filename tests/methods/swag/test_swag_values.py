"""``SWAG`` pinned by value: its argument checks word for word, its defaults and kept settings,
its draws against the closed form ``μ + sqrt(scale) (sqrt(σ²) z₁ + D̂ᵀ z₂ / sqrt(k - 1))`` from
the same seeded normals, its refusals before any snapshot, the BatchNorm refresh's data and
warning, the progress bar's name and the seeded noise refit."""

from __future__ import annotations

import copy
import math
import re
import warnings

import pytest
import torch
import torch.nn as nn

from bnn_pyro._rng import seed_from
from bnn_pyro.exceptions import NotFittedError
from bnn_pyro.methods.swag.swag import SWAG

D = torch.float64


@pytest.mark.parametrize(
    ("model", "options", "error", "message"),
    [
        (3, {}, TypeError, "model must be a torch.nn.Module, got int"),
        (nn.ReLU(), {}, ValueError,
         "model must have parameters for SWAG, got a module without any"),
        (None, {"num_samples": 0}, ValueError, "num_samples must be an int >= 1, got 0"),
        (None, {"var_clamp": -1.0}, ValueError,
         r"var_clamp must be a finite float >= 0.0, got -1.0"),
        (None, {"max_num_models": -1}, ValueError, "max_num_models must be an int >= 0, got -1"),
        (None, {"scale": 0.0}, ValueError, r"scale must be a finite float > 0.0, got 0.0"),
    ],
)  # fmt: skip
def test_every_argument_is_refused_by_name(model, options, error, message):
    with pytest.raises(error, match=f"^{message}$"):
        SWAG(nn.Linear(2, 1) if model is None else model, **options)


def test_swa_start_is_refused_by_name():
    swag = SWAG(nn.Linear(2, 2))
    x, y = torch.randn(8, 2), torch.randint(0, 2, (8,))
    with pytest.raises(ValueError, match="^swa_start must be an int >= 0, got -1$"):
        swag.fit(x, y, epochs=2, swa_start=-1, progress=False)


def test_the_defaults_and_the_settings_kept():
    swag = SWAG(nn.Linear(2, 1))
    assert (swag.num_samples, swag.var_clamp, swag.max_num_models, swag.scale) == (
        20,
        1e-6,
        20,
        0.5,
    )
    assert swag.bn_loader is None and swag.swag_n_models.dtype == torch.long
    loader = object()
    kept = SWAG(nn.Linear(2, 1), likelihood="regression", noise_scale=0.3, bn_loader=loader)
    assert kept.bn_loader is loader and float(kept.noise_scale) == 0.3


def _collected(snapshots: int, max_num_models: int = 20, scale: float = 0.5) -> SWAG:
    torch.manual_seed(0)
    net = nn.Linear(3, 2).to(D)
    swag = SWAG(net, max_num_models=max_num_models, scale=scale)
    for _ in range(snapshots):
        with torch.no_grad():
            for p in net.parameters():
                p.add_(0.3 * torch.randn_like(p))
        swag.collect_model()
    return swag


@pytest.mark.parametrize("snapshots", [1, 2, 5])
def test_draws_are_the_closed_form_from_the_same_seeded_normals(snapshots):
    """``θ = μ + sqrt(scale) (sqrt(σ²) z₁ + D̂ᵀ z₂ / sqrt(k - 1))``, the low-rank part from two
    snapshots on (one gives no deviation to spread along), ``z₁ (S, P)`` then ``z₂ (S, k)``
    drawn in float64 under the seed the generator gives."""
    swag = _collected(snapshots, scale=0.7)
    draws = swag.sample_parameters(4, generator=torch.Generator().manual_seed(5))
    flat = torch.cat([draws["weight"].reshape(4, -1), draws["bias"]], 1)
    torch.manual_seed(seed_from(torch.Generator().manual_seed(5)))
    p, dev = swag.swag_mean.numel(), swag.deviations
    noise = swag._flat_variance().sqrt() * torch.randn(4, p, dtype=D)
    if snapshots >= 2:
        noise = noise + torch.randn(4, len(dev), dtype=D) @ dev / math.sqrt(len(dev) - 1)
    want = swag.swag_mean + math.sqrt(0.7) * noise
    assert flat.dtype == D
    torch.testing.assert_close(flat, want, rtol=1e-12, atol=1e-12)


def test_nothing_is_drawn_before_a_snapshot():
    swag = SWAG(nn.Linear(2, 1))
    message = "^SWAG has no snapshots: call collect_model\\(\\) or fit\\(\\) first$"
    with pytest.raises(NotFittedError, match=message):
        swag.sample_parameters(2)
    with pytest.raises(NotFittedError, match=message):
        swag._sample_outputs(torch.randn(3, 2), 2, seed=0)


def test_batchnorm_is_refreshed_from_the_training_rows_or_warned_about():
    """A fit of a net with BatchNorm keeps its training rows for the refresh; one without
    BatchNorm keeps none; a BatchNorm net predicted without refresh data warns."""
    x, y = torch.randn(16, 2), torch.randint(0, 2, (16,))
    plain = SWAG(nn.Linear(2, 2))
    plain.fit(x, y, epochs=2, progress=False, seed=0)
    assert plain.bn_loader is None
    bn = SWAG(nn.Sequential(nn.Linear(2, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)))
    bn.fit(x, y, epochs=2, progress=False, seed=0)
    assert bn.bn_loader is not None
    assert torch.equal(next(iter(bn.bn_loader))[0], x[: len(next(iter(bn.bn_loader))[0])])
    bn.bn_loader = None
    with pytest.warns(RuntimeWarning) as caught:
        bn._sample_outputs(x[:3], 2, seed=0)
    assert [str(w.message) for w in caught] == [
        "SWAG: the net has BatchNorm but bn_loader is None, so the statistics are not "
        "refreshed for each weight sample; set swag.bn_loader"
    ]


def test_the_progress_bar_is_named_after_the_method(capsys):
    swag = SWAG(nn.Linear(2, 1), likelihood="regression")
    x = torch.randn(16, 2)
    swag.fit(x, x.sum(-1), epochs=2, progress=True, seed=0)
    assert re.search(r"(^|\r)SWAG: ", capsys.readouterr().err)


def test_the_noise_refit_after_a_regression_fit_follows_the_fits_seed():
    """Two fits of one net under ``seed=0`` from different global RNG states: the same noise
    (the residuals' predictive mean is drawn under the fit's seed)."""
    x = torch.linspace(-1, 1, 32).unsqueeze(-1)
    y = x.squeeze(-1) ** 2
    net = nn.Sequential(nn.Linear(1, 16), nn.ReLU(), nn.Linear(16, 1))
    noises = []
    for state in (1, 2):
        swag = SWAG(copy.deepcopy(net), num_samples=4, likelihood="regression")
        torch.manual_seed(state)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            swag.fit(x, y, epochs=4, progress=False, seed=0)
        noises.append(torch.as_tensor(swag.noise_scale).clone())
    assert torch.equal(noises[0], noises[1])
