"""The step sizes of an SG-MCMC run (``sgmcmc/step_sizes.py``): which step ``fit``'s arguments
ask for, the equal minibatches of a measured run, the power iteration for ``λ_max`` and the
step-size formulas, each against a hand-worked value or ``torch.linalg``."""

from __future__ import annotations

import math

import pytest
import torch

from bnn_pyro.methods.sgmcmc.step_sizes import (
    MEASURED,
    NOISE_SHARE,
    SGLD_TRAVEL,
    even_batch,
    largest_curvature,
    run_step,
    sghmc_step_size,
    sgld_step_size,
)

D = torch.float64


@pytest.mark.parametrize(
    ("n", "batch", "rows"),
    [(10, 6, 5), (11, 6, 6), (10, 3, 3), (10, 4, 4), (9, 4, 3), (1, 1, 1), (5, 5, 5)],
)
def test_even_batches_are_the_ceiling_of_n_over_the_ceiling_of_n_over_batch(n, batch, rows):
    """``11, 6``: ``k = ceil(11/6) = 2`` minibatches of ``ceil(11/2) = 6`` rows (5 and 6);
    ``10, 6``: two of 5; ``9, 4``: ``k = 3`` of ``3``."""
    assert even_batch(n, batch) == rows


@pytest.mark.parametrize(("n", "batch"), [(0, 1), (5, 0), (5, 6), (0, 0)])
def test_even_batch_refuses_a_batch_outside_one_to_n(n, batch):
    message = rf"^even_batch needs 1 <= batch <= n, got batch={batch}, n={n}$"
    with pytest.raises(ValueError, match=message):
        even_batch(n, batch)


@pytest.mark.parametrize(
    ("args", "want"),
    [
        (("sgld", None, None, 100), (None, 100, 0.25)),
        (("sgld", None, 100, 100), (None, 100, 0.25)),  # a batch of all n rows is full-batch
        (("sgld", None, 500, 100), (None, 100, 0.25)),
        (("sgld", None, 99, 100), (0.01, 99, 0.2)),  # one row short: the fixed minibatch step
        (("sgld", None, 32, 100, 0.1), (0.01, 32, 0.1)),  # a given friction is kept
        (("sghmc", None, 32, 100, 0.3), (0.05, 32, 0.3)),
        (("sghmc", 0.2, None, 100), (0.2, 100, 0.25)),
        (("sghmc", 0.2, 10, 100), (0.2, 10, 0.25)),  # a given step keeps the default friction
        (("sghmc", MEASURED, None, 100), (None, 100, 0.25)),
        (("sgld", MEASURED, 32, 100, 0.3), (None, 25, 0.3)),  # even_batch(100, 32) = 25
    ],
)
def test_the_run_step_is_the_one_fit_asks_for(args, want):
    assert run_step(*args) == want


def test_a_step_size_string_other_than_measured_is_refused_by_name():
    message = r"^lr must be a positive float, None or 'measured', got 'fast'$"
    with pytest.raises(ValueError, match=message):
        run_step("sghmc", "fast", None, 100)


def test_power_iteration_finds_the_preconditioned_top_eigenvalue_and_its_vector():
    """``M⁻¹ H`` with ``M⁻¹ = diag(0.5, 2)``: its top eigenvalue by ``torch.linalg``; the
    returned iterate has unit ``M``-norm ``sqrt(Σ x² / M⁻¹)`` and is that eigenvector."""
    H = torch.tensor([[3.0, 1.0], [1.0, 2.0]], dtype=D)
    minv = torch.tensor([0.5, 2.0], dtype=D)
    lam, x = largest_curvature(lambda v: v @ H, torch.ones(2, dtype=D), minv, iterations=80)
    top = torch.linalg.eigvals(torch.diag(minv) @ H).real.max()
    assert lam.shape == () and float(lam) == pytest.approx(float(top), rel=1e-12)
    assert float((x.square() / minv).sum()) == pytest.approx(1.0, rel=1e-12)
    torch.testing.assert_close(minv * (H @ x), top * x, rtol=0, atol=1e-10)


def test_power_iteration_spends_exactly_the_given_hessian_vector_products():
    calls = []

    def hvp(x):
        calls.append(1)
        return 2.0 * x

    largest_curvature(hvp, torch.ones(3, dtype=D))
    assert len(calls) == 12  # the documented default
    calls.clear()
    lam, x = largest_curvature(hvp, torch.tensor([3.0, 4.0], dtype=D), iterations=0)
    assert calls == [] and lam.shape == () and float(lam) == 0.0
    # no product: the start scaled to unit norm
    torch.testing.assert_close(x, torch.tensor([0.6, 0.8], dtype=D), rtol=0, atol=1e-15)


def test_stacked_chains_each_get_their_own_top_curvature():
    """Row ``k`` of a ``(K, P)`` stack with the diagonal Hessian ``diag(h_k)``, ``M⁻¹ = I``
    for chain 0 and ``diag(1, 1/4)`` for chain 1: ``λ = (4, 2)``."""
    h = torch.tensor([[1.0, 4.0], [2.0, 4.0]], dtype=D)
    minv = torch.tensor([[1.0, 1.0], [1.0, 0.25]], dtype=D)
    lam, x = largest_curvature(lambda v: h * v, torch.ones(2, 2, dtype=D), minv, iterations=60)
    assert lam.shape == (2,)
    torch.testing.assert_close(lam, torch.tensor([4.0, 2.0], dtype=D), rtol=1e-12, atol=0)
    torch.testing.assert_close((x.square() / minv).sum(-1), torch.ones(2, dtype=D))


def test_a_tiny_curvature_is_measured_and_a_zero_start_gives_zero_not_nan():
    """``H = 10⁻⁶ I`` from a start of norm ``10⁻⁸``: the norms are far below one, and still
    ``λ = 10⁻⁶``; a zero start stays zero, its "curvature" the norm's floor ``10⁻³⁰`` (which
    keeps ``0/0`` away), not nan."""
    lam, _ = largest_curvature(lambda v: 1e-6 * v, torch.full((2,), 1e-8, dtype=D))
    assert float(lam) == pytest.approx(1e-6, rel=1e-12)
    lam, x = largest_curvature(lambda v: 1e-6 * v, torch.zeros(2, dtype=D))
    assert float(lam) == pytest.approx(1e-30, rel=1e-12) and x.tolist() == [0.0, 0.0]


def test_the_sghmc_step_meets_its_curvature_target_without_minibatch_noise():
    """``lr² λ = target``: ``sqrt(2/4)`` and ``sqrt(2/16)``; a zero curvature is floored at
    ``10⁻³⁰``, so the step is ``sqrt(2 · 10³⁰)``, large but finite."""
    lr = sghmc_step_size(torch.tensor([4.0, 16.0, 0.0], dtype=D), None, target=2.0, mdecay=0.2,
                         temperature=1.0, dataset_size=10)  # fmt: skip
    want = torch.tensor([0.5**0.5, 0.125**0.5, (2e30) ** 0.5], dtype=D)
    torch.testing.assert_close(lr, want, rtol=1e-12, atol=0)


def test_the_sghmc_step_is_shortened_to_keep_the_noise_share_a_tenth():
    """The bound ``lr² ≤ share · mdecay (2 - mdecay) T / (N w)``: with ``mdecay = 0.5``,
    ``T = 2``, ``N = 10``, ``w = 0.3`` it is ``0.1 · 0.75 · 2 / 3 = 0.05`` at the default share
    (below ``target / λ = 1``), twice that at ``share = 0.2``; a tiny ``w`` leaves the curvature's
    step; an infinite one is floored at ``lr² = 10⁻³⁰``."""
    curvature = torch.ones(4, dtype=D)
    noise = torch.tensor([0.3, 1e-9, math.inf, 0.3], dtype=D)
    lr = sghmc_step_size(curvature, noise, target=1.0, mdecay=0.5, temperature=2.0,
                         dataset_size=10)  # fmt: skip
    want = torch.tensor([0.05**0.5, 1.0, 1e-15, 0.05**0.5], dtype=D)
    torch.testing.assert_close(lr, want, rtol=1e-12, atol=0)
    assert NOISE_SHARE == 0.1  # the documented tenth, the default share above
    lr = sghmc_step_size(curvature[:1], noise[:1], target=1.0, mdecay=0.5, temperature=2.0,
                         dataset_size=10, share=0.2)  # fmt: skip
    assert float(lr) == pytest.approx(0.1**0.5, rel=1e-12)


def test_the_sgld_step_meets_its_curvature_target_or_the_noise_bound():
    """``lr = target / λ``, or ``2 share T / (N w)`` if smaller: with ``T = 1.5``, ``N = 20``,
    ``w = 0.05`` the bound is ``0.3 / 1 = 0.3`` against ``0.5 / 1``; ``w = 10⁻⁹`` leaves
    ``0.5``, an infinite ``w`` the floor ``10⁻³⁰``, a zero curvature ``0.5 · 10³⁰``."""
    curvature = torch.tensor([1.0, 1.0, 1.0, 0.0], dtype=D)
    noise = torch.tensor([0.05, 1e-9, math.inf, 0.0], dtype=D)
    lr = sgld_step_size(curvature, noise, target=0.5, temperature=1.5, dataset_size=20)
    want = torch.tensor([0.3, 0.5, 1e-30, 0.5e30], dtype=D)
    torch.testing.assert_close(lr, want, rtol=1e-12, atol=0)
    lr = sgld_step_size(curvature[:1], noise[:1], target=0.5, temperature=1.5, dataset_size=20,
                        share=0.05)  # fmt: skip
    assert float(lr) == pytest.approx(0.15, rel=1e-12)
    lr = sgld_step_size(torch.tensor([4.0, 0.0], dtype=D), None, target=0.5, temperature=1.0,
                        dataset_size=100)  # fmt: skip
    torch.testing.assert_close(lr, torch.tensor([0.125, 0.5e30], dtype=D), rtol=1e-12, atol=0)


def test_sgld_travels_within_its_stability_bound():
    """The burn-in's ``lr λ_max`` must stay below SGLD's stability limit 2 with a margin."""
    assert 0.0 < SGLD_TRAVEL <= 1.0


def test_a_curvature_whose_norm_overflows_is_infinite_not_zero():
    """``H = 10³⁰⁰ I``: the first iterate's squared norm overflows float64, after which the
    iterates are zero; the chain with it reads ``λ = inf`` (a step size of 0, refused by the
    run), the other chain its own ``λ = 2``."""
    lam, _ = largest_curvature(lambda v: 1e300 * v, torch.ones(2, dtype=D))
    assert float(lam) == math.inf
    scale = torch.tensor([[1e300], [2.0]], dtype=D)
    lam, _ = largest_curvature(lambda v: scale * v, torch.ones(2, 2, dtype=D))
    assert lam.tolist() == [math.inf, 2.0]
    lam, _ = largest_curvature(lambda v: math.nan * v, torch.ones(2, dtype=D))
    assert float(lam) == math.inf
