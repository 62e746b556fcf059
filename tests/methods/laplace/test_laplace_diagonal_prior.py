"""Diagonal prior precision: one λ per Bayesian coordinate; its evidence against the formula
written out and laplace-torch's (when installed), its closed-form maximiser, and its refusals."""

import pytest
import torch
import torch.nn as nn

import bnn_pyro as bp
from tests.methods.laplace.test_laplace_layerwise_prior import (
    _dense,
    _fitted,
    assert_same_as_laplace_torch,
)

P = 32  # the coordinates of Linear(2, 6) -> Tanh -> Linear(6, 2)


def _diagonal(seed: int = 0) -> tuple[float, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple((0.2 + 3 * torch.rand(P, generator=g, dtype=torch.float64)).tolist())


@pytest.mark.parametrize("structure", ["diag", "full"])
def test_the_evidence_is_the_formula_with_each_coordinates_lambda(structure):
    lam = _diagonal()
    la = _fitted(structure, lam)
    mean, _ = la._require_fit()
    per = torch.tensor(lam, dtype=torch.float64)
    prec = _dense(la)
    # the precision the structure reports is H + diag(λ): what is left is the λ = 1 posterior's H
    torch.testing.assert_close(
        prec - torch.diag(per), _dense(_fitted(structure, 1.0)) - torch.eye(P).double()
    )
    expected = (la._loglik - 0.5 * (per * mean**2).sum() + 0.5 * per.log().sum()
                - 0.5 * torch.linalg.slogdet(prec)[1])  # fmt: skip
    assert float(la.log_marginal_likelihood()) == pytest.approx(float(expected), rel=1e-10)


def test_the_diagonal_maximiser_is_each_coordinates_own():
    la = _fitted("diag", 1.0)
    best_layerwise = float(la.log_marginal_likelihood(la.optimize_prior_precision(layerwise=True)))
    lam = la.optimize_prior_precision(diagonal=True)
    assert isinstance(lam, tuple) and len(lam) == P and la.prior_precision == lam
    best = float(la.log_marginal_likelihood())
    assert best >= best_layerwise - 1e-9  # a diagonal λ contains the layerwise one
    for k in range(P):  # each coordinate at its maximum: moving one λ lowers the evidence
        for factor in (0.9, 1.1):
            moved = list(lam)
            moved[k] *= factor
            if moved[k] < 1e8:  # a λ at the upper bound (θ* = 0 there) has no interior maximum
                assert float(la.log_marginal_likelihood(moved)) < best, (k, factor)


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_laplace_torch_gives_the_same_diagonal_evidence_and_variance(task):
    # the diag structure and laplace-torch's DiagLaplace sum the same per-coordinate terms:
    # agreement to float64 round-off, as the layerwise test measures (3e-14)
    lam = _diagonal(1)
    assert_same_as_laplace_torch(_fitted("diag", lam, task), lam, task, rtol=1e-10)


def test_what_a_diagonal_prior_cannot_do_is_refused_by_name():
    net = nn.Sequential(nn.Linear(2, 6), nn.Tanh(), nn.Linear(6, 2))
    with pytest.raises(ValueError, match=r"one per Bayesian coordinate \(32\), got 5 values"):
        bp.LaplaceApproximation(net, "regression", prior_precision=[1.0] * 5)
    with pytest.raises(ValueError, match="'kron' takes one prior precision per parameter tensor"):
        bp.LaplaceApproximation(net, "regression", prior_precision=[1.0] * P,
                                hessian_structure="kron")  # fmt: skip
    for structure in ("full", "kron"):
        with pytest.raises(ValueError, match="diagonal prior precisions need hessian_structure"):
            _fitted(structure, 1.0).optimize_prior_precision(diagonal=True)
    la = _fitted("diag", 1.0)
    with pytest.raises(ValueError, match="not with layerwise=True or method='gridsearch'"):
        la.optimize_prior_precision(diagonal=True, layerwise=True)
    with pytest.raises(TypeError, match="diagonal must be a bool"):
        la.optimize_prior_precision(diagonal=1)
    assert la.prior_precision == 1.0  # nothing changed


def test_a_diagonal_prior_is_saved_and_loaded(tmp_path):
    la = _fitted("diag", _diagonal(2))
    la.save(tmp_path / "m.pt")
    net = nn.Sequential(nn.Linear(2, 6), nn.Tanh(), nn.Linear(6, 2)).double()
    back = bp.load(tmp_path / "m.pt", net=net)
    assert back.prior_precision == _diagonal(2)
    x = torch.randn(3, 2, dtype=torch.float64)
    torch.testing.assert_close(back.glm_variance(x), la.glm_variance(x))


def test_the_closed_form_maximiser_refuses_bad_input_by_name():
    from bnn_pyro.methods.laplace.gaussian_posterior import optimal_diagonal_prior_precision

    with pytest.raises(ValueError, match=r"both be \(P,\), got \(3,\) and \(2,\)"):
        optimal_diagonal_prior_precision(torch.ones(3), torch.ones(2), (1e-8, 1e8))
    with pytest.raises(ValueError, match="0 < low < high"):
        optimal_diagonal_prior_precision(torch.ones(3), torch.ones(3), (1.0, 0.5))
