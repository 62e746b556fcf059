"""VariationalBNN: fit and predict for every likelihood, shapes, determinism, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import bnn_pyro as bp


def _bnn(d: int, out: int, likelihood, hidden=(8,), **kwargs) -> bp.VariationalBNN:
    torch.manual_seed(0)
    return bp.VariationalBNN(bp.nn.mlp(d, list(hidden), out), likelihood, **kwargs)


def test_regression_fit_predict_shapes_and_history(regression_data):
    X, y = regression_data
    bnn = _bnn(3, 1, bp.Gaussian(scale="learned"))
    history = bnn.fit(X, y, epochs=30, batch_size=16, progress=False, seed=0)
    assert set(history) >= {"epoch", "loss", "nll", "kl", "kl_weight", "seconds"}
    assert len(history["loss"]) == 30 and history["loss"][-1] < history["loss"][0]
    mean, var = bnn.predict(X[:5], num_samples=7)
    assert mean.shape == var.shape == (5, 1) and bool((var >= 0).all())
    mean2, var2, samples = bnn.predict(X[:5], num_samples=7, return_samples=True, seed=1)
    assert samples.shape == (7, 5, 1)
    assert torch.allclose(samples.mean(0), mean2) and torch.allclose(
        samples.var(0, correction=0), var2
    )
    _, total = bnn.predict(X[:5], num_samples=7, include_noise=True, seed=1)
    assert bool((total > var2).all())  # the aleatoric part is added


def test_predict_is_vectorized_and_matches_a_loop_over_samples(regression_data):
    X, y = regression_data
    bnn = _bnn(3, 1, bp.Gaussian(scale=0.1))
    bnn.fit(X, y, epochs=5, progress=False, seed=0)
    draws = bnn.sample_posterior(6, seed=0)
    _, _, samples = bnn.predict(X, return_samples=True, posterior_samples=draws, chunk_size=10)
    for s in range(6):
        h = torch.relu(X @ draws["net.0.weight"][s].T + draws["net.0.bias"][s])
        f = h @ draws["net.2.weight"][s].T + draws["net.2.bias"][s]
        assert torch.allclose(samples[s], f, atol=1e-5)


def test_classification_predicts_mean_softmax(classification_data):
    X, y = classification_data
    bnn = _bnn(2, 3, bp.Categorical())
    bnn.fit(X, y, epochs=20, batch_size=20, progress=False, seed=0)
    mean, var, samples = bnn.predict(X, num_samples=5, return_samples=True)
    assert mean.shape == (60, 3) and samples.shape == (5, 60, 3)
    assert torch.allclose(mean.sum(-1), torch.ones(60), atol=1e-5)
    assert bool((samples >= 0).all())


def test_bernoulli_and_heteroscedastic_likelihoods(classification_data, regression_data):
    X, labels = classification_data
    bnn = _bnn(2, 1, bp.Bernoulli())
    bnn.fit(X, (labels > 0).float(), epochs=5, progress=False, seed=0)
    p, _ = bnn.predict(X, num_samples=4)
    assert bool(((p >= 0) & (p <= 1)).all())
    X, y = regression_data
    het = _bnn(3, 2, bp.HeteroscedasticGaussian())
    het.fit(X, y, epochs=5, progress=False, seed=0)
    mean, var = het.predict(X, num_samples=4)
    assert mean.shape == (64, 1)
    locs, scales = het.predictive_gaussian(X, num_samples=4)
    assert locs.shape == scales.shape == (4, 64, 1) and bool((scales > 0).all())


def test_dataloader_and_numpy_inputs(regression_data):
    X, y = regression_data
    bnn = _bnn(3, 1, bp.Gaussian(scale=0.1))
    loader = DataLoader(TensorDataset(X, y), batch_size=16, shuffle=True)
    history = bnn.fit(loader, epochs=2, progress=False, seed=0)
    assert bnn.dataset_size == 64 and len(history["loss"]) == 2
    bnn.fit(X.numpy(), y.numpy().ravel(), epochs=1, progress=False)
    mean, _ = bnn.predict(np.asarray(X[:3]), num_samples=3)
    assert mean.shape == (3, 1)


def test_same_seed_same_numbers(regression_data):
    X, y = regression_data
    results = []
    for _ in range(2):
        bnn = _bnn(3, 1, bp.Gaussian(scale=0.1))
        history = bnn.fit(X, y, epochs=3, batch_size=16, progress=False, seed=5)
        results.append((history["loss"], bnn.predict(X, num_samples=4, seed=2)[0]))
    assert results[0][0] == results[1][0]
    assert torch.equal(results[0][1], results[1][1])


def test_seeded_calls_leave_the_global_rng_alone(regression_data):
    X, y = regression_data
    bnn = _bnn(3, 1, bp.Gaussian(scale=0.1))
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    bnn.fit(X, y, epochs=1, progress=False, seed=0)
    bnn.predict(X, num_samples=3, seed=0)
    assert torch.equal(torch.rand(3), expected)


# ---------------------------------------------------------------- bad input, before any work
@pytest.mark.parametrize(
    "X_bad, y_bad, error, words",
    [
        (torch.randn(10, 4), torch.randn(10), ValueError, "3 feature"),
        (torch.randn(10, 3), torch.randn(9), ValueError, "same number of rows"),
        (torch.full((10, 3), float("nan")), torch.randn(10), ValueError, "NaN"),
        (torch.randn(10, 3), torch.full((10,), float("inf")), ValueError, "NaN or infinite"),
        (torch.randn(10), torch.randn(10), ValueError, "reshape(-1, 1)"),
        ("not data", torch.randn(10), TypeError, "X must be"),
    ],
)
def test_bad_training_data_is_refused_before_any_work(X_bad, y_bad, error, words):
    bnn = _bnn(3, 1, bp.Gaussian(scale=0.1))
    with pytest.raises(error, match=None) as info:
        bnn.fit(X_bad, y_bad, epochs=1, progress=False)
    assert words in str(info.value)
    assert not bnn.guide.is_setup and bnn.dataset_size is None  # nothing changed


@pytest.mark.parametrize(
    "labels, words",
    [(torch.tensor([0, 1, 3] * 20), "in [0, 2]"), (torch.tensor([0.5] * 60), "integer")],
)
def test_bad_labels_are_refused(classification_data, labels, words):
    X, _ = classification_data
    bnn = _bnn(2, 3, bp.Categorical())
    with pytest.raises(ValueError, match=r"labels|integer") as info:
        bnn.fit(X, labels, epochs=1, progress=False)
    assert words in str(info.value)


def test_bad_settings_are_refused(regression_data):
    X, y = regression_data
    with pytest.raises(ValueError, match="scale must be positive"):
        bp.Gaussian(scale=-1.0)
    with pytest.raises(ValueError, match="init_scale"):
        _bnn(3, 1, bp.Gaussian(), init_scale=0.0)
    with pytest.raises(TypeError, match="likelihood"):
        bp.VariationalBNN(bp.nn.mlp(3, [], 1), "gaussian")
    bnn = _bnn(3, 1, bp.Gaussian(scale=0.1))
    for kwargs, words in [
        ({"epochs": -1}, "epochs"),
        ({"lr": 0.0}, "lr"),
        ({"batch_size": 0}, "batch_size"),
        ({"num_particles": 0}, "num_particles"),
        ({"kl_weight": -1.0}, "kl_weight"),
        ({"elbo": "nope"}, "elbo"),
    ]:
        with pytest.raises((ValueError, TypeError), match=words):
            bnn.fit(X, y, progress=False, **kwargs)
    bnn.fit(X, y, epochs=1, progress=False)
    with pytest.raises(ValueError, match="num_samples must be an int >= 1"):
        bnn.predict(X, num_samples=0)
    with pytest.raises(ValueError, match="3 feature"):
        bnn.predict(torch.randn(4, 2))


def test_predict_before_fit_says_so(regression_data):
    bnn = _bnn(3, 1, bp.Gaussian(scale=0.1))
    with pytest.raises(bp.NotFittedError, match="fit"):
        bnn.predict(regression_data[0])


def test_generator_and_posterior_samples_options(regression_data):
    X, y = regression_data
    bnn = _bnn(3, 1, bp.Gaussian(scale=0.1))
    bnn.fit(X, y, epochs=2, progress=False, seed=0)
    a = bnn.predict(X, num_samples=4, generator=torch.Generator().manual_seed(3))[0]
    b = bnn.predict(X, num_samples=4, generator=torch.Generator().manual_seed(3))[0]
    assert torch.equal(a, b)
    draws = bnn.sample_posterior(5, seed=0)
    lpd = bnn.log_predictive_density(X, y, posterior_samples=draws)
    locs, scales = bnn.predictive_gaussian(X, posterior_samples=draws)
    by_hand = torch.distributions.Normal(locs, scales).log_prob(y).squeeze(-1)
    expected = float((torch.logsumexp(by_hand, 0) - torch.log(torch.tensor(5.0))).mean())
    assert abs(lpd - expected) < 1e-5
