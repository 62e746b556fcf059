"""The measured step of an SG-MCMC run and its control variate (``sgmcmc/measured.py``), on a
quadratic potential whose curvature, gradients and minibatch noise are known in closed form:
each measured step is checked against the step-size formula of its docstring, rounded down to
a power of ``2^(1/8)``, and the control variate against ``g_B(θ) - g_B(θ̃) + g(θ̃)``.

The potential: ``U(θ) = (N/B) Σ_batch ½ w_i (θ - x_i)ᵀ A (θ - x_i)`` (``w_i`` the targets), so
the per-datum gradient is ``g_B(θ) = mean_B w_i A (θ - x_i)`` and the per-datum Hessian
``mean w A``; its finite-difference Hessian-vector products are exact up to round-off."""

from __future__ import annotations

import math

import pytest
import torch

from bnn_pyro.exceptions import TrainingDivergedError
from bnn_pyro.methods.sgmcmc.chain import ChainStep, RunPlan
from bnn_pyro.methods.sgmcmc.collector import SampleCollector
from bnn_pyro.methods.sgmcmc.measured import which_chains

D = torch.float64


class Quadratic:
    """The quadratic potential of the module docstring, counting its calls: one chain
    (``θ (P,)``, minibatches ``(B, P)``) or K (``θ (K, P)``, minibatches ``(K, B, P)``)."""

    def __init__(self, A):
        self.A = torch.as_tensor(A, dtype=D).clone()  # a test may change it in place
        self.calls = 0

    def gradient(self, theta, xb, yb, n):
        self.calls += 1
        diff, w = theta.unsqueeze(-2) - xb, yb.unsqueeze(-1)  # (..., B, P), (..., B, 1)
        U = n / xb.shape[-2] * 0.5 * (w * diff * (diff @ self.A)).sum((-2, -1))
        return U, (w * diff).mean(-2) @ self.A

    def constrain(self, row):
        return row.clone()


def _rounded(step: float) -> float:
    """A measured step rounded down to a power of ``2^(1/8)``."""
    return 2.0 ** (math.floor(8 * math.log2(step)) / 8)


def _chain(A, sampler, plan, n=8, target=0.3, data=None, temperature=1.0, mdecay=0.25,
           start=(0.5, -0.25)):  # fmt: skip
    theta = torch.tensor(start, dtype=D)
    noise = torch.Generator().manual_seed(0)
    return ChainStep(Quadratic(A), theta, sampler, plan, SampleCollector(100), n, temperature,
                     mdecay, noise, target=target, data=data)  # fmt: skip


def _data(n=8, weights=None):
    x = torch.randn(n, 2, generator=torch.Generator().manual_seed(1), dtype=D)
    return x, (torch.ones(n, dtype=D) if weights is None else weights)


def test_a_full_batch_sgld_step_is_the_target_over_the_top_curvature():
    """``A = diag(5, 1)``, target 0.3, no burn-in: ``lr = 0.3 / 5 = 0.06``, rounded down to
    ``2^(-33/8)`` (``8 log2 0.06 = -32.5``); the chain then steps by it."""
    X, y = _data()
    step = _chain([[5.0, 0.0], [0.0, 1.0]], "sgld", RunPlan(total=4, lr=1.0), data=(X, y))
    theta0 = step.theta.clone()
    step(X, y)
    want = _rounded(0.06)
    assert want == 2.0 ** (-33 / 8)
    torch.testing.assert_close(step.step_size(), torch.tensor([want], dtype=D), rtol=0, atol=0)
    xi = torch.randn(2, generator=torch.Generator().manual_seed(0), dtype=D)
    g = (theta0 - X).mean(0) * torch.tensor([5.0, 1.0], dtype=D)
    moved = theta0 - want * g + math.sqrt(2 * want / 8) * xi
    torch.testing.assert_close(step.theta, moved, rtol=0, atol=1e-12)


def test_a_full_batch_sghmc_step_reads_the_curvature_through_the_preconditioner():
    """``M⁻¹ A = diag(0.5, 3) diag(5, 1) = diag(2.5, 3)``: ``λ = 3`` and ``lr = sqrt(2/3)``,
    rounded to ``2^(-3/8)`` (``8 log2 sqrt(2/3) = -2.3``); without ``M⁻¹``, ``λ`` would be 5."""
    X, y = _data()
    step = _chain([[5.0, 0.0], [0.0, 1.0]], "sghmc", RunPlan(total=4, lr=1.0), data=(X, y),
                  target=2.0)  # fmt: skip
    step.state.minv = torch.tensor([0.5, 3.0], dtype=D)
    step(X, y)
    want = torch.tensor([_rounded(math.sqrt(2 / 3))], dtype=D)
    torch.testing.assert_close(step.step_size(), want, rtol=0, atol=0)


@pytest.mark.parametrize(("burn_in", "travelling", "steps"), [(8, 4, 5), (7, 7, 8)])
def test_sgld_travels_at_lr_lambda_one_in_the_first_half_of_its_burn_in(burn_in, travelling, steps):
    """Burn-in 8 (calibrations at steps 0, 1, 2, 4, 8): steps 0 to 2 travel at ``lr λ = 1``
    (``1/5``, rounded to ``2^(-19/8)``), step 4 (half the burn-in) at the target 0.3. Burn-in 7
    (calibrations at 0, 1, 3, then every step from 7): step 3 is still in the first half."""
    X, y = _data()
    step = _chain([[5.0, 0.0], [0.0, 1.0]], "sgld", RunPlan(total=16, lr=1.0, burn_in=burn_in),
                  data=(X, y))  # fmt: skip
    assert step.step_size() is None  # nothing measured before the first step
    sizes = []
    for _ in range(steps):
        step(X, y)
        sizes.append(float(step.step_size()))
    assert sizes == [2.0 ** (-19 / 8)] * travelling + [2.0 ** (-33 / 8)] * (steps - travelling)


def test_after_the_burn_in_the_measured_step_only_shrinks_and_by_more_than_a_notch():
    """Burn-in 2, 32 steps: calibrations at 0, 1, 2, then every ``ceil(32/16) = 2`` steps.
    The curvature is changed before each: at the burn-in's end (step 2) the step follows it
    (up to ``0.3/2.5``); after it, one notch down (``0.3/2.65``, 1.09×) or any growth is
    ignored, a drop of more than 1.1× is followed."""
    X, y = _data()
    step = _chain([[5.0, 0.0], [0.0, 1.0]], "sgld", RunPlan(total=32, lr=1.0, burn_in=2),
                  data=(X, y))  # fmt: skip
    curvatures = {2: 2.5, 4: 2.65, 6: 1.25, 8: 5.0}
    sizes = []
    for k in range(9):
        if k in curvatures:
            step.potential.A[0, 0] = curvatures[k]
        step(X, y)
        sizes.append(float(step.step_size()))
    at = {5: 0.06, 2: 0.3 / 2.5}
    assert _rounded(0.3 / 2.65) < _rounded(0.12) < _rounded(0.24)  # what is ignored
    assert sizes[1:] == [_rounded(at[5])] + [_rounded(at[2])] * 6 + [_rounded(at[5])]


def _noise_by_hand(A, batches, T, N):
    """SGLD's noise bound ``2 share T / (N w)``: ``w``, the largest variance of a minibatch
    gradient's error, from the differences ``d`` of successive minibatches' gradients at one
    point (two errors each, so ``w = E[d²] / 2``): the largest of each coordinate's mean ``d²``
    and the mean ``(vᵀd)²`` along the top eigenvector ``v`` of ``A``, halved."""
    v = torch.linalg.eigh(A).eigenvectors[:, -1]
    d = torch.stack(
        [(a[0].mean(0) - b[0].mean(0)) @ A for a, b in zip(batches[:-1], batches[1:], strict=True)]
    )
    w = max(float(d.square().mean(0).max()), float((d @ v).square().mean())) / 2
    return 2 * 0.1 * T / (N * w)


@pytest.mark.parametrize("along", [True, False])
def test_the_minibatch_noise_bounds_the_sgld_step_at_a_tenth_of_the_injected_noise(along):
    """Minibatches of 2 of 8 rows, burn-in 8: step 4 is the first not to travel and is bounded
    by the noise of steps 3 and 4 (the calibration at 2 starts a new count). The minibatches
    differ along the top eigenvector ``v`` (``along``: its share is the largest) or along the
    first axis (the coordinate's is)."""
    A = torch.tensor([[3.0, 1.0], [1.0, 2.0]], dtype=D)
    v = torch.linalg.eigh(A).eigenvectors[:, -1]
    shift = v if along else torch.tensor([1.0, 0.0], dtype=D)
    X, y = _data()
    X = X[:1].expand(8, 2) + torch.arange(8, dtype=D).unsqueeze(-1) * 0.3 * shift
    batches = [(X[2 * i : 2 * i + 2], y[:2]) for i in (0, 1, 3, 0, 2)]
    step = _chain(A, "sgld", RunPlan(total=16, lr=1.0, burn_in=8), temperature=1.3)
    sizes = []
    for xb, yb in batches:
        step(xb, yb)
        sizes.append(float(step.step_size()))
    lam = float(torch.linalg.eigvalsh(A).max())
    assert sizes[2] == _rounded(1.0 / lam)  # step 2 travels: its noise does not bound it
    bound = _noise_by_hand(A, batches[2:], 1.3, 8)
    assert 2 * bound < 0.3 / lam  # the noise, not the curvature, sets the step
    assert float(step.step_size()) == pytest.approx(_rounded(bound), rel=1e-12)


def test_the_control_variate_is_the_minibatch_gradient_recentred_on_the_epoch_anchor():
    """Weighted rows make ``g_B`` depend on the minibatch's weights, so ``g_B(θ) - g_B(θ̃) +
    g(θ̃)`` differs from both ``g_B(θ)`` and ``g(θ)``; the anchor ``θ̃`` is the position at
    the epoch's first step, whose gradient is ``g(θ̃)`` itself."""
    X, y = _data(weights=torch.tensor([1.0, 3.0, 0.5, 2.0, 1.0, 1.5, 4.0, 0.25], dtype=D))
    step = _chain([[2.0, 0.5], [0.5, 1.0]], "sgld", RunPlan(total=8, lr=1.0), data=(X, y))
    pot = step.potential
    step.new_epoch(0)
    anchor = step.theta.clone()
    xb, yb = X[:3], y[:3]
    first = step.controlled_gradient(pot.gradient(anchor, xb, yb, 8)[1], xb, yb)
    full = pot.gradient(anchor, X, y, 8)[1]
    torch.testing.assert_close(first, full, rtol=0, atol=1e-14)
    step.theta.add_(torch.tensor([0.3, -0.7], dtype=D))
    theta = step.theta
    xb, yb = X[3:6], y[3:6]
    got = step.controlled_gradient(pot.gradient(theta, xb, yb, 8)[1], xb, yb)
    want = pot.gradient(theta, xb, yb, 8)[1] - pot.gradient(anchor, xb, yb, 8)[1] + full
    torch.testing.assert_close(got, want, rtol=0, atol=1e-14)
    # a new epoch anchors at the position of its first step again
    step.new_epoch(1)
    got = step.controlled_gradient(pot.gradient(theta, xb, yb, 8)[1], xb, yb)
    torch.testing.assert_close(got, pot.gradient(theta, X, y, 8)[1], rtol=0, atol=1e-14)


def test_the_whole_data_gradient_is_taken_in_chunks_of_1024_rows_or_the_minibatch():
    """2049 rows: chunks of 1024, 1024 and 1 (three passes), each weighted by its rows; with a
    minibatch of 1500 rows, chunks of 1500 (two); on 500 rows, one pass."""
    X, y = _data(2049, weights=torch.linspace(0.5, 2.0, 2049, dtype=D))
    step = _chain([[2.0, 0.5], [0.5, 1.0]], "sgld", RunPlan(total=8, lr=1.0), n=2049,
                  data=(X, y))  # fmt: skip
    pot, whole = step.potential, step.potential.gradient(step.theta, X, y, 2049)[1]
    for rows, passes in ((10, 3), (1500, 2)):
        step.new_epoch(0)
        pot.calls = 0
        got = step.controlled_gradient(whole, X[:rows], y[:rows])
        assert pot.calls == passes
        torch.testing.assert_close(got, whole, rtol=1e-13, atol=0)
    step = _chain([[2.0, 0.5], [0.5, 1.0]], "sgld", RunPlan(total=8, lr=1.0), n=500,
                  data=(X[:500], y[:500]))  # fmt: skip
    step.potential.calls = 0
    step.controlled_gradient(whole, X[:10], y[:10])
    assert step.potential.calls == 1


def test_the_whole_data_gradient_needs_the_runs_data():
    step = _chain([[1.0, 0.0], [0.0, 1.0]], "sgld", RunPlan(total=8, lr=0.1), target=None,
                  data=_data())  # fmt: skip
    assert step.data is None  # kept only for a measured run
    with pytest.raises(ValueError, match=r"^full_gradient needs the run's data \(a measured "
                       r"run: lr=None\)$"):  # fmt: skip
        step.full_gradient(step.theta, 4)


def test_a_run_with_a_given_step_measures_nothing():
    X, y = _data()
    step = _chain([[5.0, 0.0], [0.0, 1.0]], "sghmc", RunPlan(total=4, lr=0.1, burn_in=2),
                  target=None, data=(X, y))  # fmt: skip
    step(X[:2], y[:2])  # the burn-in adapts the preconditioner
    assert step.step_size() is None and step.step_scale() == 1.0
    assert not step.controlled(X[:2])


@pytest.mark.parametrize(("start", "grows"), [((0.5, -0.25), True), ((5.0, -5.0), False)])
def test_the_sghmc_step_shrinks_while_the_preconditioner_grows_past_its_calibration(start, grows):
    """After the first step's calibration (``M⁻¹ = 1``) the burn-in adapts ``M⁻¹`` to
    ``1/sqrt((1 + g²)/2)``: it grows where ``|g| < 1``, and the step is scaled by
    ``sqrt(min(1, min_j 1 / M⁻¹_j))``; far from the data every ``|g| > 1``: it does not grow."""
    X, y = _data()
    step = _chain([[5.0, 0.0], [0.0, 1.0]], "sghmc", RunPlan(total=16, lr=1.0, burn_in=8),
                  data=(X, y), target=2.0, start=start)  # fmt: skip
    g = step.potential.gradient(step.theta, X, y, 8)[1]
    step(X, y)
    minv = ((1 + g.square()) / 2).rsqrt()
    assert bool((minv > 1).any()) is grows
    ratio = min(1.0, float((1 / minv).min()))
    assert float(step.step_scale()) == pytest.approx(float(step.scale) * ratio**0.5, rel=1e-12)


@pytest.mark.parametrize(
    ("finite", "tail"),
    [
        ([True, False, True, False], " (chain(s) [2, 4] of 4)"),
        ([True], ""),
        ([False, True], " (chain(s) [1] of 2)"),
    ],
)
def test_the_chains_that_are_not_finite_are_named_from_one(finite, tail):
    assert which_chains(torch.tensor(finite)) == tail


@pytest.mark.parametrize("overflow", [False, True])
def test_a_curvature_that_is_not_finite_is_refused_by_name(overflow):
    """A gradient finite at the chain's position and nan a step away from it, or ``10³⁰⁸ θ``,
    whose Hessian-vector products' norms overflow."""
    X, y = _data()
    step = _chain([[1.0, 0.0], [0.0, 1.0]], "sgld", RunPlan(total=4, lr=1.0), data=(X, y))
    start = step.theta.clone()
    step.potential.gradient = lambda theta, xb, yb, n: (
        torch.tensor(0.0, dtype=D),
        1e308 * theta if overflow else torch.where(theta == start, theta, math.nan),
    )
    message = r"^SG-MCMC: the potential's curvature is not finite$"
    with pytest.raises(TrainingDivergedError, match=message):
        step(X, y)


def test_a_full_batch_step_forgets_the_last_minibatch():
    """The noise compares two minibatches' gradients; a full-batch step between them breaks
    the pair: steps 0 to 2 (minibatch, whole data, minibatch) gather nothing, step 3 one."""
    X, y = _data()
    step = _chain([[5.0, 0.0], [0.0, 1.0]], "sgld", RunPlan(total=16, lr=1.0, burn_in=8))
    for xb, yb in ((X[:2], y[:2]), (X, y), (X[2:4], y[2:4])):
        step(xb, yb)
        assert step._noise == []
    step(X[4:6], y[4:6])
    assert step._noise[2] == 1


def test_a_controlled_run_started_without_an_epoch_gathers_noise_in_its_first():
    """A chain stepped directly (no ``start_epoch``) is in epoch 0, one that gathers noise."""
    X, y = _data()
    step = _chain([[5.0, 0.0], [0.0, 1.0]], "sgld", RunPlan(total=32, lr=1.0), data=(X, y))
    step(X[:2], y[:2])
    step(X[2:4], y[2:4])
    assert step._noise[2] == 1


def test_the_power_iterations_spread_is_the_golden_angle_cosine_of_each_coordinate():
    step = _chain([[1.0, 0.0], [0.0, 1.0]], "sgld", RunPlan(total=4, lr=1.0))
    theta = torch.zeros(3, 5, dtype=D)
    spread = step._spread(theta)
    assert spread.dtype == D and spread.shape == (3, 5)
    k = torch.arange(5, dtype=D)
    want = torch.cos(math.pi * (3 - math.sqrt(5)) * k + 1.0).expand(3, 5)
    torch.testing.assert_close(spread, want, rtol=0, atol=1e-5)


class Quartic:
    """``U(θ) = (N/B) Σ_batch ¼ Σ_j (θ_j - x_ij)⁴``: the per-datum gradient is
    ``mean_B (θ - x_i)³`` and the Hessian ``diag(3 mean_B (θ - x_i)²)``; a finite difference of
    step ``δ`` along ``x`` errs by ``3 (θ - x_i) δ x² + δ² x³``, so only a small step measures
    the curvature where ``θ - x_i`` is small."""

    def gradient(self, theta, xb, yb, n):
        diff = theta.unsqueeze(-2) - xb
        return n / xb.shape[-2] * 0.25 * diff.pow(4).sum((-2, -1)), diff.pow(3).mean(-2)

    def constrain(self, row):
        return row.clone()


def test_the_curvature_is_measured_by_a_small_finite_difference():
    """Every row at ``θ - u`` with ``u = (0.01, 0.005)``: the Hessian is ``diag(3u²)``, ``λ =
    3 · 10⁻⁴``, and SGLD's step ``0.3 / λ = 1000``, rounded to ``2^(79/8)`` (``8 log2 1000 =
    79.7``). The finite difference's step, ``10⁻³ (rms θ + 0.01) / rms x`` with ``rms θ =
    0.02``, is ``δ ≈ 4 · 10⁻⁵``: ``δ / u`` below half a percent, far from a notch (7%). Stacked
    with chains at ``rms θ = 2`` and ``0.2`` (their own ``δ``, and ``u`` ten and three times
    larger): each measures its own curvature."""
    u = torch.tensor([0.01, 0.005], dtype=D)
    for thetas in ([[0.02, -0.02]], [[0.02, -0.02], [2.0, -2.0], [0.2, 0.2]]):
        theta = torch.tensor(thetas, dtype=D)
        scale = torch.tensor([[1.0], [10.0], [3.0]], dtype=D)[: len(theta)]
        X = (theta - u * scale).unsqueeze(-2).expand(-1, 8, 2)
        stacked = len(theta) > 1
        step = ChainStep(Quartic(), theta.clone() if stacked else theta[0].clone(), "sgld",
                         RunPlan(total=4, lr=1.0), [SampleCollector(9) for _ in theta] if
                         stacked else SampleCollector(9), 8, 1.0, 0.25,
                         [torch.Generator().manual_seed(0) for _ in theta] if stacked else
                         torch.Generator().manual_seed(0), target=0.3)  # fmt: skip
        y = torch.ones(X.shape[:-1], dtype=D)
        step(X if stacked else X[0], y if stacked else y[0])
        want = [_rounded(0.3 / (3 * float(u[0] * s) ** 2)) for s in scale[:, 0]]
        assert step.step_size().tolist() == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("start", [(0.5, 0.0), (0.0, 1e8), (0.01, -0.01)])
def test_the_power_iteration_starts_from_any_gradient(start):
    """``A = diag(5, 1)`` and data of mean zero: the step of the first test, ``0.3 / 5``,
    whether the gradient ``A θ`` is exactly zero along one coordinate, huge and along the
    bottom eigenvector (the start is scaled to unit size, so the fixed spread still reaches
    the top one), or ``θ`` has an rms of exactly ``0.01``."""
    X = torch.tensor([[1.0, 1.0], [-1.0, -1.0]], dtype=D).repeat(4, 1)
    y = torch.ones(8, dtype=D)
    step = _chain([[5.0, 0.0], [0.0, 1.0]], "sgld", RunPlan(total=4, lr=1.0), start=start)
    step(X, y)
    assert float(step.step_size()) == _rounded(0.06)


def test_stacked_whole_data_steps_take_no_control_variate():
    """``(K, N, ...)`` rows of K chains: each chain's whole data set, not a minibatch."""
    X = torch.randn(2, 8, 2, dtype=D)
    step = ChainStep(Quadratic(torch.eye(2)), torch.zeros(2, 2, dtype=D), "sgld",
                     RunPlan(total=4, lr=1.0), [SampleCollector(9), SampleCollector(9)], 8, 1.0,
                     0.25, None, target=0.3, data=(X, torch.ones(2, 8, dtype=D)))  # fmt: skip
    assert not step.controlled(X) and step.controlled(X[:, :3])


class Diagonal:
    """``U(θ) = (N/B) Σ_batch ½ Σ_j a_j (θ_j - x_ij)²`` in the data's dtype."""

    def __init__(self, a):
        self.a = a

    def gradient(self, theta, xb, yb, n):
        diff = theta - xb.mean(-2)
        return n * 0.5 * (self.a * diff.square()).sum(), self.a * diff

    def constrain(self, row):
        return row.clone()


@pytest.mark.parametrize("c", [1e-12, 1.0, 1e12])
def test_the_curvature_is_measured_whatever_the_preconditioners_scale(c):
    """In float32, ``M⁻¹ = c I`` and ``A = diag(5, 1)``: ``λ = 5c`` and SGHMC's step
    ``sqrt(2 / (5c))``, rounded down. The power iteration's vectors have unit ``M``-norm, so
    their size scales as ``sqrt(c)``; the finite difference must move ``θ`` by a share of its
    own size whatever ``c`` (a move of ``10⁻⁹`` of ``θ`` is lost to float32's round-off)."""
    a = torch.tensor([5.0, 1.0])
    X = torch.tensor([[0.2, -0.4], [0.4, 0.0]]).repeat(4, 1)
    step = ChainStep(Diagonal(a), torch.tensor([1.0, 2.0]), "sghmc", RunPlan(total=4, lr=1.0),
                     SampleCollector(9), 8, 1.0, 0.25, torch.Generator().manual_seed(0),
                     target=2.0)  # fmt: skip
    step.state.minv = torch.full((2,), c)
    step(X, torch.ones(8))
    assert float(step.step_size()) == pytest.approx(_rounded(math.sqrt(2 / (5 * c))), rel=1e-6)
