"""KFAC (``hessian_structure="kron"``) against closed forms that need no peer library: one
example (where a Kronecker product of per-example factors is the GGN block itself), a
single-output linear model (where the weight block is exact), its own posterior's draws, and
its GLM variance against the covariance it reports. laplace-torch side by side:
``test_laplace_glm_variance.py``."""

import pytest
import torch
import torch.nn as nn
from test_laplace import _loop_ggn
from torch.utils.data import DataLoader, TensorDataset

from bnn_pyro.methods import LaplaceApproximation


def _net(d_out: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, d_out)
    ).double()


def _fit(net, x, y, task, **kw):
    noise = {"noise_scale": 0.7} if task == "regression" else {}
    la = LaplaceApproximation(
        net, task, hessian_structure="kron", prior_precision=1.5, **noise, **kw
    )
    la.fit(DataLoader(TensorDataset(x, y), batch_size=16))
    return la


def _blocks(matrix: torch.Tensor, net: nn.Module) -> dict[str, torch.Tensor]:
    out, start = {}, 0
    for name, p in net.named_parameters():
        out[name] = matrix[start : start + p.numel(), start : start + p.numel()]
        start += p.numel()
    return out


@pytest.mark.parametrize(("task", "d_out"), [("regression", 2), ("classification", 3)])
def test_one_example_gives_the_exact_ggn_blocks(task, d_out):
    # N = 1: G ⊗ A / N = (δᵀ Λ δ) ⊗ (a aᵀ), the GGN block of that example exactly; the
    # reference is a per-example Jacobian loop (torch.autograd.functional.jacobian)
    net = _net(d_out)
    x = torch.randn(1, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    y = torch.randn(1, d_out, dtype=torch.float64) if task == "regression" else torch.tensor([1])
    la = _fit(net, x, y, task)
    exact = _blocks(_loop_ggn(net, x, task, 0.7 if task == "regression" else None), net)
    for name, block in la.posterior_precision.items():
        eye = torch.eye(len(block), dtype=block.dtype)
        torch.testing.assert_close(block, exact[name] + 1.5 * eye, rtol=1e-9, atol=1e-10)


def test_a_single_output_linear_model_has_its_exact_weight_and_bias_blocks():
    # y = w·x + b: δ = 1 for every row, so G = N/σ² and G ⊗ A / N = Σ x xᵀ / σ², the exact
    # weight block; the bias block Σ 1/σ² = N/σ² is exact too (KFAC drops the cross terms)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(30, 3, generator=g, dtype=torch.float64)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]], dtype=torch.float64) + 0.3
    net = nn.Linear(3, 1).double()
    la = LaplaceApproximation(net, "regression", hessian_structure="kron", prior_precision=2.0,
                              noise_scale=0.5)  # fmt: skip
    la.fit(DataLoader(TensorDataset(x, y), batch_size=8))
    prec = la.posterior_precision
    eye = torch.eye(3, dtype=torch.float64)
    torch.testing.assert_close(prec["weight"], x.T @ x / 0.25 + 2.0 * eye, rtol=1e-12, atol=1e-9)
    torch.testing.assert_close(prec["bias"], torch.tensor([[30 / 0.25 + 2.0]], dtype=torch.float64))


@pytest.mark.parametrize(("task", "d_out"), [("regression", 2), ("classification", 3)])
def test_glm_variance_and_covariance_are_j_sigma_jt_of_its_own_covariance(task, d_out):
    # the eigenbasis shortcuts against the dense (P, P) covariance the structure reports
    net = _net(d_out)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(40, 3, generator=g, dtype=torch.float64)
    y = torch.randn(40, d_out, generator=g, dtype=torch.float64) if task == "regression" else (
        torch.randint(0, d_out, (40,), generator=g))  # fmt: skip
    la = _fit(net, x, y, task)
    sigma = la.posterior_covariance()
    prec = torch.block_diag(*la.posterior_precision.values())
    torch.testing.assert_close(
        sigma @ prec, torch.eye(len(sigma), dtype=sigma.dtype), atol=1e-8, rtol=0
    )
    x_new = x[:5]
    from bnn_pyro.methods.laplace.curvature import output_jacobians

    jac, _ = output_jacobians(net, {n: p.detach() for n, p in net.named_parameters()}, x_new)
    joint = jac.flatten(0, 1) @ sigma @ jac.flatten(0, 1).T
    torch.testing.assert_close(la.glm_covariance(x_new), joint, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(la.glm_variance(x_new), joint.diagonal().reshape(5, d_out),
                               rtol=1e-9, atol=1e-12)  # fmt: skip


def test_draws_have_the_reported_covariance():
    # S = 40,000 draws: each entry of the sample covariance has sd sqrt((Σ_ii Σ_jj + Σ_ij²)/S)
    # ≤ sqrt(2/S) max Σ_ii ≈ 0.007 max Σ_ii; 6 of those bound it (a false alarm ~1e-9 each)
    net = _net(1)
    x = torch.randn(30, 3, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    la = _fit(net, x, torch.randn(30, 1, dtype=torch.float64), "regression")
    torch.manual_seed(0)
    draws = la.sample_parameters(40_000)
    flat = torch.cat([v.reshape(40_000, -1) for v in draws.values()], dim=1)
    sigma = la.posterior_covariance()
    tol = 6 * (2 / 40_000) ** 0.5 * float(sigma.diagonal().max())
    mean = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    assert float((flat.mean(0) - mean).abs().max()) < tol
    assert float((flat.T.cov() - sigma).abs().max()) < tol


def test_the_posterior_saves_loads_and_moves(tmp_path):
    net = _net(1)
    x = torch.randn(20, 3, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    la = _fit(net, x, torch.randn(20, 1, dtype=torch.float64), "regression")
    la.save(tmp_path / "kron.pt")
    import bnn_pyro as bp

    back = bp.load(tmp_path / "kron.pt", net=_net(1))
    torch.testing.assert_close(back.glm_variance(x[:4]), la.glm_variance(x[:4]))
    assert float(back.log_marginal_likelihood()) == float(la.log_marginal_likelihood())
    single = la.float()
    assert all(v.dtype == torch.float32 for v in single._hessian.values())
    assert single.glm_variance(x[:4].float()).dtype == torch.float32


@pytest.mark.parametrize(
    ("build", "words"),
    [
        (
            lambda: LaplaceApproximation(
                _net(1), "regression", hessian="fisher", hessian_structure="kron"
            ),
            "hessian='ggn'",
        ),  # fmt: skip
        (
            lambda: LaplaceApproximation(
                nn.Sequential(nn.Conv1d(1, 2, 3), nn.Flatten()),
                "regression",
                hessian_structure="kron",
            ),
            "Conv1d",
        ),  # fmt: skip
    ],
)
def test_what_kfac_does_not_cover_is_refused_by_name(build, words):
    with pytest.raises(ValueError, match=words):
        build()


def test_a_linear_layer_on_sequences_is_refused_at_fit():
    # (B, 15) -> (B, 5, 3) -> the linear layer on 5 positions -> (B, 10)
    net = nn.Sequential(nn.Unflatten(1, (5, 3)), nn.Linear(3, 2), nn.Flatten()).double()
    la = LaplaceApproximation(net, "regression", hessian_structure="kron", noise_scale=1.0)
    x = torch.randn(4, 15, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"\(B, in\) inputs"):
        la.fit(DataLoader(TensorDataset(x, torch.randn(4, 10, dtype=torch.float64)), batch_size=4))


def test_where_kfac_is_exact_its_evidence_and_lambda_are_the_full_structures():
    # one linear layer, one output, no bias: G ⊗ A / N is the whole GGN, so the log-evidence
    # (through the factors' eigenvalues) and the λ that maximises it equal the full matrix's
    g = torch.Generator().manual_seed(6)
    x = torch.randn(25, 4, generator=g, dtype=torch.float64)
    y = x @ torch.randn(4, 1, generator=g, dtype=torch.float64)
    fits = {}
    for structure in ("kron", "full"):
        net = nn.Linear(4, 1, bias=False).double()
        with torch.no_grad():
            net.weight.fill_(0.3)
        la = LaplaceApproximation(net, "regression", hessian_structure=structure,
                                  prior_precision=0.5, noise_scale=0.4)  # fmt: skip
        la.fit(DataLoader(TensorDataset(x, y), batch_size=10))
        fits[structure] = (float(la.log_marginal_likelihood()), la.optimize_prior_precision())
    assert fits["kron"] == pytest.approx(fits["full"], rel=1e-10)
