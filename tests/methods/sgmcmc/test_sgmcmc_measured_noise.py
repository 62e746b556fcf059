"""The minibatch noise a measured SG-MCMC run gathers with its control variate
(``sgmcmc/measured.py``), against the formula of ``MeasuredStep._scaled_noise`` worked by hand on
the quadratic potential of ``test_sgmcmc_measured_step.py``, and K chains stacked, each of which
measures the step it would measure alone."""

from __future__ import annotations

import math

import pytest
import torch
from test_sgmcmc_measured_step import D, Quadratic, _rounded

from bnn_pyro.exceptions import TrainingDivergedError
from bnn_pyro.methods.sgmcmc.chain import ChainStep, RunPlan
from bnn_pyro.methods.sgmcmc.collector import SampleCollector

A = torch.tensor([[3.0, 1.0], [1.0, 2.0]], dtype=D)
BATCHES = [torch.tensor([2 * i, 2 * i + 1]) for i in range(4)]


def _weighted(seed=1, chains=()):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(*chains, 8, 2, generator=g, dtype=D)
    return X, 0.5 + 2 * torch.rand(*chains, 8, generator=g, dtype=D)


def _top(minv, H):
    """The top eigenvalue and eigenvector of ``M⁻¹ H``."""
    values, vectors = torch.linalg.eig(torch.diag(minv) @ H)
    i = int(values.real.argmax())
    return float(values.real[i]), vectors.real[:, i]


@pytest.mark.parametrize(
    ("sampler", "schedule"),
    [("sgld", "constant"), ("sghmc", "constant"), ("sgld", "cyclical"), ("sghmc", "cyclical")],
)
def test_the_control_variates_noise_is_scaled_to_the_step_it_was_measured_at(sampler, schedule):
    """A measured run on minibatches of 2 of 8 weighted rows, 32 steps (calibrations every
    other step). The noise sample of step ``k`` is ``d = ĝ_k(θ_k) - ĝ_{k-1}(θ_k)`` with
    ``ĝ_B(θ) = g_B(θ) - g_B(θ̃) + g(θ̃)``; a calibration takes ``w`` = the largest of each
    coordinate's mean ``M⁻¹ d²`` and the mean ``(vᵀd)² / vᵀMv`` along the last calibration's
    top eigenvector ``v``, halved, and scales it to ``sqrt(share c w / (N p̄))`` for ``p̄`` the
    mean step power (``lr`` for SGLD, ``lr²`` for SGHMC) and ``c`` the injected noise's
    constant (``2T``; ``mdecay (2 - mdecay) T``); a step's ``lr`` is the plan's factor (0.5,
    or its cosine) times the measured step. Constant: step 2 calibrates on steps 1 and 2, step
    4 (the next epoch's first, which gathers nothing: only one epoch in four does) on step 3.
    Cyclical, 4 cycles of 8 steps: step 8 on steps 1 to 3, its step not bound to the last."""
    X, w = _weighted()
    T, mdecay, target = 1.3, 0.3, (0.3 if sampler == "sgld" else 2.0)
    theta = torch.tensor([0.5, -0.25], dtype=D)
    plan = RunPlan(total=32, lr=0.5, schedule=schedule, cycles=4)
    step = ChainStep(Quadratic(A), theta, sampler, plan, SampleCollector(9), 8, T, mdecay,
                     torch.Generator().manual_seed(0), target=target, data=(X, w))  # fmt: skip
    minv = torch.tensor([0.5, 2.0] if sampler == "sghmc" else [1.0, 1.0], dtype=D)
    if step.state is not None:
        step.state.minv = minv.clone()  # no burn-in: it does not adapt
    thetas, sizes, noises = [], [], {}
    for k in range(9):
        if k % 4 == 0:
            step.start_epoch(k // 4)
        thetas.append(step.theta.clone())
        step(X[BATCHES[k % 4]], w[BATCHES[k % 4]])
        sizes.append(float(step.step_size()))
        noises[k] = step._calibration["noise"]
    pot = Quadratic(A)
    full = pot.gradient(thetas[0], X, w, 8)[1]

    def controlled(theta, b):
        xb, yb = X[BATCHES[b]], w[BATCHES[b]]
        return pot.gradient(theta, xb, yb, 8)[1] - pot.gradient(thetas[0], xb, yb, 8)[1] + full

    lam, v = _top(minv, w.mean() * A)
    c = 2 * T if sampler == "sgld" else mdecay * (2 - mdecay) * T
    cyclical = schedule == "cyclical"
    for k, samples in ((8, (1, 2, 3)),) if cyclical else ((2, (1, 2)), (4, (3,))):
        d = torch.stack([controlled(thetas[j], j) - controlled(thetas[j], j - 1) for j in samples])
        along = (d @ v).square() / (v.square() / minv).sum()
        raw = max(float((minv * d.square()).sum(0).max()), float(along.sum())) / (2 * len(d))
        lrs = [plan.step_size(j) * sizes[j - 1] for j in samples]
        power = sum(lr ** (1 if sampler == "sgld" else 2) for lr in lrs) / len(d)
        scaled = math.sqrt(0.1 * c * raw / (8 * power))
        assert float(noises[k]) == pytest.approx(scaled, rel=1e-4)
        if sampler == "sgld":
            new = _rounded(min(target / lam, 2 * 0.1 * T / (8 * scaled)))
        else:
            new = _rounded(math.sqrt(min(target / lam, 0.1 * c / (8 * scaled))))
        old = sizes[k - 1]  # a controlled chain's step moves when it changes by 1.1× or more
        kept = not cyclical and old / 1.1 <= new <= old * 1.1
        assert sizes[k] == pytest.approx(old if kept else new, rel=1e-12)


def test_a_controlled_run_gathers_noise_in_one_epoch_of_four_and_keeps_its_last_estimate():
    """Epochs of 4 steps, calibrations every other step: epochs 1 to 3 gather nothing, so their
    calibrations keep the estimate of step 4; epoch 4 gathers again."""
    X, w = _weighted()
    theta = torch.tensor([0.5, -0.25], dtype=D)
    step = ChainStep(Quadratic(A), theta, "sgld", RunPlan(total=32, lr=1.0), SampleCollector(9),
                     8, 1.0, 0.25, torch.Generator().manual_seed(0), target=0.3,
                     data=(X, w))  # fmt: skip
    for k in range(20):
        if k % 4 == 0:
            step.start_epoch(k // 4)
        step(X[BATCHES[k % 4]], w[BATCHES[k % 4]])
        if k == 4:
            kept = step._calibration["noise"]
        if 4 <= k < 16:
            assert step._noise == []
            assert step._calibration["noise"] is kept
    assert step._noise[2] == 1  # step 19, after the calibration of step 18


def _run(sampler, plan, X, w, thetas, seeds, target, data, steps, minibatch=True):
    """The measured steps and positions of a run (stacked for ``thetas (K, P)``)."""
    stacked = thetas.dim() == 2
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    collectors = [SampleCollector(9) for _ in seeds]
    step = ChainStep(Quadratic(A), thetas.clone(), sampler, plan,
                     collectors if stacked else collectors[0], 8, 1.2, 0.3,
                     gens if stacked else gens[0], target=target,
                     data=(X, w) if data else None)  # fmt: skip
    sizes, positions = [], []
    for k in range(steps):
        if k % 4 == 0 and k:
            step.start_epoch(k // 4)  # the first epoch starts without: the run's own state
        b = BATCHES[k % 4] if minibatch else torch.arange(8)
        step(X[..., b, :], w[..., b])
        sizes.append(step.step_size().clone())
        positions.append(step.theta.clone())
    return torch.stack(sizes, -1), torch.stack(positions, -2)


@pytest.mark.parametrize(
    ("sampler", "burn_in", "data", "minibatch"),
    [
        ("sghmc", 4, True, True),
        ("sgld", 8, False, True),
        ("sghmc", 8, False, True),
        ("sgld", 0, True, True),
        ("sghmc", 4, True, False),
    ],
)
def test_stacked_chains_measure_the_steps_they_would_measure_alone(
    sampler, burn_in, data, minibatch
):
    """Two chains of different data, weights (curvatures) and starts, on minibatches with the
    control variate (``data``) or without it (a burn-in that gathers the noise), their SGHMC
    preconditioners adapting in the burn-in, or on the whole data: each row of the stack steps
    as its chain alone."""
    X, w = _weighted(chains=(2,))
    w = w * torch.tensor([[1.0], [3.0]], dtype=D)
    thetas = torch.tensor([[0.5, -0.25], [-1.0, 2.0]], dtype=D)
    plan = RunPlan(total=32, lr=1.0, burn_in=burn_in)
    target = 0.3 if sampler == "sgld" else 2.0
    sizes, positions = _run(sampler, plan, X, w, thetas, (3, 4), target, data, 14, minibatch)
    assert not torch.equal(sizes[0], sizes[1])  # the chains measure different steps
    for k in range(2):
        alone = _run(sampler, plan, X[k], w[k], thetas[k], (3 + k,), target, data, 14, minibatch)
        torch.testing.assert_close(sizes[k], alone[0][0], rtol=1e-12, atol=0)
        torch.testing.assert_close(positions[k], alone[1], rtol=0, atol=1e-10)


def test_a_stacked_chain_whose_curvature_is_not_finite_is_named():
    """Chain 2's gradient is nan a step away from its start, chain 1's is ``θ``."""
    X, w = _weighted(chains=(2,))
    thetas = torch.tensor([[0.5, -0.25], [-1.0, 2.0]], dtype=D)
    step = ChainStep(Quadratic(A), thetas.clone(), "sgld", RunPlan(total=8, lr=1.0),
                     [SampleCollector(9), SampleCollector(9)], 8, 1.0, 0.25,
                     [torch.Generator().manual_seed(s) for s in (0, 1)], target=0.3,
                     data=(X, w))  # fmt: skip
    first = torch.tensor([[True], [False]])
    step.potential.gradient = lambda theta, xb, yb, n: (
        torch.zeros(2, dtype=D),
        torch.where(first | (theta == thetas), theta, math.nan),
    )
    message = r"^SG-MCMC: the potential's curvature is not finite \(chain\(s\) \[2\] of 2\)$"
    with pytest.raises(TrainingDivergedError, match=message):
        step(X, w)


def test_a_controlled_step_follows_its_curvature_back_up_but_not_by_one_notch():
    """A controlled chain that gathers no noise (epoch 1) steps on the curvature alone, at
    ``0.3 / λ`` rounded down to a power of ``2^(1/8)``. Scaling ``A`` by ``2^(-1/8)`` moves that
    one notch up (1.09×: kept), by ``2^(-3/8)`` three (followed), then ``2^(1/8)`` back one
    notch down (kept)."""
    X, w = _weighted()
    theta = torch.tensor([0.5, -0.25], dtype=D)
    step = ChainStep(Quadratic(A), theta, "sgld", RunPlan(total=32, lr=1.0), SampleCollector(9),
                     8, 1.0, 0.25, torch.Generator().manual_seed(0), target=0.3,
                     data=(X, w))  # fmt: skip
    step.start_epoch(1)
    factors = {2: 2 ** (-1 / 8), 4: 2 ** (-2 / 8), 6: 2 ** (1 / 8)}
    sizes = []
    for k in range(7):
        if k in factors:
            step.potential.A *= factors[k]
        step(X[BATCHES[k % 4]], w[BATCHES[k % 4]])
        sizes.append(float(step.step_size()))
    s0 = sizes[0]
    assert s0 == _rounded(0.3 / float(torch.linalg.eigvalsh(w.mean() * A).max()))
    notch = 2 ** (1 / 8)
    want = [s0] * 4 + [s0 * notch**3] * 3
    assert sizes == pytest.approx(want, rel=1e-12)


def test_the_power_iteration_starts_from_the_unit_rms_preconditioned_gradient_and_spread():
    """``A = diag(1.2, 1)``: twelve products do not converge (``(1/1.2)^12 ≈ 0.1``), so the
    measured direction and curvature depend on the start, ``M⁻¹ g / rms(M⁻¹ g) + cos(φ k + 1)``
    per chain (``φ`` the golden angle). Worked here by the power iteration of
    ``largest_curvature``'s docstring (unit ``M``-norm iterates, ``M⁻¹ = 1``) for two chains,
    one near its data (``rms g < 1``), one far from it (``rms g > 1``)."""
    H = torch.tensor([[1.2, 0.0], [0.0, 1.0]], dtype=D)
    X, w = _weighted(chains=(2,))
    thetas = torch.tensor([[0.1, 0.2], [4.0, -3.0]], dtype=D)
    step = ChainStep(Quadratic(H), thetas.clone(), "sgld", RunPlan(total=4, lr=1.0),
                     [SampleCollector(9), SampleCollector(9)], 8, 1.0, 0.25,
                     [torch.Generator().manual_seed(s) for s in (0, 1)], target=0.3)  # fmt: skip
    grads = Quadratic(H).gradient(thetas, X, w, 8)[1]
    step(X, w)
    spread = torch.cos(math.pi * (3 - math.sqrt(5)) * torch.arange(2, dtype=D) + 1.0)
    for k in range(2):
        g = grads[k]
        x = g / g.square().mean().sqrt() + spread
        x = x / x.norm()
        for _ in range(12):
            y = w[k].mean() * (H @ x)
            lam = y.norm()
            x = y / lam
        torch.testing.assert_close(step._calibration["direction"][k], x, rtol=0, atol=1e-6)
        assert float(step.step_size()[k]) == _rounded(0.3 / float(lam))
