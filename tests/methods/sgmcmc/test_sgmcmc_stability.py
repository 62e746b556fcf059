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

import re
import warnings

import pytest
import torch

import bnn_pyro as bp
from bnn_pyro.exceptions import (
    HotChainWarning,
    TrainingDivergedError,
    TrainingInstabilityWarning,
)
from bnn_pyro.methods.sgmcmc.chain import ChainStep, RunPlan
from bnn_pyro.methods.sgmcmc.collector import SampleCollector
from bnn_pyro.methods.sgmcmc.samplers import SGHMCState
from bnn_pyro.methods.sgmcmc.stability import (
    HOT,
    MAX_HALVINGS,
    WINDOW,
    KineticGuard,
    kinetic_temperature,
    trip_level,
    warn_if_hot,
)
from tests.methods.sgmcmc.test_sgmcmc import _exact_posterior
from tests.methods.vi.test_exact_posterior import NOISE

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


# ---------------------------------------------------------------------- the guard driven by hand
# Four coordinates (trip level 10 + 60 / 4 = 25), lr 0.5, N 1, T 1, M⁻¹ 1: e = v² / 0.25, so a
# velocity of sqrt(e / 4) in every coordinate gives each e below exactly (e = 4, 100: v = 1, 5).
HAND_P = 4


class Hand:
    """A :class:`KineticGuard` over ``chains`` chains whose ``e`` and position the test sets
    before each step; each chain's collector (a reservoir of 40 samples: from the 41st offer on,
    most offers replace a row, which the collector journals between marks) is offered its position
    after the burn-in unless the chain went back, as ``ChainStep`` does."""

    def __init__(self, chains=1, burn_in=6):
        shape = (HAND_P,) if chains == 1 else (chains, HAND_P)
        self.theta = torch.zeros(shape, dtype=D)
        self.state = SGHMCState.start(self.theta)
        self.state.lr = 0.5
        self.collectors = [SampleCollector(40, seed=i) for i in range(chains)]
        self.guard = KineticGuard(self.theta, self.state, self.collectors, burn_in, 1.0, 1)
        self.burn_in, self.chains = burn_in, chains

    def step(self, k, e):
        e = torch.as_tensor(e, dtype=D).reshape(self.chains, 1)
        velocity = (e / 4).sqrt().expand(self.chains, HAND_P)
        self.state.momentum.copy_(velocity.reshape(self.theta.shape))
        self.theta.fill_(float(k))
        went_back = self.guard.after_step(k)
        for i, back in enumerate(went_back):
            if k >= self.burn_in and not back:
                row = self.theta if self.chains == 1 else self.theta[i]
                self.collectors[i].offer(k - self.burn_in, lambda row=row: row.clone())
        return went_back


def test_the_level_is_the_median_e_of_the_burn_ins_second_half_times_the_trip_level():
    hand = Hand(burn_in=6)
    for k, e in enumerate([50, 50, 1, 6, 2, 4]):  # the second half is k >= 3: median 4
        assert hand.step(k, e) == [False]
    # the level is 25 x 4 = 100, inclusive: a level read from k >= 2 or k >= 4 (median 2),
    # from the first checked step (e = 1) or divided by the median would trip at 100
    assert hand.step(6, 1) == [False]
    assert hand.step(7, 100) == [False]
    with pytest.warns(TrainingInstabilityWarning):
        assert hand.step(8, 101) == [True]


def test_a_burn_in_level_below_one_counts_as_one():
    hand = Hand(burn_in=6)
    for k in range(6):
        hand.step(k, 0.25)  # a cool burn-in: the level is 25 x 1, not 25 x 0.25, nor 25 x 2
    assert hand.step(6, 25) == [False]
    with pytest.warns(TrainingInstabilityWarning):
        assert hand.step(7, 36) == [True]


def test_without_a_burn_in_each_chain_takes_its_first_steps_level():
    hand = Hand(chains=2, burn_in=0)
    assert hand.step(0, [4, 1]) == [False, False]  # levels 100 and 25, one per chain
    with pytest.warns(TrainingInstabilityWarning, match="chain 1 turned unstable"):
        assert hand.step(1, [100, 30]) == [False, True]


def test_a_chain_whose_position_is_not_finite_trips_alone():
    hand = Hand(chains=2, burn_in=0)
    hand.step(0, [1, 1])
    hand.step(1, [1, 1])
    hand.theta[0, 2] = float("nan")  # chain 0 left the finite numbers; its velocity did not
    with pytest.warns(TrainingInstabilityWarning, match="chain 0 turned unstable"):
        assert hand.guard.check(2) == [True, False]


def test_a_tripped_chain_returns_to_the_older_of_its_last_two_marks():
    hand = Hand(burn_in=6)
    for k in range(6):
        hand.step(k, 1)
    twin = SampleCollector(40, seed=0)  # what the collector held at the mark it returns to
    velocity = {}
    for k in range(6, 82):  # marks at 6, 31, 56 and 81 (every WINDOW steps): 56 and 81 kept
        e = 1 + (k % 5) / 10
        hand.step(k, e)
        velocity[k] = (e / 4) ** 0.5
        if k < 56:
            twin.offer(k - 6, lambda k=k: torch.full((HAND_P,), float(k), dtype=D))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert hand.step(85, 1000) == [True]
    assert hand.theta.tolist() == [56.0] * HAND_P
    assert hand.state.momentum.tolist() == pytest.approx([velocity[56]] * HAND_P, abs=1e-12)
    collector = hand.collectors[0]
    assert collector.seen == twin.seen and torch.equal(collector.samples, twin.samples)
    assert [w.category for w in caught] == [TrainingInstabilityWarning]
    assert str(caught[0].message) == (
        "SGHMC: chain 0 turned unstable at step 85 (its kinetic temperature 1e+03 times its "
        "target, 25 the most allowed); it went back to its last stable steps and halved its "
        "step size"
    )
    assert hand.guard.shrink == 0.5 and hand.guard.halvings == [1]
    # its heat is the mean e of the steps it kept: those up to the mark (6 to 56)
    kept = [1 + (k % 5) / 10 for k in range(6, 57)]
    assert hand.guard.heat().tolist() == pytest.approx([sum(kept) / len(kept)], rel=1e-12)


def test_a_chain_that_trips_on_its_first_sampling_step_goes_back_to_the_burn_ins_end():
    hand = Hand(burn_in=6)
    for k in range(6):
        hand.step(k, 1)
    with pytest.warns(TrainingInstabilityWarning, match="at step 6 "):
        assert hand.step(6, 1000) == [True]
    assert hand.theta.tolist() == [5.0] * HAND_P  # the burn-in's last state
    assert hand.collectors[0].seen == 0 and hand.guard.shrink == 0.5
    assert hand.step(7, 1) == [False]  # and it goes on from there


def test_the_diverged_chains_message_names_its_step_and_the_fixes():
    hand = Hand(burn_in=0)
    hand.step(0, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k in range(1, MAX_HALVINGS + 1):
            assert hand.step(k, 1000) == [True]
    message = (
        f"SGHMC: chain 0 is still unstable at step {MAX_HALVINGS + 1} after its step was halved "
        f"{MAX_HALVINGS} times; set a smaller lr, or batch_size=None for a step measured on the "
        "posterior"
    )
    with pytest.raises(TrainingDivergedError, match=f"^{re.escape(message)}$"):
        hand.step(MAX_HALVINGS + 1, 1000)


# ------------------------------------------------------------------ the chain's heat
def _regression(n):
    """``n`` rows of a Bayesian linear regression (3 inputs and a bias, prior N(0, 1), noise
    ``NOISE``, known) and the exact posterior covariance of ``(w, b)``. Its own rows rather than
    the suite's ``_data`` (seed 3), on which the margins below were measured."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(n, 3, generator=g)
    y = X @ torch.tensor([[0.8], [-1.5], [0.25]]) + 0.7 + NOISE * torch.randn(n, 1, generator=g)
    return X, y, _exact_posterior(X, y)[1]


def _model(dtype=torch.float32):
    torch.manual_seed(0)  # every model starts from the same weights
    return bp.make("sghmc", bp.nn.mlp(3, [], 1).to(dtype), bp.Gaussian(scale=NOISE))


def _sghmc_fit(X, y, seed=0, **fit):
    m = _model(X.dtype)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m.fit(X, y, progress=False, seed=seed, **fit)
    return m, [str(w.message) for w in caught if w.category is HotChainWarning]


def test_a_chain_is_hot_from_twice_its_temperature_and_the_warning_names_the_fixes():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for heat in (None, 1.0, HOT * (1 - 1e-9), HOT):
            warn_if_hot(heat, "chain 3 of the stacked fit")
    assert [w.category for w in caught] == [HotChainWarning]
    assert str(caught[0].message) == (
        "SGHMC: chain 3 of the stacked fit sampled at 2 times its temperature (its velocity's "
        "mean kinetic temperature over the sampling steps, 1 on an exact chain): the minibatch "
        "gradient's noise or too long a step heats it, and its samples' variance is about that "
        "many times the posterior's or more; take batch_size=None (the whole data set per "
        "step), or a smaller lr (the excess falls with lr²)"
    )


def test_a_chain_heated_by_minibatch_noise_warns_and_its_samples_are_as_wide_as_it_says():
    # 5,000 rows at the default minibatch step: the gradient noise heats the chain
    X, y, cov = _regression(5000)
    m, hot = _sghmc_fit(X, y, epochs=100, batch_size=128)
    heat = m.last_run["kinetic_temperature"]
    assert heat >= HOT and len(hot) == 1
    assert hot[0].startswith(f"SGHMC: the chain sampled at {heat:.3g} times its temperature")
    # the warning's claim, against the exact posterior: each weight's variance at least about
    # heat times the exact one (measured 0.89-1.08 times heat); 0.75 leaves room for the
    # sampled variance's error, about 10% at the run's few hundred effective draws
    ratio = m.kept_samples.double().var(0) / cov.diagonal()
    assert bool((ratio >= 0.75 * heat).all())


def test_an_exact_chain_reads_a_temperature_of_one_and_does_not_warn():
    # the whole data set per step at the measured step: BAOAB is exact on this posterior; the
    # mean of e over 1,500 steps of 4 coordinates has sd about 0.03 at the chain's correlation
    X, y, _ = _regression(5000)
    m, hot = _sghmc_fit(X, y, epochs=2000, batch_size=None)
    assert m.last_run["kinetic_temperature"] == pytest.approx(1.0, abs=0.1) and not hot


def test_a_stacked_fit_reads_and_warns_each_chains_heat_as_its_own_fit_does():
    X, y, _ = _regression(5000)
    X, y = X.double(), y.double()  # in float64 the stacked chains are each chain's own run
    alone = [_sghmc_fit(X, y, seed=s, epochs=40, batch_size=128)[0] for s in (0, 1)]
    models = [_model(D), _model(D)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bp.fit_stacked(models, X, y, seeds=[0, 1], epochs=40, batch_size=128, progress=False)
    hot = [str(w.message) for w in caught if w.category is HotChainWarning]
    assert [h.split(" sampled")[0] for h in hot] == [
        "SGHMC: chain 0 of the stacked fit",
        "SGHMC: chain 1 of the stacked fit",
    ]
    heats = [m.last_run["kinetic_temperature"] for m in models]
    assert min(heats) >= HOT and heats[0] != heats[1]
    # each chain's own run, to float64 rounding
    assert heats == pytest.approx([a.last_run["kinetic_temperature"] for a in alone], rel=1e-9)
