"""One SG-MCMC chain step by step (``ChainStep`` of ``sgmcmc/chain.py``), on the potential
``U(θ) = (N/B) Σ_batch ½ |θ - x_i|²`` (per-datum gradient ``mean_B (θ - x_i)``), against the
run written out by hand: the SGLD formula ``θ ← θ - lr g + sqrt(2 lr T / N) ξ`` and the
checked update rules of ``samplers.py`` composed in the documented order, with the noise ``ξ``
drawn from the same seeded generator; every case runs in milliseconds."""

from __future__ import annotations

import math

import pytest
import torch

from bnn_pyro.exceptions import TrainingDivergedError
from bnn_pyro.methods.sgmcmc.chain import ChainStep, RunPlan
from bnn_pyro.methods.sgmcmc.collector import SampleCollector
from bnn_pyro.methods.sgmcmc.samplers import SGHMCState, adapt_sghmc, sghmc_step

D = torch.float64
N, T, MDECAY = 4, 1.3, 0.25
X = torch.randn(N, 2, generator=torch.Generator().manual_seed(1), dtype=D)
START = (0.5, -0.25)


class Bowl:
    """The module docstring's potential; ``constrain`` doubles (so that its use shows).
    One chain (``θ (P,)``, a float ``U``) or K (``θ (K, P)``, batches ``(K, B, P)``)."""

    def __init__(self, value=None, grad=None):
        self.value, self.grad = value, grad  # overrides, to make them non-finite

    def gradient(self, theta, xb, yb, n):
        diff = theta.unsqueeze(-2) - xb
        U = n / xb.shape[-2] * 0.5 * (diff**2).sum((-2, -1))
        g = diff.mean(-2) if self.grad is None else self.grad * torch.ones_like(theta)
        U = U if self.value is None else self.value
        return (float(U) if theta.dim() == 1 else U), g

    def constrain(self, row):
        return 2 * row


def _bowl_u(theta, xb):
    return N / len(xb) * 0.5 * float(((theta - xb) ** 2).sum())


def _batch(k, whole=False):
    return X if whole else X[[2 * (k % 2), 2 * (k % 2) + 1]]


def _chain(sampler, plan, collector=None, seed=3, start=START, potential=None):
    return ChainStep(potential or Bowl(), torch.tensor(start, dtype=D), sampler, plan,
                     collector or SampleCollector(100), N, T, MDECAY,
                     torch.Generator().manual_seed(seed))  # fmt: skip


def _sgld_by_hand(plan, steps, seed=3, start=START):
    """Positions after each step and each step's ``U`` (before it)."""
    gen = torch.Generator().manual_seed(seed)
    theta, positions, values = torch.tensor(start, dtype=D), [], []
    for k in range(steps):
        xb = _batch(k)
        values.append(_bowl_u(theta, xb))
        lr = plan.step_size(k)
        theta = theta - lr * (theta - xb).mean(0)
        if plan.sampling(k):
            theta = theta + math.sqrt(2 * lr * T / N) * torch.randn(2, generator=gen, dtype=D)
        positions.append(theta)
    return positions, values


def test_sgld_steps_collects_and_reports_as_written_out_by_hand():
    """Constant ``lr = 0.1``; the collector drops 2 steps and keeps every second: the
    positions after steps 2 and 4, through ``constrain`` (doubled)."""
    plan = RunPlan(total=6, lr=0.1)
    step = _chain("sgld", plan, SampleCollector(10, burn_in=2, thinning=2))
    assert step.state is None and not step.minimizes and step.average_all is False
    losses = [step(_batch(k), None) for k in range(6)]
    positions, values = _sgld_by_hand(plan, 6)
    torch.testing.assert_close(step.theta, positions[-1], rtol=1e-13, atol=1e-15)
    assert losses == pytest.approx(values, rel=1e-13)
    expected = torch.stack([2 * positions[2], 2 * positions[4]])
    torch.testing.assert_close(step.collector.samples, expected, rtol=1e-13, atol=1e-15)
    assert (step.k, step.sampled, step.collector.seen) == (6, 6, 2) and not step.average_all
    assert step.end_epoch(losses, [2] * 6) == {"loss": pytest.approx(sum(values) / 6, rel=1e-13)}


def test_a_cyclical_sgld_run_explores_without_noise_and_collects_its_sampling_stages():
    """8 steps in 2 cycles exploring half: ``lr/2 (cos(π (k mod 4)/4) + 1)``, noise and a
    sample only at steps 2, 3, 6, 7 (offered as 0, 1, 2, 3)."""
    plan = RunPlan(8, 0.2, "cyclical", 2, 0.5)
    step = _chain("sgld", plan)
    for k in range(8):
        step(_batch(k), None)
    positions, _ = _sgld_by_hand(plan, 8)
    torch.testing.assert_close(step.theta, positions[-1], rtol=1e-13, atol=1e-15)
    expected = torch.stack([2 * positions[k] for k in (2, 3, 6, 7)])
    torch.testing.assert_close(step.collector.samples, expected, rtol=1e-13, atol=1e-15)
    assert step.collector.steps[:4].tolist() == [0, 1, 2, 3] and step.sampled == 4


def _sghmc_by_hand(plan, steps, whole, seed=3):
    """SGHMC as documented: on a cyclical run over the whole data the preconditioner starts
    with ``tau = 0`` and averages every exploration step (``forget=False``); else it adapts
    with Springenberg's window while ``plan.adapting``."""
    gen = torch.Generator().manual_seed(seed)
    theta = torch.tensor(START, dtype=D)
    state = SGHMCState.start(theta)
    average = plan.schedule == "cyclical" and whole
    if average:
        state.tau.zero_()
    for k in range(steps):
        g = (theta - _batch(k, whole)).mean(0)
        if plan.adapting(k):
            adapt_sghmc(state, g, forget=not average)
        sghmc_step(theta, state, g, lr=plan.step_size(k), mdecay=MDECAY, temperature=T,
                   dataset_size=N, generator=gen, noise=plan.sampling(k))  # fmt: skip
    return theta, state


@pytest.mark.parametrize(
    ("plan", "whole"),
    [
        (RunPlan(6, 0.3, burn_in=3), False),
        (RunPlan(6, 0.3, burn_in=3), True),
        (RunPlan(8, 0.3, "cyclical", 2, 0.5), False),
        (RunPlan(8, 0.3, "cyclical", 2, 0.5), True),
    ],
)
def test_sghmc_adapts_and_steps_as_the_update_rules_composed_by_hand(plan, whole):
    step = _chain("sghmc", plan)
    for k in range(plan.total):
        step(_batch(k, whole), None)
    theta, state = _sghmc_by_hand(plan, plan.total, whole)
    assert step.average_all == (plan.schedule == "cyclical" and whole)
    torch.testing.assert_close(step.theta, theta, rtol=1e-13, atol=1e-15)
    for field in ("tau", "grad_mean", "grad_sq", "minv", "momentum"):
        torch.testing.assert_close(getattr(step.state, field), getattr(state, field))


def test_stacked_chains_each_step_as_alone_and_report_each_loss():
    """Two chains from different starts with their own generators and collectors, against
    each run alone; ``end_epoch`` weighs each step by its rows (3 and 1 here)."""
    plan = RunPlan(total=2, lr=0.1)
    starts, seeds = [START, (1.0, 2.0)], [3, 4]
    collectors = [SampleCollector(5), SampleCollector(5)]
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    step = ChainStep(Bowl(), torch.tensor(starts, dtype=D), "sgld", plan, collectors, N, T,
                     MDECAY, gens)  # fmt: skip
    losses = [step(torch.stack([_batch(k)] * 2), None) for k in range(2)]
    alone = [_sgld_by_hand(plan, 2, seed, start) for start, seed in zip(starts, seeds, strict=True)]
    for chain, (positions, _) in enumerate(alone):
        torch.testing.assert_close(step.theta[chain], positions[-1], rtol=1e-13, atol=1e-15)
        expected = torch.stack([2 * p for p in positions])
        torch.testing.assert_close(collectors[chain].samples, expected, rtol=1e-13, atol=1e-15)
    values = [alone[c][1] for c in range(2)]  # per chain, per step
    assert losses == pytest.approx([(values[0][k] + values[1][k]) / 2 for k in range(2)])
    row = step.end_epoch(losses, [3, 1])
    member = [(3 * v[0] + v[1]) / 4 for v in values]
    assert row["member_loss"] == pytest.approx(member, rel=1e-13)
    assert row["loss"] == pytest.approx(sum(member) / 2, rel=1e-13) and set(row) == {
        "loss",
        "member_loss",
    }


def test_an_epoch_reports_only_its_own_steps_weighted_by_their_rows():
    step = _chain("sgld", RunPlan(total=4, lr=0.1))
    step(_batch(0), None)
    step.start_epoch(1)
    values = []
    for k in (1, 2):
        values.append(_bowl_u(step.theta, _batch(k)))
        step(_batch(k), None)
    assert step.end_epoch([], [3, 1]) == {"loss": pytest.approx((3 * values[0] + values[1]) / 4)}
    assert step.state_dict() == {}


def test_one_collector_per_chain_is_required():
    with pytest.raises(ValueError, match=r"^one collector per chain: 1 for 2$"):
        ChainStep(Bowl(), torch.zeros(2, 3, dtype=D), "sgld", RunPlan(2, 0.1),
                  SampleCollector(2), N, T, MDECAY, None)  # fmt: skip
    with pytest.raises(ValueError, match=r"^one collector per chain: 2 for 1$"):
        ChainStep(Bowl(), torch.zeros(2, dtype=D), "sgld", RunPlan(2, 0.1),
                  [SampleCollector(2)] * 2, N, T, MDECAY, None)  # fmt: skip


@pytest.mark.parametrize(
    ("value", "grad", "message"),
    [
        (math.nan, None, r"^SG-MCMC: the potential or its gradient is not finite: \[nan\]$"),
        (1.5, math.inf, r"^SG-MCMC: the potential or its gradient is not finite: \[1\.5\]$"),
    ],
)
def test_a_potential_or_gradient_that_is_not_finite_stops_the_chain(value, grad, message):
    step = _chain("sgld", RunPlan(2, 0.1), potential=Bowl(value, grad))
    with pytest.raises(TrainingDivergedError, match=message):
        step(_batch(0), None)
    assert step.theta.tolist() == list(START) and step.collector.seen == 0


def test_a_stacked_chain_that_is_not_finite_is_named():
    class OneBad(Bowl):
        def gradient(self, theta, xb, yb, n):
            U, g = super().gradient(theta, xb, yb, n)
            return U, torch.stack([g[0], g[1] * math.nan])

    step = ChainStep(OneBad(), torch.zeros(2, 2, dtype=D), "sgld", RunPlan(2, 0.1),
                     [SampleCollector(2)] * 2, N, T, MDECAY, None)  # fmt: skip
    message = r"^SG-MCMC: the potential or its gradient is not finite \(chain\(s\) \[2\] of 2\)"
    with pytest.raises(TrainingDivergedError, match=message):
        step(torch.stack([_batch(0)] * 2), None)


def test_a_chain_that_leaves_the_finite_numbers_stops():
    """A finite gradient of ``1e308`` times ``lr = 10`` overflows the position."""
    step = _chain("sgld", RunPlan(2, 10.0), potential=Bowl(grad=1e308))
    with pytest.raises(
        TrainingDivergedError, match=r"^SG-MCMC: the chain left the finite numbers$"
    ):
        step(_batch(0), None)
    assert step.collector.seen == 0
    grads = torch.tensor([[0.0], [1e308]], dtype=D)  # only the second chain overflows
    stacked = ChainStep(Bowl(grad=grads), torch.zeros(2, 2, dtype=D), "sgld", RunPlan(2, 10.0),
                        [SampleCollector(2)] * 2, N, T, MDECAY,
                        [torch.Generator().manual_seed(s) for s in (0, 1)])  # fmt: skip
    message = r"^SG-MCMC: the chain left the finite numbers \(chain\(s\) \[2\] of 2\)$"
    with pytest.raises(TrainingDivergedError, match=message):
        stacked(torch.stack([_batch(0)] * 2), None)
