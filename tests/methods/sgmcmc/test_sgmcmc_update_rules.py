"""The SG-MCMC update rules (``sgmcmc/samplers.py``) checked one step at a time against the
formulas of their docstrings, written out by hand, with the noise drawn from the same seeded
generator; every case runs in milliseconds."""

from __future__ import annotations

import math

import pytest
import torch

from bnn_pyro.methods.sgmcmc.samplers import (
    SGHMCState,
    _changed,
    adapt_sghmc,
    cycle_position,
    cyclical_lr,
    sghmc_step,
    sgld_step,
    standard_normal,
)

D = torch.float64


def _draws(shape, seed):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=D)


def test_a_new_sghmc_state_is_at_rest_with_unit_estimates_and_no_step_yet():
    state = SGHMCState.start(torch.zeros(3, dtype=D))
    for field in (state.tau, state.grad_mean, state.grad_sq, state.minv):
        assert field.dtype == D
        torch.testing.assert_close(field, torch.ones(3, dtype=D), rtol=0, atol=0)
    torch.testing.assert_close(state.momentum, torch.zeros(3, dtype=D), rtol=0, atol=0)
    assert state.lr == 0.0
    state.grad_sq.add_(1.0)  # the estimates are separate tensors, not one shared
    assert state.grad_mean.tolist() == [1.0, 1.0, 1.0] and state.minv.tolist() == [1.0] * 3


def test_standard_normal_draws_what_its_generator_alone_would():
    one = standard_normal(torch.zeros(2, 3, dtype=D), torch.Generator().manual_seed(5))
    assert one.dtype == D
    torch.testing.assert_close(one, _draws((2, 3), 5), rtol=0, atol=0)
    gens = [torch.Generator().manual_seed(s) for s in (3, 4)]
    rows = standard_normal(torch.zeros(2, 3, dtype=D), gens)
    assert rows.dtype == D
    torch.testing.assert_close(rows, torch.stack([_draws(3, 3), _draws(3, 4)]), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("shape", "count", "message"),
    [
        ((3, 2), 2, r"^one generator per chain: 2 generators for a stack of shape \(3, 2\)$"),
        ((2,), 2, r"^one generator per chain: 2 generators for a stack of shape \(2,\)$"),
    ],
)
def test_standard_normal_refuses_a_generator_count_that_is_not_one_per_chain(shape, count, message):
    gens = [torch.Generator().manual_seed(s) for s in range(count)]
    with pytest.raises(ValueError, match=message):
        standard_normal(torch.zeros(shape), gens)


def test_one_windowed_adaptation_step_matches_springenberg_by_hand():
    """From the start (``tau = 1``, means 1) with ``g = 3``: ``r = 1/2``, mean ``(1 + 3)/2 = 2``,
    mean square ``(1 + 9)/2 = 5``, ``tau = 1 + 1 (1 - 2²/5) = 1.2``, ``M⁻¹ = 1/sqrt(5)``."""
    state = SGHMCState.start(torch.zeros(1, dtype=D))
    adapt_sghmc(state, torch.tensor([3.0], dtype=D))
    assert state.grad_mean.item() == pytest.approx(2.0, abs=1e-15)
    assert state.grad_sq.item() == pytest.approx(5.0, abs=1e-15)
    assert state.tau.item() == pytest.approx(1.2, abs=1e-15)
    assert state.minv.item() == pytest.approx(1 / math.sqrt(5.0), abs=1e-15)
    # a second step, g = 1: r = 1/2.2; mean 2 + (1 - 2)/2.2, mean square 5 + (1 - 5)/2.2
    adapt_sghmc(state, torch.tensor([1.0], dtype=D))
    mean, sq = 2.0 - 1.0 / 2.2, 5.0 - 4.0 / 2.2
    assert state.grad_mean.item() == pytest.approx(mean, abs=1e-14)
    assert state.tau.item() == pytest.approx(1.0 + 1.2 * (1.0 - mean**2 / sq), abs=1e-14)
    assert state.minv.item() == pytest.approx(sq**-0.5, abs=1e-14)


def test_the_plain_mean_adaptation_counts_its_updates():
    """``forget=False`` from ``tau = 0``: the running means are the plain means, ``tau`` counts."""
    state = SGHMCState.start(torch.zeros(1, dtype=D))
    state.tau.zero_()
    for g in (1.0, 2.0, 6.0):
        adapt_sghmc(state, torch.tensor([g], dtype=D), forget=False)
    assert state.tau.item() == 3.0
    assert state.grad_mean.item() == pytest.approx(3.0, abs=1e-14)
    assert state.grad_sq.item() == pytest.approx(41.0 / 3.0, abs=1e-14)
    assert state.minv.item() == pytest.approx((41.0 / 3.0) ** -0.5, abs=1e-14)


def test_a_zero_gradient_gives_a_large_finite_preconditioner():
    """With ``tau = 0`` one update replaces the means by ``g = 0``: ``M⁻¹ = 1/(0 + 1e-16)``."""
    state = SGHMCState.start(torch.zeros(1, dtype=D))
    state.tau.zero_()
    adapt_sghmc(state, torch.zeros(1, dtype=D), forget=False)
    assert state.minv.item() == pytest.approx(1e16, rel=1e-12)


def _sghmc_by_hand(theta, v, g, minv, lr, mdecay, T, N, xi):
    v = v - lr * lr * minv * g
    theta = theta + 0.5 * v
    v = (1.0 - mdecay) * v + (mdecay * (2.0 - mdecay) * T * lr * lr / N * minv).sqrt() * xi
    return theta + 0.5 * v, v


def test_one_noisy_sghmc_step_is_the_baoab_formula():
    theta0 = torch.tensor([0.3, -1.2, 2.0], dtype=D)
    grad = torch.tensor([1.5, -0.5, 0.25], dtype=D)
    state = SGHMCState.start(theta0.clone())
    state.momentum = torch.tensor([0.1, 0.2, -0.3], dtype=D)
    state.minv = torch.tensor([0.5, 2.0, 1.0], dtype=D)
    momentum, minv = state.momentum.clone(), state.minv.clone()
    theta = theta0.clone()
    sghmc_step(theta, state, grad, lr=0.3, mdecay=0.2, temperature=1.7, dataset_size=50,
               generator=torch.Generator().manual_seed(7))  # fmt: skip
    want, v = _sghmc_by_hand(theta0, momentum, grad, minv, 0.3, 0.2, 1.7, 50, _draws(3, 7))
    torch.testing.assert_close(theta, want, rtol=0, atol=1e-14)
    torch.testing.assert_close(state.momentum, v, rtol=0, atol=1e-14)
    assert state.lr == 0.3


def test_a_new_sghmc_step_size_rescales_the_velocity_first():
    """``v = h M⁻¹ r`` with ``h ∝ lr``: from 0.1 to 0.25 the kept momentum makes ``v`` 2.5×."""
    theta0, grad = torch.tensor([1.0, -1.0], dtype=D), torch.tensor([0.4, 0.8], dtype=D)
    state = SGHMCState.start(theta0.clone())
    state.momentum, state.lr = torch.tensor([0.2, -0.1], dtype=D), 0.1
    theta = theta0.clone()
    sghmc_step(theta, state, grad, lr=0.25, mdecay=0.3, temperature=1.0, dataset_size=10,
               noise=False)  # fmt: skip
    v0 = torch.tensor([0.5, -0.25], dtype=D)
    want, v = _sghmc_by_hand(theta0, v0, grad, torch.ones(2, dtype=D), 0.25, 0.3, 1.0, 10, 0.0)
    torch.testing.assert_close(theta, want, rtol=0, atol=1e-14)
    torch.testing.assert_close(state.momentum, v, rtol=0, atol=1e-14)


def test_stacked_sghmc_steps_with_a_step_per_chain_are_each_chains_formula():
    theta0 = torch.tensor([[0.3, -1.2], [2.0, 0.5]], dtype=D)
    grad = torch.tensor([[1.5, -0.5], [0.25, 1.0]], dtype=D)
    state = SGHMCState.start(theta0.clone())
    state.momentum = torch.tensor([[0.1, 0.2], [-0.3, 0.4]], dtype=D)
    state.lr = torch.tensor([[0.1], [0.2]], dtype=D)
    lr = torch.tensor([[0.2], [0.2]], dtype=D)  # chain 0 doubles its step, chain 1 keeps it
    v0 = state.momentum * torch.tensor([[2.0], [1.0]], dtype=D)
    theta = theta0.clone()
    gens = [torch.Generator().manual_seed(s) for s in (1, 2)]
    sghmc_step(theta, state, grad, lr=lr, mdecay=0.5, temperature=1.0, dataset_size=4,
               generator=gens)  # fmt: skip
    xi = torch.stack([_draws(2, 1), _draws(2, 2)])
    want, v = _sghmc_by_hand(theta0, v0, grad, torch.ones(2, 2, dtype=D), lr, 0.5, 1.0, 4, xi)
    torch.testing.assert_close(theta, want, rtol=0, atol=1e-14)
    torch.testing.assert_close(state.momentum, v, rtol=0, atol=1e-14)


@pytest.mark.parametrize(
    ("previous", "lr", "changed"),
    [
        (0.0, 0.1, False),  # never stepped: nothing to rescale
        (0.1, 0.1, False),
        (0.1, 0.2, True),
        (0.0, torch.tensor([[0.1]]), False),
        (0.1, torch.tensor([[0.1]]), True),
        (torch.tensor([[0.1]]), 0.1, True),
        (torch.tensor([[0.1], [0.2]]), torch.tensor([[0.1], [0.2]]), False),
        (torch.tensor([[0.1], [0.2]]), torch.tensor([[0.1], [0.3]]), True),
    ],
)
def test_the_velocity_is_rescaled_only_after_a_step_of_another_size(previous, lr, changed):
    assert _changed(previous, lr) is changed


def test_one_noisy_sgld_step_is_the_langevin_formula():
    """``θ ← θ - lr g + sqrt(2 lr T / N) ξ``."""
    theta0, grad = torch.tensor([0.5, -2.0], dtype=D), torch.tensor([1.0, -3.0], dtype=D)
    theta = theta0.clone()
    sgld_step(theta, grad, lr=0.2, temperature=3.0, dataset_size=12,
              generator=torch.Generator().manual_seed(9))  # fmt: skip
    want = theta0 - 0.2 * grad + math.sqrt(2 * 0.2 * 3.0 / 12) * _draws(2, 9)
    torch.testing.assert_close(theta, want, rtol=0, atol=1e-14)


def test_stacked_sgld_steps_with_a_step_per_chain_are_each_chains_formula():
    theta0 = torch.tensor([[0.5, -2.0], [1.0, 1.0]], dtype=D)
    grad = torch.tensor([[1.0, -3.0], [0.5, 0.0]], dtype=D)
    lr = torch.tensor([[0.2], [0.05]], dtype=D)
    theta = theta0.clone()
    gens = [torch.Generator().manual_seed(s) for s in (3, 8)]
    sgld_step(theta, grad, lr=lr, temperature=0.5, dataset_size=5, generator=gens)
    xi = torch.stack([_draws(2, 3), _draws(2, 8)])
    want = theta0 - lr * grad + (2 * lr * 0.5 / 5).sqrt() * xi
    torch.testing.assert_close(theta, want, rtol=0, atol=1e-14)


def test_a_noise_free_sgld_step_is_plain_gradient_descent():
    theta = torch.tensor([0.5, -2.0], dtype=D)
    sgld_step(theta, torch.tensor([1.0, -3.0], dtype=D), lr=0.2, temperature=1.0,
              dataset_size=1, noise=False)  # fmt: skip
    torch.testing.assert_close(theta, torch.tensor([0.3, -1.4], dtype=D), rtol=0, atol=1e-15)


def test_cycles_of_a_run_not_divisible_by_their_count_last_the_ceiling():
    """7 steps in 2 cycles: cycles of ``ceil(7/2) = 4`` steps, positions ``k mod 4 / 4``."""
    assert [cycle_position(k, 7, 2) for k in range(7)] == [0, 0.25, 0.5, 0.75, 0, 0.25, 0.5]
    # the cosine schedule from lr at the start of each cycle: lr/2 (cos(π r) + 1)
    for k in range(7):
        r = (k % 4) / 4
        assert cyclical_lr(k, 7, 2, 0.4) == pytest.approx(0.2 * (math.cos(math.pi * r) + 1))
