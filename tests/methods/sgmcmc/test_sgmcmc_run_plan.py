"""The plan of an SG-MCMC run (``RunPlan`` and ``plan_run`` of ``sgmcmc/chain.py``): which
steps sample, adapt, calibrate and collect, counted by hand on small runs; every case runs in
milliseconds."""

from __future__ import annotations

import math

import pytest

from bnn_pyro.methods.sgmcmc.chain import RunPlan, plan_run


def _cyclical(total, cycles, explore, burn_in=0, lr=1.0):
    return RunPlan(total, lr, "cyclical", cycles, explore, burn_in)


def test_a_constant_plan_steps_at_its_lr_and_samples_every_step():
    plan = RunPlan(total=6, lr=0.25, burn_in=2)
    assert [plan.step_size(k) for k in range(6)] == [0.25] * 6
    assert [plan.sampling(k) for k in range(6)] == [True] * 6
    assert [plan.adapting(k) for k in range(6)] == [True, True] + [False] * 4  # the burn-in
    assert [plan.travelling(k) for k in range(6)] == [True, True] + [False] * 4


def test_a_cyclical_plan_steps_at_the_cosine_of_the_position_in_its_cycle():
    """``total = 10``, 3 cycles: each ``ceil(10/3) = 4`` steps, step ``k`` at
    ``lr/2 (cos(π (k mod 4)/4) + 1)``."""
    plan = _cyclical(10, 3, 0.5, lr=2.0)
    expected = [math.cos(math.pi * (k % 4) / 4) + 1.0 for k in range(10)]
    assert [plan.step_size(k) for k in range(10)] == pytest.approx(expected, abs=1e-15)


@pytest.mark.parametrize(
    ("total", "cycles", "explore", "sampling"),
    [
        # cycles of 4: the exploration takes ceil(0.5 · 4) = 2 steps; the last, cut short to
        # steps 8 and 9, never reaches its sampling stage
        (10, 3, 0.5, [0, 0, 1, 1, 0, 0, 1, 1, 0, 0]),
        (10, 3, 0.25, [0, 1, 1, 1, 0, 1, 1, 1, 0, 1]),  # ceil(1) = 1 step
        (10, 3, 0.3, [0, 0, 1, 1, 0, 0, 1, 1, 0, 0]),  # ceil(1.2) = 2
        (10, 3, 0.0, [1] * 10),  # no exploration
        (10, 3, 1.0, [0, 0, 0, 1, 0, 0, 0, 1, 0, 0]),  # the last step of a cycle samples
        # one cycle of 10 and 0.3 · 10 = 3.0000000000000004 in floats: 3 steps, not 4
        (10, 1, 0.3, [0, 0, 0, 1, 1, 1, 1, 1, 1, 1]),
        (8, 2, 0.5, [0, 0, 1, 1, 0, 0, 1, 1]),
    ],
)
def test_a_cyclical_plan_samples_after_the_exploring_share_of_each_cycle(
    total, cycles, explore, sampling
):
    plan = _cyclical(total, cycles, explore)
    assert [int(plan.sampling(k)) for k in range(total)] == sampling
    # the exploration adapts and travels; the sampling stage does neither
    assert [int(plan.adapting(k)) for k in range(total)] == [1 - s for s in sampling]
    assert [int(plan.travelling(k)) for k in range(total)] == [1 - s for s in sampling]
    assert plan.sampling_steps() == sum(sampling)


def test_a_cyclical_plan_also_travels_during_its_burn_in():
    plan = _cyclical(8, 2, 0.5, burn_in=3)
    assert [plan.travelling(k) for k in range(8)] == [True] * 3 + [False, True, True, False, False]
    assert [plan.adapting(k) for k in range(8)] == [True, True, False, False] * 2


@pytest.mark.parametrize(
    ("total", "burn_in", "calibrating"),
    [
        # 1/32, ..., 1/2 of the burn-in (64 >> 5 = 2, ..., 64 >> 1 = 32), its end 64, then
        # every ceil(160/16) = 10 steps
        (160, 64, [0, 2, 4, 8, 16, 32, 64, 74, 84, 94, 104, 114, 124, 134, 144, 154]),
        # 20 >> 1..5 = 10, 5, 2, 1, 0; then every ceil(40/16) = 3 steps from 20
        (40, 20, [0, 1, 2, 5, 10, 20, 23, 26, 29, 32, 35, 38]),
        (17, 0, [0, 2, 4, 6, 8, 10, 12, 14, 16]),  # no burn-in: every ceil(17/16) = 2 steps
    ],
)
def test_a_constant_plan_calibrates_at_halvings_of_the_burn_in_then_every_sixteenth(
    total, burn_in, calibrating
):
    plan = RunPlan(total, 1.0, burn_in=burn_in)
    assert [k for k in range(total) if plan.calibrating(k)] == calibrating


@pytest.mark.parametrize(
    ("total", "cycles", "explore", "calibrating"),
    [
        # cycles of 32 exploring 16 steps: 16 >> 1..5 = 8, 4, 2, 1, 0 in the first exploration,
        # each cycle's start (0, 32) and each sampling stage's (16, 48)
        (64, 2, 0.5, [0, 1, 2, 4, 8, 16, 32, 48]),
        (64, 2, 0.0, [0, 32]),  # no exploration: each cycle's start
        # cycles of 10 exploring 3: 3 >> 1 = 1; starts 0, 10, 20; sampling from 3, 13, 23
        (30, 3, 0.3, [0, 1, 3, 10, 13, 20, 23]),
        # one cycle exploring 128 steps: 128 >> 1..5 = 64, ..., 4 (not 128 >> 6 = 2)
        (256, 1, 0.5, [0, 4, 8, 16, 32, 64, 128]),
    ],
)
def test_a_cyclical_plan_calibrates_at_each_cycle_and_sampling_stage_start(
    total, cycles, explore, calibrating
):
    plan = _cyclical(total, cycles, explore)
    assert [k for k in range(total) if plan.calibrating(k)] == calibrating


def test_the_sampling_steps_between_two_steps_are_counted():
    constant = RunPlan(10, 1.0)
    assert constant.sampling_steps() == 10 and constant.sampling_steps(3) == 7
    assert constant.sampling_steps(3, 5) == 2 and constant.sampling_steps(8, 5) == 0
    cyclical = _cyclical(10, 3, 0.5)  # sampling steps 2, 3, 6, 7
    assert cyclical.sampling_steps() == 4 and cyclical.sampling_steps(3) == 3
    assert cyclical.sampling_steps(0, 3) == 1 and cyclical.sampling_steps(7, 7) == 0


@pytest.mark.parametrize(
    ("plan", "thinning", "candidates"),
    [
        (RunPlan(10, 1.0, burn_in=3), 3, 3),  # steps 3, 6, 9
        (RunPlan(10, 1.0, burn_in=3), 7, 1),
        (RunPlan(10, 1.0, burn_in=3), 2, 4),  # 3, 5, 7, 9
        (_cyclical(10, 3, 0.5, burn_in=3), 2, 2),  # sampling 3, 6, 7: the 1st and 3rd
    ],
)
def test_the_candidates_are_the_sampling_steps_after_the_burn_in_thinned(
    plan, thinning, candidates
):
    assert plan.candidates(thinning) == candidates


def test_the_default_burn_in_is_a_quarter_of_a_constant_run_and_none_of_a_cyclical_one():
    """``1000 // 4 = 250``; the 750 steps left spread over 100 samples: ``750 // 100 = 7``.
    Cyclical, 10 steps in 2 cycles exploring half: sampling 3, 4, 8, 9 (``ceil(2.5) = 3``)."""
    plan, thinning = plan_run(1000, 0.1, max_samples=100)
    assert plan == RunPlan(1000, 0.1, "constant", 1, 0.0, 250) and thinning == 7
    plan, thinning = plan_run(10, 0.1, "cyclical", cycles=2, explore=0.5, max_samples=3)
    assert plan == RunPlan(10, 0.1, "cyclical", 2, 0.5, 0) and thinning == 1
    plan, thinning = plan_run(10, 0.1, "cyclical", cycles=2, explore=0.5, max_samples=2)
    assert thinning == 2  # 4 // 2
    plan, thinning = plan_run(11, 0.1, max_samples=1)
    assert plan.burn_in == 2 and thinning == 9


def test_a_cyclical_plan_has_one_cycle_and_no_exploration_unless_told():
    plan, thinning = plan_run(10, 0.1, "cyclical")
    assert plan == RunPlan(10, 0.1, "cyclical", 1, 0.0, 0) and thinning == 1


def test_the_default_thinning_spreads_a_thousand_samples():
    """4000 steps burn in 1000; the 3000 left give ``3000 // 1000 = 3``; 3999 steps burn in
    999 and leave exactly 3000 too."""
    assert plan_run(4000, 0.1)[1] == 3 and plan_run(3999, 0.1)[1] == 3
    assert plan_run(3998, 0.1)[1] == 2  # 3998 - 999 = 2999 left


def test_a_constant_plan_ignores_cycles_and_exploration():
    plan, thinning = plan_run(10, 0.1, cycles=3, explore=0.5, burn_in=4, thinning=2)
    assert plan == RunPlan(10, 0.1, "constant", 1, 0.0, 4) and thinning == 2


def test_the_smallest_burn_in_and_the_largest_thinning_are_accepted():
    plan, thinning = plan_run(10, 0.1, burn_in=0, thinning=10)
    assert plan.burn_in == 0 and thinning == 10
    plan, thinning = plan_run(10, 0.1, burn_in=9, thinning=1)
    assert plan.burn_in == 9 and thinning == 1


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"burn_in": -1}, ValueError, r"^burn_in must be an int >= 0, got -1$"),
        ({"burn_in": 10}, ValueError, r"^burn_in must be < the run's 10 steps, got 10$"),
        ({"burn_in": 1.5}, TypeError, r"^burn_in must be an int, got float \(1\.5\)$"),
        ({"thinning": 0}, ValueError, r"^thinning must be an int >= 1, got 0$"),
        (
            {"burn_in": 5, "thinning": 6},
            ValueError,
            r"^thinning must be <= the 5 sampling steps after the burn-in, got 6$",
        ),
        ({"max_samples": 0}, ValueError, r"^max_samples must be an int >= 1, got 0$"),
        (
            {"schedule": "cyclical", "cycles": 3, "explore": 0.5, "burn_in": 8},
            ValueError,
            r"^the run has no sampling step after its burn-in: run more epochs$",
        ),
    ],
)
def test_a_burn_in_thinning_or_bound_out_of_range_is_refused(kwargs, error, message):
    with pytest.raises(error, match=message):
        plan_run(10, 0.1, **kwargs)
