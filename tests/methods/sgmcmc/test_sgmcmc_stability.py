"""The SGHMC chain's stability guard (``sgmcmc/stability.py``) on a Gaussian potential whose
curvature jumps after the burn-in, where BAOAB's bound says which step is stable.

The potential is ``U(θ) = N/2 Σ_i a_i θ_i²`` (per-datum gradient ``a ⊙ θ``, the minibatch
ignored: no gradient noise). At ``a_i = 1``, ``T = 1`` the burn-in's preconditioner settles at
``M⁻¹_i = 1 / sqrt(E g_i²) = sqrt(N / a_i)``, 10 at ``N = 100``; the step is stable while
``lr² M⁻¹_i a_i < 4`` (``samplers.py``). At ``lr = 0.2`` that is ``0.4``; when ``a_0`` jumps to
400 after the burn-in it is ``160``: the chain blows up unless it halves its step three times
(``0.025² · 10 · 400 = 2.5 < 4``, while two halvings give ``10``). ``P = 2000`` coordinates:
as on a network, the one that stiffens is a small share of the chain's kinetic energy until it
blows up, so its settling to the new curvature (from a position 20 of its new sd away) does not
read as a blow-up."""

from __future__ import annotations

import warnings

import pytest
import torch

from bnn_pyro.exceptions import TrainingDivergedError
from bnn_pyro.methods.sgmcmc.chain import ChainStep, RunPlan
from bnn_pyro.methods.sgmcmc.collector import SampleCollector
from bnn_pyro.methods.sgmcmc.samplers import SGHMCState
from bnn_pyro.methods.sgmcmc.stability import (
    MAX_HALVINGS,
    WINDOW,
    kinetic_temperature,
    trip_level,
)

D = torch.float64
N, P, LR, BURN, TOTAL, JUMP_AT = 100, 2000, 0.2, 200, 700, 350
BATCH = torch.zeros(1, P, dtype=D)


class Jumping:
    """The module docstring's potential; from its ``at``-th call on, ``a`` of chain ``k`` is
    ``jumps[k]`` (``(K, P)`` or ``(P,)``, like ``θ``)."""

    def __init__(self, jumps, at=JUMP_AT):
        self.jumps, self.at, self.calls = torch.as_tensor(jumps, dtype=D), at, 0

    def gradient(self, theta, xb, yb, n):
        self.calls += 1
        a = self.jumps if self.calls > self.at else torch.ones_like(self.jumps)
        value = 0.5 * n * (a * theta**2).sum(-1)
        return (float(value) if theta.dim() == 1 else value), a * theta

    def constrain(self, row):
        return row.clone()


def _jump(chains=1, coordinate_a=400.0):
    a = torch.ones(chains, P, dtype=D)
    a[-1, 0] = coordinate_a  # the last chain's first coordinate stiffens
    return a[0] if chains == 1 else a


def _run(potential, seeds=(0,), guarded=True):
    stacked = len(seeds) > 1
    theta = torch.zeros(len(seeds), P, dtype=D) if stacked else torch.zeros(P, dtype=D)
    collectors = [SampleCollector(1000, seed=s) for s in seeds]
    generators = [torch.Generator().manual_seed(s) for s in seeds]
    step = ChainStep(potential, theta, "sghmc", RunPlan(TOTAL, LR, burn_in=BURN),
                     collectors if stacked else collectors[0], N, 1.0, 0.25,
                     generators if stacked else generators[0])  # fmt: skip
    if not guarded:
        step.guard = None
    batch = BATCH.expand(len(seeds), 1, P) if stacked else BATCH
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(TOTAL):
            step(batch, batch[..., 0])
    return step, [str(w.message) for w in caught if "turned unstable" in str(w.message)]


def test_the_kinetic_temperature_of_the_stationary_velocity_is_one():
    # v_i ~ N(0, T lr²/N M⁻¹_i) exactly: e is χ²_P / P, sd sqrt(2 / P) = 0.0032 at P = 2e5;
    # the tolerance 0.02 is six of those
    g = torch.Generator().manual_seed(0)
    theta = torch.zeros(200_000, dtype=D)
    state = SGHMCState.start(theta)
    state.minv = torch.rand(len(theta), generator=g, dtype=D) * 10 + 0.1
    state.lr, T, n = 0.07, 1.7, 300
    state.momentum = (
        torch.randn(len(theta), generator=g, dtype=D) * (T * state.lr**2 / n * state.minv).sqrt()
    )
    assert float(kinetic_temperature(state, T, n)) == pytest.approx(1.0, abs=0.02)
    state.momentum *= 3.0  # three times the velocity: nine times the temperature
    assert float(kinetic_temperature(state, T, n)) == pytest.approx(9.0, abs=0.2)


def test_a_chain_that_never_trips_runs_exactly_as_without_the_guard():
    guarded, none = _run(Jumping(_jump(coordinate_a=1.0)))
    plain, _ = _run(Jumping(_jump(coordinate_a=1.0)), guarded=False)
    assert not none and guarded.guard.halvings == [0]
    assert torch.equal(guarded.collector.samples, plain.collector.samples)
    assert torch.equal(guarded.theta, plain.theta)


def test_without_the_guard_the_stiffened_chain_leaves_the_finite_numbers():
    with pytest.raises(TrainingDivergedError):
        _run(Jumping(_jump()), guarded=False)


def test_the_stiffened_chain_goes_back_and_halves_its_step_to_the_stable_one():
    step, warned = _run(Jumping(_jump()))
    # three halvings: the fewest that BAOAB's bound calls stable (module docstring)
    assert step.guard.halvings == [3] and len(warned) == 3
    assert step.guard.shrink == pytest.approx(1 / 8)
    assert LR**2 * step.guard.shrink**2 * float(step.state.minv[0]) * 400 < 4
    samples = step.collector.samples
    # no sample from a blow-up: before the jump each coordinate's sd is sqrt(T / N) = 0.1, so
    # seven of them (0.7) bound 1e6 stationary draws with probability 1 - 3e-6
    assert bool(torch.isfinite(samples).all()) and float(samples.abs().max()) < 0.7
    # what the chain kept after the jump is stationary at the stiff curvature: sd 0.005 along
    # the stiffened coordinate; a blow-up's traces would be orders of magnitude above it
    after = samples[-100:, 0]
    assert float(after.std()) < 0.02


def test_a_stacked_run_guards_each_chain_alone():
    # chain 1 stiffens, chain 0 does not: chain 0 runs as it does alone, chain 1 halves
    stacked, _ = _run(Jumping(_jump(chains=2)), seeds=(0, 1))
    alone, _ = _run(Jumping(_jump(coordinate_a=1.0)), seeds=(0,))
    own, _ = _run(Jumping(_jump()), seeds=(1,))
    assert stacked.guard.halvings == [0, 3] == [0, *own.guard.halvings]
    assert torch.equal(stacked.collectors[0].samples, alone.collector.samples)
    assert torch.equal(stacked.collectors[1].samples, own.collector.samples)


def test_a_chain_still_unstable_after_every_halving_is_called_diverged():
    # a_0 = 1e9: even lr / 2^6 gives lr² M⁻¹ a = 1e5 > 4
    with pytest.raises(TrainingDivergedError, match=f"halved {MAX_HALVINGS} times"):
        _run(Jumping(_jump(coordinate_a=1e9)))


def test_a_short_burn_in_or_a_cyclical_run_is_not_guarded():
    theta = torch.zeros(P, dtype=D)
    for plan in (RunPlan(TOTAL, LR, burn_in=WINDOW - 1),
                 RunPlan(TOTAL, LR, schedule="cyclical", cycles=2, explore=0.5)):  # fmt: skip
        step = ChainStep(Jumping(_jump()), theta.clone(), "sghmc", plan, SampleCollector(10),
                         N, 1.0, 0.25, torch.Generator().manual_seed(0))  # fmt: skip
        assert step.guard is None
    sgld = ChainStep(Jumping(_jump()), theta, "sgld", RunPlan(TOTAL, LR, burn_in=BURN),
                     SampleCollector(10), N, 1.0, 0.25, torch.Generator())  # fmt: skip
    assert sgld.guard is None


def test_the_trip_level_allows_more_for_few_coordinates():
    # χ²_1 > 70 has probability 1e-16; for many coordinates the level tends to 10
    assert trip_level(1) == 70.0 and trip_level(60) == 11.0
    assert trip_level(10**6) == pytest.approx(10.0, abs=1e-4)
