"""Layerwise prior precision: one λ per Bayesian parameter tensor, in every structure; its
evidence against the formula written out, laplace-torch's (when installed), and its maximiser."""

import copy

import pytest
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import bnn_pyro as bp

STRUCTURES = ["diag", "full", "kron"]


def _data(task: str) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(40, 2, generator=g, dtype=torch.float64)
    y = torch.sin(x) + 0.1 * torch.randn(40, 2, generator=g, dtype=torch.float64)
    return x, (x[:, 0] > 0).long() if task == "classification" else y


def _fitted(structure: str, prior, task: str = "regression") -> bp.LaplaceApproximation:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 6), nn.Tanh(), nn.Linear(6, 2)).double()
    x, y = _data(task)
    noise = {"noise_scale": 0.3} if task == "regression" else {}
    la = bp.LaplaceApproximation(net, task, prior_precision=prior, hessian_structure=structure,
                                 **noise)  # fmt: skip
    la.fit(DataLoader(TensorDataset(x, y), batch_size=16))
    return la


@pytest.mark.parametrize("structure", STRUCTURES)
def test_one_value_per_tensor_equal_to_a_scalar_is_the_scalar_posterior(structure):
    scalar, layerwise = _fitted(structure, 0.8), _fitted(structure, [0.8] * 4)
    x = torch.randn(5, 2, dtype=torch.float64)
    torch.testing.assert_close(layerwise.glm_variance(x), scalar.glm_variance(x))
    torch.testing.assert_close(layerwise.posterior_covariance(), scalar.posterior_covariance())
    assert float(layerwise.log_marginal_likelihood()) == pytest.approx(
        float(scalar.log_marginal_likelihood()), rel=1e-12
    )


@pytest.mark.parametrize("structure", STRUCTURES)
def test_the_evidence_is_the_formula_with_each_tensors_lambda(structure):
    # log p(D|θ*) - Σ λ_i θ_i² / 2 + Σ log λ_i / 2 - log det(H + Λ) / 2, Λ from the dense
    # precision the structure reports (its log det by slogdet, not the structure's own route)
    lam = (0.5, 2.0, 1.5, 3.0)
    la = _fitted(structure, lam)
    mean, _ = la._require_fit()
    per = torch.cat([torch.full((p.numel(),), v, dtype=torch.float64)
                     for p, v in zip(la.model.parameters(), lam, strict=True)])  # fmt: skip
    prec = _dense(la)
    expected = (la._loglik - 0.5 * (per * mean**2).sum() + 0.5 * per.log().sum()
                - 0.5 * torch.linalg.slogdet(prec)[1])  # fmt: skip
    assert float(la.log_marginal_likelihood()) == pytest.approx(float(expected), rel=1e-10)
    # each λ sits on its own tensor's coordinates: H is what is left, whatever the λ
    ones = _dense(_fitted(structure, 1.0))
    torch.testing.assert_close(prec - torch.diag(per), ones - torch.eye(len(per)).double())


def _dense(la: bp.LaplaceApproximation) -> torch.Tensor:
    """``H + Λ`` as a ``(P, P)`` matrix from the structure's own form of it."""
    prec = la.posterior_precision
    if la.hessian_structure == "diag":
        return torch.diag(torch.cat([v.reshape(-1) for v in prec.values()]))
    if la.hessian_structure == "kron":
        return torch.block_diag(*prec.values())
    return prec


@pytest.mark.parametrize("task", ["regression", "classification"])
@pytest.mark.parametrize("structure", STRUCTURES)
def test_laplace_torch_gives_the_same_layerwise_evidence_and_variance(structure, task):
    # measured: diag and kron agree to 3e-14, full to 1.1e-6 (the full structure's gap is on
    # laplace-torch's side: see test_laplace_glm_variance.py)
    lam = [0.5, 2.0, 1.5, 3.0]
    assert_same_as_laplace_torch(_fitted(structure, lam, task), lam, task, rtol=1e-5)


def assert_same_as_laplace_torch(ours: bp.LaplaceApproximation, lam, task: str, rtol: float):
    """laplace-torch's ``Laplace`` of the same structure, net, data and prior precision ``lam``
    (a tensor of it): the same evidence and GLM variance to ``rtol``."""
    laplace = pytest.importorskip(
        "laplace", reason="laplace-torch, the peer, is not installed: pip install -e '.[ood]'"
    )
    theirs = laplace.Laplace(copy.deepcopy(ours.model), task, subset_of_weights="all",
                             hessian_structure=ours.hessian_structure,
                             prior_precision=torch.tensor(lam, dtype=torch.float64),
                             **({"sigma_noise": 0.3} if task == "regression" else {}))  # fmt: skip
    x, y = _data(task)
    theirs.fit(DataLoader(TensorDataset(x, y), batch_size=16))
    a, b = float(ours.log_marginal_likelihood()), float(theirs.log_marginal_likelihood())
    assert abs(a - b) <= rtol * abs(b), (a, b)
    _, f_var = theirs._glm_predictive_distribution(x[:6])
    torch.testing.assert_close(ours.glm_variance(x[:6]), f_var.diagonal(dim1=-2, dim2=-1),
                               rtol=rtol, atol=0)  # fmt: skip


@pytest.mark.parametrize("structure", ["diag", "kron"])
def test_the_layerwise_maximiser_is_each_tensors_own(structure):
    la = _fitted(structure, 1.0)
    scalar = la.optimize_prior_precision()
    best_scalar = float(la.log_marginal_likelihood(scalar))
    lam = la.optimize_prior_precision(layerwise=True)
    assert isinstance(lam, tuple) and len(lam) == 4 and la.prior_precision == lam
    best = float(la.log_marginal_likelihood())
    assert best >= best_scalar - 1e-9  # a layerwise λ contains the scalar one
    for k in range(4):  # each coordinate is at its maximum: moving one λ lowers the evidence
        for factor in (0.9, 1.1):
            moved = list(lam)
            moved[k] *= factor
            assert float(la.log_marginal_likelihood(moved)) < best


def test_layerwise_is_refused_where_the_evidence_does_not_separate():
    la = _fitted("full", 1.0)
    with pytest.raises(ValueError, match="separates by parameter tensor"):
        la.optimize_prior_precision(layerwise=True)
    with pytest.raises(TypeError, match="layerwise must be a bool"):
        la.optimize_prior_precision(layerwise="yes")


def test_bad_layerwise_values_are_refused_by_name():
    net = nn.Sequential(nn.Linear(2, 6), nn.Tanh(), nn.Linear(6, 2))
    with pytest.raises(ValueError, match=r"one per Bayesian parameter tensor \(4: 0.weight"):
        bp.LaplaceApproximation(net, "regression", prior_precision=[1.0, 2.0])
    with pytest.raises(ValueError, match="prior_precision"):
        bp.LaplaceApproximation(net, "regression", prior_precision=[1.0, -2.0, 1.0, 1.0])


def test_a_layerwise_prior_is_saved_and_loaded(tmp_path):
    la = _fitted("kron", (0.5, 2.0, 1.5, 3.0))
    la.save(tmp_path / "m.pt")
    net = nn.Sequential(nn.Linear(2, 6), nn.Tanh(), nn.Linear(6, 2)).double()
    back = bp.load(tmp_path / "m.pt", net=net)
    assert back.prior_precision == (0.5, 2.0, 1.5, 3.0)
    x = torch.randn(3, 2, dtype=torch.float64)
    torch.testing.assert_close(back.glm_variance(x), la.glm_variance(x))
