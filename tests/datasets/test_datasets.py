"""The toy data sets (the UCI loader's tests are in tests/benchmarks/test_uci_data.py)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from bnn_pyro.datasets import load_digits_split, toy_function, toy_regression_1d, two_moons


# ------------------------------------------------------------------------------ toy problems
def test_toy_regression_has_a_gap_and_the_stated_noise():
    X, y = toy_regression_1d(n=2000, noise_std=0.1, seed=3)
    assert X.shape == (2000, 1) and y.shape == (2000, 1) and X.dtype == torch.float32
    x = X.squeeze(1)
    assert bool(((x >= -3) & (x <= 3)).all()) and not bool(((x > -1) & (x < 1)).any())
    # Both sides are 2 long, so each holds ~half: binomial sd 0.011, tolerance 0.05.
    assert (x < 0).float().mean().item() == pytest.approx(0.5, abs=0.05)
    residual = (y - toy_function(X.double()).float()).squeeze(1)
    # The sample std of 2000 normals is within ~3% (sd of the estimate is 1.6%).
    assert residual.std().item() == pytest.approx(0.1, rel=0.05)
    assert residual.mean().abs().item() < 0.01  # sd of the mean: 0.1 / sqrt(2000) = 0.002


def test_toy_regression_is_deterministic_and_configurable():
    a, b = toy_regression_1d(seed=1), toy_regression_1d(seed=1)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], toy_regression_1d(seed=2)[0])
    X, y = toy_regression_1d(n=500, gap=None, noise_std=0.0, x_range=(-2.0, 2.0))
    assert bool(((X > -1) & (X < 1)).any())  # no gap now
    torch.testing.assert_close(y, toy_function(X.double()).float())  # noise-free: y = f(x)
    X, _ = toy_regression_1d(n=300, gap=(0.5, 2.5))
    assert not bool(((X > 0.5) & (X < 2.5)).any())


def test_two_moons_matches_sklearn_without_noise_and_adds_the_stated_noise():
    from sklearn.datasets import make_moons

    X, labels = two_moons(n=101, noise=0.0, shuffle=False)
    X_ref, labels_ref = make_moons(n_samples=101, noise=0.0, shuffle=False)
    np.testing.assert_allclose(X.numpy(), X_ref, atol=1e-6)  # float32 storage
    np.testing.assert_array_equal(labels.numpy(), labels_ref)
    # Same seed -> same permutation; the difference from the noise-free moons is the noise.
    clean, lab_clean = two_moons(n=4000, noise=0.0, seed=5)
    noisy, lab_noisy = two_moons(n=4000, noise=0.2, seed=5)
    assert torch.equal(lab_clean, lab_noisy) and lab_noisy.dtype == torch.long
    assert lab_noisy.float().mean().item() == 0.5  # n // 2 of each class
    # 8000 coordinates: the sample std is within ~1% of 0.2; 5% is generous.
    assert (noisy - clean).std().item() == pytest.approx(0.2, rel=0.05)


def test_digits_split_is_a_deterministic_partition():
    from sklearn.datasets import load_digits

    split = load_digits_split(seed=0, test_fraction=0.2)
    assert split.X_train.shape == (1437, 64) and split.X_test.shape == (360, 64)  # ceil(359.4)
    assert split.y_train.dtype == torch.long and float(split.X_train.max()) == 1.0
    _, labels = load_digits(return_X_y=True)
    counts = torch.bincount(torch.cat([split.y_train, split.y_test]), minlength=10)
    np.testing.assert_array_equal(counts.numpy(), np.bincount(labels))
    again = load_digits_split(seed=0, test_fraction=0.2)
    assert torch.equal(split.X_test, again.X_test)
    assert not torch.equal(split.X_test, load_digits_split(seed=1).X_test)


def test_digits_split_without_sklearn_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)  # makes the import fail
    with pytest.raises(ImportError, match="needs scikit-learn"):
        load_digits_split()


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: toy_regression_1d(n=0), ValueError, "n must be an int >= 1"),
        (lambda: toy_regression_1d(n=10.0), TypeError, "n must be an int"),
        (lambda: toy_regression_1d(noise_std=-1.0), ValueError, "noise_std"),
        (lambda: toy_regression_1d(noise_std="0.1"), TypeError, "noise_std"),
        (lambda: toy_regression_1d(gap=(1.0, -1.0)), ValueError, "gap"),
        (lambda: toy_regression_1d(gap=(-4.0, 1.0)), ValueError, "x_range"),
        (lambda: two_moons(n=1), ValueError, "n must be an int >= 2"),
        (lambda: two_moons(seed=-1), ValueError, "seed"),
        (lambda: load_digits_split(test_fraction=1.0), ValueError, "test_fraction"),
        (lambda: load_digits_split(test_fraction="0.2"), TypeError, "test_fraction"),
    ],
)
def test_toy_bad_arguments_raise(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_the_demo_function_problem_is_the_demos_data():
    from bnn_pyro.datasets import FUNCTION_PROBLEMS, toy_regression_1d

    for seed in (0, 3):
        X, y = FUNCTION_PROBLEMS["demo"].sample(seed)
        X2, y2 = toy_regression_1d(n=100, gap=(-1.0, 1.0), noise_std=0.1, seed=seed)
        assert torch.equal(X, X2) and torch.equal(y, y2)


@pytest.mark.parametrize("name", ["demo", "cubic_gap", "sine_gap", "sinusoid"])
def test_function_problems_sample_their_support_and_split_the_grid(name):
    """Rows fall inside the support (both parts of a gapped one, in proportion to their
    lengths: 3 sd of a binomial); the regions split the grid, each point once; the noise around
    the truth has the problem's sd (within 4 sd of the sample sd's spread, sd/sqrt(2n))."""
    from bnn_pyro.datasets import FUNCTION_PROBLEMS, REGIONS

    problem = FUNCTION_PROBLEMS[name]
    X, y = problem.sample(1)
    assert X.shape == y.shape == (problem.n, 1)
    masks = problem.regions(X)
    assert bool(masks["data"].all())
    if len(problem.support) == 2:
        (a, b), (c, d) = problem.support
        share = (b - a) / (b - a + d - c)
        left = float((X[:, 0] <= b).double().mean())
        assert abs(left - share) < 3 * (share * (1 - share) / problem.n) ** 0.5
    residual = (y - problem.noise_free(X)).std()
    assert abs(float(residual) / problem.noise_std - 1) < 4 / (2 * problem.n) ** 0.5
    grid = problem.grid(301)
    regions = problem.regions(grid)
    assert list(regions) == list(REGIONS)
    counts = torch.stack(list(regions.values())).sum(0)
    assert bool((counts == 1).all())
    assert int(regions["extrapolation"].sum()) > 0
    assert (int(regions["gap"].sum()) > 0) == (len(problem.support) == 2)


def test_function_problems_refuse_bad_input():
    from bnn_pyro.datasets import FUNCTION_PROBLEMS

    problem = FUNCTION_PROBLEMS["sinusoid"]
    with pytest.raises(ValueError, match=r"\(N, 1\) tensor"):
        problem.regions(torch.zeros(5))
    with pytest.raises(ValueError, match="seed"):
        problem.sample(-1)
    with pytest.raises(ValueError, match="points"):
        problem.grid(1)


def test_uniform_on_intervals_refuses_empty_or_reversed_intervals():
    from bnn_pyro.datasets._intervals import uniform_on_intervals

    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="low < high"):
        uniform_on_intervals(((1.0, -1.0),), 5, g)
    with pytest.raises(ValueError, match="low < high"):
        uniform_on_intervals((), 5, g)
