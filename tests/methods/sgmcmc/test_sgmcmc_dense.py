"""SGLD's dense preconditioner (``sgmcmc/dense.py``): measured on quadratics whose Hessian is
known, applied in the update rule against ``θ - lr M g + sqrt(2 lr T / N) M^{1/2} ξ`` with
``M^{1/2}`` from scipy's ``sqrtm`` (not the eigendecomposition the code uses), chosen by
``SGMCMC``'s ``preconditioner`` option, and judged end to end against the exact posterior of
an ill-conditioned Bayesian linear regression."""

from __future__ import annotations

import math

import pytest
import scipy.linalg
import torch
import torch.nn as nn

import bnn_pyro as bp
from bnn_pyro.methods.sgmcmc.chain import ChainStep, RunPlan
from bnn_pyro.methods.sgmcmc.collector import SampleCollector
from bnn_pyro.methods.sgmcmc.dense import (
    DENSE_FLOOR,
    DENSE_MAX_PARAMS,
    DensePreconditioner,
    dense_preconditioner,
    linear_in_weights,
)
from bnn_pyro.methods.sgmcmc.samplers import sgld_step
from tests.methods.sgmcmc.test_sgmcmc_measured_step import Quadratic, _data, _rounded
from tests.methods.sgmcmc.test_sgmcmc_stacked import _assert_each_chain_is_its_own_fit
from tests.methods.sgmcmc.test_sgmcmc_stacked import _data as _stacked_data

D = torch.float64
#: Condition number about 1,000: plain SGLD's slow direction would relax 1,000 times slower.
STIFF = torch.tensor([[100.0, 9.0], [9.0, 1.0]], dtype=D)


def _root(m: torch.Tensor) -> torch.Tensor:
    """``M^{1/2}`` by scipy's Schur-based ``sqrtm``."""
    return torch.as_tensor(scipy.linalg.sqrtm(m.numpy()).real, dtype=D)


def test_the_measured_preconditioner_is_the_inverse_hessian():
    """``P`` Hessian-vector products of a quadratic give ``M = A⁻¹`` and ``M^{1/2}`` its root,
    to float64 round-off (the eigenvalues 0.035, 2.4 and 4.7: nowhere near the floor)."""
    A = torch.tensor([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 0.1]], dtype=D)
    calls = []
    pre = dense_preconditioner(lambda x: calls.append(x.clone()) or x @ A, torch.zeros(3, dtype=D))
    assert [c.tolist() for c in calls] == torch.eye(3, dtype=D).tolist()  # one column each
    M = pre.apply(torch.eye(3, dtype=D))  # rows M e_i = columns: M is symmetric
    torch.testing.assert_close(M, torch.linalg.inv(A), rtol=1e-10, atol=1e-10)
    root = pre.sqrt_apply(torch.eye(3, dtype=D))
    torch.testing.assert_close(root, _root(torch.linalg.inv(A)), rtol=1e-8, atol=1e-8)


def test_a_stack_of_chains_measures_each_chains_own_preconditioner():
    """``(K, P)``: the Hessian-vector product acts row by row; chain ``k``'s ``M`` is what it
    alone would measure."""
    As = torch.stack([STIFF, torch.tensor([[2.0, -1.0], [-1.0, 3.0]], dtype=D)])
    pre = dense_preconditioner(
        lambda x: (x.unsqueeze(-2) @ As).squeeze(-2), torch.zeros(2, 2, dtype=D)
    )
    assert pre.basis.shape == (2, 2, 2) and pre.root.shape == (2, 2)
    x = torch.tensor([[1.0, -2.0], [0.5, 3.0]], dtype=D)
    for k in range(2):
        alone = dense_preconditioner(lambda v, k=k: v @ As[k], torch.zeros(2, dtype=D))
        torch.testing.assert_close(pre.apply(x)[k], alone.apply(x[k]), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(pre.apply(x)[k], torch.linalg.solve(As[k], x[k]))


def test_the_hessians_symmetric_part_negative_curvature_and_floor():
    """A measured Hessian ``[[2, 1], [0, 2]]`` is read as its symmetric part (eigenvalues 2.5
    and 1.5); ``diag(4, -1)`` as ``diag(4, 1)``; ``diag(1, 0)`` as ``diag(1, floor)``."""
    pre = DensePreconditioner.from_hessian(torch.tensor([[2.0, 1.0], [0.0, 2.0]], dtype=D))
    sym = torch.tensor([[2.0, 0.5], [0.5, 2.0]], dtype=D)
    torch.testing.assert_close(pre.apply(torch.eye(2, dtype=D)), torch.linalg.inv(sym))
    pre = DensePreconditioner.from_hessian(torch.diag(torch.tensor([4.0, -1.0], dtype=D)))
    assert sorted(pre.root.tolist()) == [0.5, 1.0]
    flat = torch.diag(torch.tensor([4.0, 0.0], dtype=D))  # the floor is relative to 4
    assert DENSE_FLOOR == 1e-6
    assert sorted(DensePreconditioner.from_hessian(flat).root.tolist()) == pytest.approx(
        [0.5, 500.0], rel=1e-12
    )
    assert sorted(DensePreconditioner.from_hessian(flat, floor=0.01).root.tolist()) == (
        pytest.approx([0.5, 5.0], rel=1e-12)
    )
    measured = dense_preconditioner(lambda x: x @ flat, torch.zeros(2, dtype=D), floor=0.01)
    assert sorted(measured.root.tolist()) == pytest.approx([0.5, 5.0], rel=1e-12)
    small = DensePreconditioner.from_hessian(torch.diag(torch.tensor([0.5, 0.25], dtype=D)))
    assert small.root.square().tolist() == pytest.approx([4.0, 2.0], rel=1e-12)  # below 1: kept


def test_a_stack_of_hessians_is_each_read_as_its_symmetric_part():
    """``(K, P, P)``: each chain's Hessian is symmetrised over its own last two axes."""
    skew = torch.tensor([[2.0, 1.0], [0.0, 2.0]], dtype=D)
    stacked = DensePreconditioner.from_hessian(torch.stack([skew, skew.T]))
    alone = DensePreconditioner.from_hessian(skew)
    x = torch.tensor([1.0, -2.0], dtype=D)
    for k in range(2):
        torch.testing.assert_close(stacked.apply(x.expand(2, 2))[k], alone.apply(x))


@pytest.mark.parametrize(
    ("hessian", "message"),
    [
        (torch.tensor([[1.0, math.nan], [0.0, 1.0]]), "is not finite"),
        (torch.tensor([[1.0, math.inf], [0.0, 1.0]]), "is not finite"),
        (torch.zeros(2, 2), "is zero"),
        (torch.stack([torch.eye(2), torch.zeros(2, 2)]), "is zero"),  # one chain of two
    ],
)
def test_a_hessian_with_nothing_to_scale_by_is_refused(hessian, message):
    with pytest.raises(ValueError, match=f"^the measured Hessian {message}: no preconditioner "
                       "from it$"):  # fmt: skip
        DensePreconditioner.from_hessian(hessian)


def test_the_preconditioned_sgld_step_in_closed_form():
    """``θ ← θ - lr M g + sqrt(2 lr T / N) M^{1/2} ξ``, ``ξ`` the generator's draw, and K = 2
    chains stacked step each as it would alone."""
    M = torch.linalg.inv(STIFF)
    pre = DensePreconditioner.from_hessian(STIFF)
    theta, g = torch.tensor([0.3, -1.0], dtype=D), torch.tensor([2.0, 0.5], dtype=D)
    moved = theta.clone()
    sgld_step(moved, g, lr=0.2, temperature=1.5, dataset_size=40, preconditioner=pre,
              generator=torch.Generator().manual_seed(3))  # fmt: skip
    xi = torch.randn(2, generator=torch.Generator().manual_seed(3), dtype=D)
    want = theta - 0.2 * M @ g + math.sqrt(2 * 0.2 * 1.5 / 40) * _root(M) @ xi
    torch.testing.assert_close(moved, want, rtol=1e-10, atol=1e-10)

    stacked_pre = DensePreconditioner(pre.basis.expand(2, 2, 2), pre.root.expand(2, 2))
    thetas = torch.stack([theta, -theta])
    sgld_step(thetas, torch.stack([g, g]), lr=torch.tensor([[0.2], [0.1]], dtype=D),
              temperature=1.5, dataset_size=40, preconditioner=stacked_pre,
              generator=[torch.Generator().manual_seed(s) for s in (3, 4)])  # fmt: skip
    torch.testing.assert_close(thetas[0], want, rtol=1e-10, atol=1e-10)
    alone = -theta
    sgld_step(alone, g, lr=0.1, temperature=1.5, dataset_size=40, preconditioner=pre,
              generator=torch.Generator().manual_seed(4))  # fmt: skip
    torch.testing.assert_close(thetas[1], alone, rtol=1e-12, atol=1e-12)


def _chain(plan, dense=True, data=None, target=0.3):
    theta = torch.tensor([0.5, -0.25], dtype=D)
    return ChainStep(Quadratic(STIFF), theta, "sgld", plan, SampleCollector(100), 8, 1.0, 0.25,
                     torch.Generator().manual_seed(0), target=target, data=data,
                     dense=dense)  # fmt: skip


def test_a_dense_full_batch_step_is_the_target_and_moves_as_preconditioned_langevin():
    """On ``STIFF`` the preconditioned curvature is 1: the step is the target 0.3 (rounded down
    to ``2^(-14/8)``), not ``0.3 / 100.8`` as without; the move is the closed form with
    ``M = A⁻¹`` (the per-datum Hessian: every weight is 1)."""
    X, y = _data()
    step = _chain(RunPlan(total=4, lr=1.0))
    theta0 = step.theta.clone()
    step(X, y)
    lr = _rounded(0.3)
    assert lr == 2.0 ** (-14 / 8)
    assert step.step_size().tolist() == [lr]
    M = torch.linalg.inv(STIFF)
    xi = torch.randn(2, generator=torch.Generator().manual_seed(0), dtype=D)
    g = (theta0 - X).mean(0) @ STIFF
    want = theta0 - lr * M @ g + math.sqrt(2 * lr / 8) * _root(M) @ xi
    torch.testing.assert_close(step.theta, want, rtol=1e-8, atol=1e-8)
    plain = _chain(RunPlan(total=4, lr=1.0), dense=False)
    plain(X, y)
    assert plain.dense is None
    assert float(plain.step_size()) == _rounded(0.3 / float(torch.linalg.eigvalsh(STIFF).max()))


@pytest.mark.parametrize(
    ("plan", "calibrations", "measured"),
    [
        # constant, burn-in 8: calibrations at 0, 1, 2, 4, 8 (its end), then every step; the
        # first half travels plain, M is measured at 4 and 8 and kept from then on
        (RunPlan(total=16, lr=1.0, burn_in=8), [0, 1, 2, 4, 8, 9, 10, 11], [4, 8]),
        # cyclical, two cycles of 8, half of each explored: calibrations at each cycle's start
        # (0, 8), at 1 and 2 (early in the first exploration) and where sampling starts (4, 12)
        (RunPlan(total=16, lr=1.0, schedule="cyclical", cycles=2, explore=0.5),
         [0, 1, 2, 4, 8, 12], [4, 12]),
        # a tenth explored: each cycle's second step (1, 9) already samples
        (RunPlan(total=16, lr=1.0, schedule="cyclical", cycles=2, explore=0.1),
         [0, 1, 8, 9], [1, 9]),
    ],
    ids=["constant", "cyclical", "cyclical, short exploration"],
)  # fmt: skip
def test_the_preconditioner_is_measured_once_the_chain_settles_and_kept_while_it_samples(
    plan, calibrations, measured
):
    """Where the chain travels (the first half of the burn-in, a cycle's exploration) it steps
    with the identity; a measure costs one gradient per column (two) on top of the step's own
    and the power iteration's twelve."""
    X, y = _data()
    step = _chain(plan)
    seen, dense_at = [], []
    for k in range(12 if plan.schedule == "constant" else 16):
        before, calls = step.dense, step.potential.calls
        step(X, y)
        spent = step.potential.calls - calls
        if spent > 1:
            seen.append(k)
        if step.dense is not before and step.dense is not None:
            dense_at.append(k)
            assert spent == 1 + 2 + 12
        early = plan.travelling(k) and not (plan.schedule == "constant" and 2 * k >= 8)
        assert (step.dense is None) == early, k
    assert seen == calibrations
    assert dense_at == measured


def test_the_noise_gathered_for_the_step_is_whitened_by_the_preconditioner():
    """On minibatches the step's noise bound gathers ``(M^{1/2} d)²`` for ``d`` the difference
    of two minibatches' gradients at one position (the noise the preconditioned step sees), and
    ``(xᵀ d)²`` along the power iteration's last direction ``x`` (in ``θ``'s coordinates).
    Burn-in 4: step 2 measures ``M`` on one minibatch, step 3 (still travelling) gathers."""
    X, y = _data()
    step = _chain(RunPlan(total=16, lr=1.0, burn_in=4))
    first, second = (X[:2], y[:2]), (X[2:4], y[2:4])
    step(*second)
    step(*second)
    assert step.dense is None  # steps 0 and 1 travel plain
    step(*first)  # step 2: M measured
    pre, direction = step.dense, step._calibration["direction"]
    assert pre is not None
    step(*second)  # step 3: the noise of this minibatch against the last, at theta
    d = (first[0].mean(0) - second[0].mean(0)) @ STIFF  # g_B(θ) = (θ - mean x_B) A
    gathered, along, count = step._noise[:3]
    assert count == 1
    torch.testing.assert_close(gathered, pre.sqrt_apply(d).square(), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(along, (direction * d).sum().square(), rtol=1e-10, atol=1e-12)
    assert not torch.allclose(gathered, d.square())  # whitening changed it


def _sgld(net=None, **options):
    return bp.make("sgld", net or bp.nn.mlp(2, [], 1), bp.Gaussian(scale=0.5), **options)


def test_auto_is_dense_for_a_net_linear_in_its_weights_up_to_the_bound():
    """``mlp(d, [], 1)`` has ``d + 1`` parameters: 1,000 at ``d = 999``, 1,001 at 1,000."""
    assert DENSE_MAX_PARAMS == 1000

    def dense(net, lr=None, **options):
        X = torch.randn(16, net[0].in_features)
        return _sgld(net, **options).start_run(X, X[:, :1], steps=8, lr=lr).use_dense

    assert dense(bp.nn.mlp(999, [], 1))
    assert not dense(bp.nn.mlp(1000, [], 1))
    assert dense(bp.nn.mlp(1000, [], 1), preconditioner="dense")
    assert not dense(bp.nn.mlp(2, [4], 1))  # a hidden layer: its curvature changes
    assert dense(bp.nn.mlp(2, [4], 1), preconditioner="dense")
    assert not dense(bp.nn.mlp(2, [], 1), preconditioner="none")
    assert not dense(bp.nn.mlp(2, [], 1), lr=0.01)  # a given step
    sghmc = bp.make("sghmc", bp.nn.mlp(2, [], 1), bp.Gaussian(scale=0.5))
    X = torch.randn(16, 2)
    assert not sghmc.start_run(X, X[:, :1], steps=8, lr=None).use_dense  # its diagonal M⁻¹


def test_a_net_is_linear_in_its_weights_when_it_is_one_plain_affine_map():
    assert linear_in_weights(nn.Linear(3, 1))
    assert linear_in_weights(nn.Sequential(nn.Flatten(), nn.Linear(4, 2), nn.Identity()))
    assert linear_in_weights(bp.nn.mlp(3, [], 2))  # the library's batched Linear
    assert not linear_in_weights(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1)))  # bilinear
    assert not linear_in_weights(nn.Sequential(nn.Linear(2, 1), nn.Tanh()))
    assert not linear_in_weights(nn.Sequential(nn.Flatten()))  # no weights at all

    class Scaled(nn.Linear):
        def forward(self, x):
            return torch.tanh(super().forward(x))

    class Custom(nn.Sequential):
        def forward(self, x):
            return super().forward(x) ** 2

    assert not linear_in_weights(Scaled(2, 1))
    assert not linear_in_weights(Custom(nn.Linear(2, 1)))
    with pytest.raises(TypeError, match="^net must be a torch.nn.Module, got str$"):
        linear_in_weights("linear")
    m = _sgld(bp.nn.mlp(3, [], 1))  # judged on the user's net, not the PyroModule it becomes
    assert m._linear


def test_the_preconditioner_option_is_checked():
    with pytest.raises(ValueError, match="preconditioner must be one of"):
        _sgld(preconditioner="full")
    with pytest.raises(ValueError, match=r"^preconditioner='dense' is SGLD's: SGHMC adapts its "
                       r"own diagonal M⁻¹ \(leave preconditioner='auto'\)$"):  # fmt: skip
        bp.make("sghmc", bp.nn.mlp(2, [4], 1), bp.Gaussian(scale=0.5), preconditioner="dense")
    with pytest.raises(ValueError, match="preconditioner='none' is SGLD's"):
        bp.make("csghmc", bp.nn.mlp(2, [4], 1), bp.Gaussian(scale=0.5), preconditioner="none")


def test_a_dense_preconditioner_with_a_given_step_is_refused_before_any_work():
    X = torch.randn(16, 2)
    y = X.sum(-1)
    m = _sgld(preconditioner="dense")
    with pytest.raises(ValueError, match=r"measured with the step: fit with lr=None .*lr=0\.01"):
        m.fit(X, y, epochs=2, lr=0.01, progress=False)
    assert m.potential is None
    ms = [_sgld(preconditioner="dense") for _ in range(2)]
    with pytest.raises(ValueError, match="measured with the step"):
        bp.fit_stacked(ms, X, y, seeds=[0, 1], epochs=2, lr=0.01, progress=False)
    m.fit(X, y, epochs=2, lr="measured", batch_size=8, progress=False, seed=0)  # accepted
    assert m.potential is not None


def test_stacked_chains_share_the_preconditioner_setting():
    X = torch.randn(16, 2)
    y = X.sum(-1)
    ms = [_sgld(preconditioner="dense"), _sgld(preconditioner="none")]
    with pytest.raises(ValueError, match=r"share preconditioner; got \['dense', 'none'\]"):
        bp.fit_stacked(ms, X, y, seeds=[0, 1], epochs=2, progress=False)


def _linear_models(count: int) -> list:
    torch.manual_seed(1)
    return [bp.make("sgld", bp.nn.mlp(3, [], 1).to(D), bp.Gaussian(scale=0.3))
            for _ in range(count)]  # fmt: skip


@pytest.mark.parametrize(
    ("batch_size", "lr"), [(None, None), (16, "measured")], ids=["whole data", "minibatches"]
)
def test_stacked_dense_chains_end_as_their_own_fits(batch_size, lr):
    """Two dense SGLD chains on their own rows, run stacked, on the whole data set and on
    measured minibatches (the control variate's, the whitened noise): each ends as its own
    ``fit`` to the stacked tests' 1e-9 (float64 round-off)."""
    X, y = _stacked_data("regression", chains=2)
    stacked = _linear_models(2)
    assert stacked[0].start_run(X[0], y[0], steps=8, lr=None).use_dense
    fit = {"epochs": 40, "batch_size": batch_size, "lr": lr, "progress": False}
    bp.fit_stacked(stacked, X, y, seeds=[3, 4], **fit)
    _assert_each_chain_is_its_own_fit(stacked, _linear_models(2), X, y, [3, 4], True, **fit)
