"""Every method on the 1-D toy regression with a gap: the predict contract and its uncertainty.

Each method is fitted once (module scope) with a fixed seed. The uncertainty test compares the
mean predictive std (epistemic) far outside the data, and for most methods in the gap, with
the mean std on the training inputs.
"""

import math

import pytest
import torch
import torch.nn as nn

from bnn_pyro.methods import (
    SWAG,
    DeepEnsemble,
    LaplaceApproximation,
    MCDropout,
    VariationalBayesNN,
)
from tests.methods.methods_helpers import relu_mlp, trained

FIT = dict(epochs=300, batch_size=80, lr=1e-2, progress=False, seed=0)


def _gnll_member() -> nn.Module:
    return relu_mlp(d_out=2)


BUILDERS = {
    "mc_dropout": lambda d: trained(
        MCDropout(
            relu_mlp(dropout=0.1), num_samples=100, dropout_rate=0.1, likelihood="regression"
        ),
        d.x,
        d.y,
        **FIT,
    ),
    "ensemble": lambda d: trained(
        DeepEnsemble(relu_mlp, 5, likelihood="regression"), d.x, d.y, **FIT
    ),
    "ensemble_gnll": lambda d: trained(
        DeepEnsemble(_gnll_member, 5, likelihood="regression", gaussian_nll=True), d.x, d.y, **FIT
    ),
    "swag": lambda d: trained(
        SWAG(relu_mlp(), num_samples=50, likelihood="regression"),
        d.x,
        d.y,
        epochs=300,
        batch_size=16,
        lr=1e-2,
        progress=False,
        seed=0,
    ),
    "laplace_diag_fisher": lambda d: trained(
        LaplaceApproximation(relu_mlp(), "regression", num_samples=50),
        d.x,
        d.y,
        weight_decay=1e-3,
        **FIT,
    ),
    "laplace_diag_ggn_glm": lambda d: trained(
        LaplaceApproximation(
            relu_mlp(), "regression", num_samples=50, hessian="ggn", predictive="glm"
        ),
        d.x,
        d.y,
        **FIT,
    ),
    "laplace_last_layer_full_ggn": lambda d: trained(
        LaplaceApproximation(
            relu_mlp(),
            "regression",
            num_samples=50,
            hessian="ggn",
            hessian_structure="full",
            subset="last_layer",
        ),
        d.x,
        d.y,
        **FIT,
    ),
    # 1000 epochs (were 2000, half this fixture's cost): measured under seeds 0, 1 and 2, far
    # std / train std 3.8, 3.5 and 3.6 (the bound is 1.2), RMSE 0.18, 0.10 and 0.19 (0.35; a
    # constant mean is 0.75), noise scale 0.28, 0.18 and 0.29 (0.05-1.0); at 2000 epochs
    # 7.7, 5.3 and 5.6, RMSE 0.11, 0.12 and 0.18
    "variational": lambda d: trained(
        VariationalBayesNN(1, [32], 1, likelihood="regression", num_samples=50),
        d.x,
        d.y,
        epochs=1000,
        batch_size=80,
        lr=1e-2,
        train_samples=4,
        progress=False,
        seed=0,
    ),
}
# Where each method's epistemic std must exceed 1.2x its std on the training inputs. Known
# limitations, seen in the literature and on this data: diagonal/mean-field Gaussian weight
# posteriors (SWAG, diagonal Laplace, mean-field VI) do not grow in the gap between two clusters
# (Foong et al. 2019, "In-between uncertainty in BNNs"); MC dropout's std far out depends on
# which ReLU units stay active there (it shrinks on one side for this seed), so only its gap
# uncertainty is asserted.
REGIONS = {
    "mc_dropout": ("gap",),
    "ensemble": ("gap", "far"),
    "ensemble_gnll": ("gap", "far"),
    "swag": ("far",),
    "laplace_diag_fisher": ("far",),
    "laplace_diag_ggn_glm": ("far",),
    "laplace_last_layer_full_ggn": ("gap", "far"),
    "variational": ("far",),
}


@pytest.fixture(scope="module")
def fitted(gap_data):
    out = {}
    for name, build in BUILDERS.items():
        torch.manual_seed(0)
        method = build(gap_data)
        if name.startswith("laplace"):
            method.optimize_prior_precision()
        out[name] = method
    return out


def _mean_std(method, x):
    _, var = method.predict(x, generator=torch.Generator().manual_seed(1))
    return var.sqrt().mean().item()


@pytest.mark.parametrize("name", list(BUILDERS))
def test_predict_shapes_and_nonnegative_variance(fitted, gap_data, name):
    method = fitted[name]
    x = gap_data.x_far
    mean, var, samples = method.predict(x, return_samples=True)
    s = samples.shape[0]
    assert s == (5 if name.startswith("ensemble") else method.num_samples)
    assert samples.shape == (s, len(x), 1)
    assert mean.shape == var.shape == (len(x), 1)
    assert (var >= 0).all() and torch.isfinite(var).all()
    if getattr(method, "predictive", None) == "glm":  # Laplace's GLM: its closed form, drawn
        torch.testing.assert_close(var, method.glm_variance(x))  # beside the samples
        assert torch.equal(mean, method.predict(x)[0])
    else:
        torch.testing.assert_close(mean, samples.mean(0))
        torch.testing.assert_close(var, samples.var(0, correction=0))


@pytest.mark.parametrize("name", list(BUILDERS))
def test_uncertainty_grows_away_from_data(fitted, gap_data, name):
    method = fitted[name]
    train = _mean_std(method, gap_data.x)
    for region in REGIONS[name]:
        away = _mean_std(method, getattr(gap_data, f"x_{region}"))
        assert away > 1.2 * train, (region, train, away)


@pytest.mark.parametrize("name", list(BUILDERS))
def test_fit_sets_noise_and_mean_fits_data(fitted, gap_data, name):
    # Noise std is 0.1: the residual RMS of a fit that captures sin(x) lies near 0.1, and of
    # the constant mean predictor near 0.75. The Monte Carlo mean of a diagonal Laplace
    # posterior sampled through the net is over-dispersed (its std on the data is ~0.5, so the
    # MC error of a 50-sample mean alone is ~0.07) and VI may underfit, so the bound is 0.35.
    method = fitted[name]
    mean, _ = method.predict(gap_data.x, generator=torch.Generator().manual_seed(2))
    rmse = ((mean - gap_data.y) ** 2).mean().sqrt().item()
    assert rmse < 0.35
    locs, scales = method.predictive_gaussian(gap_data.x)
    assert locs.shape[1:] == (80, 1) and bool((scales > 0).all())
    if name != "ensemble_gnll":
        assert 0.05 < method.noise_scale < 1.0
    else:
        assert method.noise_scale is None
        # heteroscedastic heads: the learned noise on the data is of the order of 0.1
        assert 0.03 < scales.mean().item() < 0.3


@pytest.mark.parametrize("name", list(BUILDERS))
def test_generator_makes_predict_reproducible_without_touching_global_rng(fitted, gap_data, name):
    method = fitted[name]
    state = torch.get_rng_state()
    a = method.predict(gap_data.x_gap, True, generator=torch.Generator().manual_seed(5))[2]
    b = method.predict(gap_data.x_gap, True, generator=torch.Generator().manual_seed(5))[2]
    assert torch.equal(a, b)
    assert torch.equal(state, torch.get_rng_state())


@pytest.mark.parametrize("name", list(BUILDERS))
def test_state_dict_roundtrip(fitted, gap_data, name, tmp_path):
    torch.manual_seed(0)
    method = fitted[name]
    path = tmp_path / "m.pt"
    torch.save(method.state_dict(), path)
    clone = BUILDERS_FRESH[name]()
    clone.load_state_dict(torch.load(path, weights_only=True))
    g = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    torch.testing.assert_close(
        clone.predict(gap_data.x_far, generator=g())[1],
        method.predict(gap_data.x_far, generator=g())[1],
    )
    assert clone.noise_scale == method.noise_scale


BUILDERS_FRESH = {
    "mc_dropout": lambda: MCDropout(relu_mlp(dropout=0.1), 100, 0.1, likelihood="regression"),
    "ensemble": lambda: DeepEnsemble(relu_mlp, 5, likelihood="regression"),
    "ensemble_gnll": lambda: DeepEnsemble(
        _gnll_member, 5, likelihood="regression", gaussian_nll=True
    ),
    "swag": lambda: SWAG(relu_mlp(), num_samples=50, likelihood="regression"),
    "laplace_diag_fisher": lambda: LaplaceApproximation(relu_mlp(), "regression", num_samples=50),
    "laplace_diag_ggn_glm": lambda: LaplaceApproximation(
        relu_mlp(), "regression", num_samples=50, hessian="ggn", predictive="glm"
    ),
    "laplace_last_layer_full_ggn": lambda: LaplaceApproximation(
        relu_mlp(),
        "regression",
        num_samples=50,
        hessian="ggn",
        hessian_structure="full",
        subset="last_layer",
    ),
    "variational": lambda: VariationalBayesNN(1, [32], 1, likelihood="regression", num_samples=50),
}


def test_classification_outputs_are_probabilities():
    torch.manual_seed(0)
    x, y = torch.randn(30, 2), torch.randint(0, 3, (30,))
    methods = [
        MCDropout(relu_mlp(2, 3, 8, dropout=0.2), 5, 0.2),
        DeepEnsemble(lambda: relu_mlp(2, 3, 8), 3),
        trained(
            LaplaceApproximation(relu_mlp(2, 3, 8), num_samples=5), x, y, epochs=0, progress=False
        ),
        VariationalBayesNN(2, [8], 3, num_samples=5),
    ]
    swag = trained(SWAG(relu_mlp(2, 3, 8), num_samples=5), x, y, epochs=4, progress=False)
    for method in [*methods, swag]:
        mean, var, samples = method.predict(x, return_samples=True)
        torch.testing.assert_close(samples.sum(-1), torch.ones(samples.shape[:2]))
        assert (var >= 0).all() and (var <= 0.25).all()  # Var of a [0, 1] variable <= 1/4
        logits = method.predict(x, return_samples=True, normalize_output=False)[2]
        assert not torch.allclose(logits.sum(-1), torch.ones(logits.shape[:2]))
        assert math.isclose(mean.sum().item(), 30.0, rel_tol=1e-5)
