"""Laplace: vmapped curvature against per-example loops, and the exact linear-Gaussian posterior."""

import math

import pytest
import torch
import torch.nn as nn
from torch.distributions import MultivariateNormal
from torch.utils.data import DataLoader, TensorDataset

from bnn_pyro.exceptions import NotFittedError
from bnn_pyro.methods import LaplaceApproximation
from tests.methods.methods_helpers import relu_mlp, trained


def _net(d_out):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 6), nn.Tanh(), nn.Linear(6, d_out)).double()


def _data(n, d_out, likelihood):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 3, generator=g, dtype=torch.float64)
    if likelihood == "classification":
        return x, torch.randint(0, d_out, (n,), generator=g)
    return x, torch.randn(n, d_out, generator=g, dtype=torch.float64)


def _nll(out, y, likelihood, sigma):
    if likelihood == "classification":
        return nn.functional.cross_entropy(out, y, reduction="sum")
    return 0.5 * (((out - y) / sigma) ** 2).sum()


def _loop_fisher(model, x, y, likelihood, sigma):
    """The seed's loop: one backward per example, squared (outer-product) gradients summed."""
    params = list(model.parameters())
    grads = []
    for i in range(len(x)):
        model.zero_grad()
        _nll(model(x[i : i + 1]), y[i : i + 1], likelihood, sigma).backward()
        grads.append(torch.cat([p.grad.reshape(-1) for p in params]))
    g = torch.stack(grads)
    return g.T @ g


def _loop_ggn(model, x, likelihood, sigma):
    """Σ_n J_nᵀ Λ_n J_n with J from torch.autograd.functional.jacobian, one example at a time."""
    names = [n for n, _ in model.named_parameters()]
    values = tuple(p.detach() for p in model.parameters())
    total = 0
    for i in range(len(x)):

        def f(*ps, xi=x[i : i + 1]):
            return torch.func.functional_call(model, dict(zip(names, ps, strict=True)), (xi,))[0]

        jac = torch.autograd.functional.jacobian(f, values)
        j = torch.cat([t.reshape(t.shape[0], -1) for t in jac], dim=1)  # (O, P)
        if likelihood == "classification":
            p = torch.softmax(f(*values), -1)
            lam = torch.diag(p) - torch.outer(p, p)
        else:
            lam = torch.eye(j.shape[0], dtype=j.dtype) / sigma**2
        total = total + j.T @ lam @ j
    return total


CASES = [("classification", 3, None), ("regression", 2, 0.7)]


@pytest.mark.parametrize("likelihood, d_out, sigma", CASES)
@pytest.mark.parametrize("structure", ["diag", "full"])
def test_vectorized_fisher_equals_per_sample_loop(likelihood, d_out, sigma, structure):
    model = _net(d_out)
    x, y = _data(40, d_out, likelihood)
    ref = _loop_fisher(model, x, y, likelihood, sigma)
    la = LaplaceApproximation(
        model, likelihood, hessian="fisher", hessian_structure=structure, noise_scale=sigma
    )
    la.fit(DataLoader(TensorDataset(x, y), batch_size=16))
    expected = torch.diagonal(ref) if structure == "diag" else ref
    torch.testing.assert_close(la._hessian, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("likelihood, d_out, sigma", CASES)
@pytest.mark.parametrize("structure", ["diag", "full"])
def test_vectorized_ggn_equals_jacobian_loop(likelihood, d_out, sigma, structure):
    model = _net(d_out)
    x, y = _data(25, d_out, likelihood)
    ref = _loop_ggn(model, x, likelihood, sigma)
    la = trained(
        LaplaceApproximation(
            model, likelihood, hessian="ggn", hessian_structure=structure, noise_scale=sigma
        ),
        DataLoader(TensorDataset(x, y), batch_size=10),
    )
    expected = torch.diagonal(ref) if structure == "diag" else ref
    torch.testing.assert_close(la._hessian, expected, rtol=1e-5, atol=1e-5)


@pytest.fixture
def linear_regression():
    """y = X w + b + N(0, σ²) with a N(0, λ⁻¹ I) prior on (w, b): the exact posterior is
    N(A⁻¹ X̃ᵀ y / σ², A⁻¹), A = X̃ᵀ X̃ / σ² + λ I, X̃ = [X, 1] (parameter order: weight, bias)."""
    g = torch.Generator().manual_seed(0)
    n, sigma, lam = 30, 0.5, 2.0
    x = torch.randn(n, 3, generator=g, dtype=torch.float64)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]], dtype=torch.float64) + 0.3
    y = y + sigma * torch.randn(n, 1, generator=g, dtype=torch.float64)
    xt = torch.cat([x, torch.ones(n, 1, dtype=torch.float64)], dim=1)
    a = xt.T @ xt / sigma**2 + lam * torch.eye(4, dtype=torch.float64)
    post_mean = torch.linalg.solve(a, xt.T @ y / sigma**2)[:, 0]
    model = nn.Linear(3, 1).double()
    with torch.no_grad():  # put the net at the MAP
        model.weight.copy_(post_mean[:3].unsqueeze(0))
        model.bias.copy_(post_mean[3:])
    return dict(x=x, y=y, xt=xt, a=a, mean=post_mean, model=model, sigma=sigma, lam=lam)


def _fit_linear(d, structure, **kw):
    la = LaplaceApproximation(
        d["model"],
        "regression",
        prior_precision=d["lam"],
        hessian="ggn",
        hessian_structure=structure,
        noise_scale=d["sigma"],
        **kw,
    )
    return trained(la, DataLoader(TensorDataset(d["x"], d["y"]), batch_size=8))


def test_full_ggn_laplace_is_the_exact_linear_regression_posterior(linear_regression):
    d = linear_regression
    la = _fit_linear(d, "full")
    torch.testing.assert_close(torch.cat([t.reshape(-1) for t in la.mean.values()]), d["mean"])
    torch.testing.assert_close(la.posterior_precision, d["a"])
    torch.testing.assert_close(la.posterior_covariance(), torch.linalg.inv(d["a"]))


def test_diag_ggn_is_the_diagonal_of_the_exact_precision(linear_regression):
    d = linear_regression
    la = _fit_linear(d, "diag")
    prec = torch.cat([t.reshape(-1) for t in la.posterior_precision.values()])
    torch.testing.assert_close(prec, torch.diagonal(d["a"]))


def test_log_marginal_likelihood_is_the_exact_evidence(linear_regression):
    # Marginally y ~ N(0, σ² I + X̃ X̃ᵀ / λ); the Laplace evidence at the MAP is exact here.
    d = linear_regression
    la = _fit_linear(d, "full")
    n = len(d["x"])
    cov = d["sigma"] ** 2 * torch.eye(n, dtype=torch.float64) + d["xt"] @ d["xt"].T / d["lam"]
    exact = MultivariateNormal(torch.zeros(n, dtype=torch.float64), cov).log_prob(d["y"][:, 0])
    assert math.isclose(float(la.log_marginal_likelihood()), float(exact), rel_tol=1e-9)


def test_full_posterior_samples_have_the_exact_covariance(linear_regression):
    # 20000 draws: an entry Σ_ij of the sample covariance has std sqrt((Σ_ii Σ_jj + Σ_ij²)/S);
    # we allow 5 of those.
    d = linear_regression
    la = _fit_linear(d, "full")
    torch.manual_seed(0)
    draws = torch.cat([t.reshape(20000, -1) for t in la.sample_parameters(20000).values()], 1)
    cov = torch.linalg.inv(d["a"])
    diag = torch.diagonal(cov)
    tol = 5 * ((torch.outer(diag, diag) + cov**2) / 20000).sqrt()
    assert ((torch.cov(draws.T) - cov).abs() <= tol).all()
    assert ((draws.mean(0) - d["mean"]).abs() <= 5 * (diag / 20000).sqrt()).all()


def test_glm_predictive_equals_nn_predictive_for_a_linear_model(linear_regression):
    d = linear_regression
    nn_pred = _fit_linear(d, "full", predictive="nn").predict(
        d["x"], True, generator=torch.Generator().manual_seed(0)
    )
    glm = _fit_linear(d, "full", predictive="glm")
    glm_pred = glm.predict(d["x"], True, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(nn_pred[2], glm_pred[2])


@pytest.mark.parametrize("structure", ["diag", "full"])
def test_optimize_prior_precision_maximises_the_evidence(linear_regression, structure):
    d = linear_regression
    la = _fit_linear(d, structure)
    lam = la.optimize_prior_precision()
    assert la.prior_precision == lam
    best = float(la.log_marginal_likelihood())
    for factor in (0.99, 1.01, 0.5, 2.0):
        assert float(la.log_marginal_likelihood(lam * factor)) < best
    # MacKay's fixed point, from the eigenvalues of the exact (X̃ᵀX̃/σ²) or its diagonal
    h = d["xt"].T @ d["xt"] / d["sigma"] ** 2
    e = torch.diagonal(h) if structure == "diag" else torch.linalg.eigvalsh(h)
    gamma = float((e / (e + lam)).sum())
    assert math.isclose(lam, gamma / float((d["mean"] ** 2).sum()), rel_tol=1e-6)


def test_last_layer_ggn_is_the_exact_posterior_of_the_features():
    # With the body fixed, the last layer is a linear regression on the features Φ(x):
    # precision = Φ̃ᵀ Φ̃ / σ² + λ I with Φ̃ = [Φ, 1].
    model = _net(1)
    x, y = _data(40, 1, "regression")
    la = trained(
        LaplaceApproximation(
            model,
            "regression",
            prior_precision=3.0,
            hessian="ggn",
            hessian_structure="full",
            subset="last_layer",
            noise_scale=0.4,
        ),
        DataLoader(TensorDataset(x, y), batch_size=16),
    )
    assert list(la.mean) == ["2.weight", "2.bias"]
    with torch.no_grad():
        phi = torch.cat([model[1](model[0](x)), torch.ones(40, 1, dtype=x.dtype)], 1)
    expected = phi.T @ phi / 0.4**2 + 3.0 * torch.eye(7, dtype=x.dtype)
    torch.testing.assert_close(la.posterior_precision, expected)


def test_fit_trains_then_fits_and_classifies():
    # Overlapping blobs (std 1 around centers 4 apart): the Bayes accuracy is about 0.95.
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    centers = torch.tensor([[2.0, 0.0], [-2.0, 0.0], [0.0, 3.0]])
    y = torch.randint(0, 3, (150,), generator=g)
    x = centers[y] + torch.randn(150, 2, generator=g)
    la = LaplaceApproximation(
        relu_mlp(2, 3, 16), "classification", num_samples=30, hessian="ggn", predictive="glm"
    )
    la.fit(x, y, epochs=60, lr=1e-2, progress=False, seed=0)
    before = float(la.log_marginal_likelihood())
    la.optimize_prior_precision()
    assert float(la.log_marginal_likelihood()) >= before
    mean, var = la.predict(x, generator=torch.Generator().manual_seed(0))
    assert (mean.argmax(-1) == y).float().mean() > 0.85
    assert la._n_data == 150 and (var > 0).all()


def test_predict_leaves_the_net_untouched():
    model = relu_mlp(2, 1, 8)
    x, y = torch.randn(20, 2), torch.randn(20, 1)
    la = trained(LaplaceApproximation(model, "regression"), x, y, epochs=0, progress=False)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.train()
    la.predict(x)
    assert model.training and all(m.training for m in model.modules())
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])


def test_dtype_and_state_follow_the_module(tmp_path):
    model = relu_mlp(2, 1, 8)
    x, y = torch.randn(20, 2), torch.randn(20, 1)
    la = LaplaceApproximation(model, "regression", hessian_structure="full", subset="last_layer")
    la.fit(x, y, epochs=0, progress=False)
    la.double()
    assert la._hessian.dtype == torch.float64 and la._mean.dtype == torch.float64
    torch.save(la.state_dict(), tmp_path / "la.pt")
    other = LaplaceApproximation(relu_mlp(2, 1, 8), "regression", subset="last_layer")
    with pytest.raises(ValueError, match="hessian_structure"):
        other.load_state_dict(torch.load(tmp_path / "la.pt", weights_only=True))


def test_not_fitted_errors():
    la = LaplaceApproximation(relu_mlp(2, 1, 4), "regression")
    assert la.mean is None and la.posterior_precision is None
    for call in (
        lambda: la.predict(torch.zeros(3, 2)),
        la.posterior_covariance,
        la.log_marginal_likelihood,
        la.optimize_prior_precision,
    ):
        with pytest.raises(NotFittedError, match="fit"):
            call()


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(likelihood="poisson"), ValueError, "likelihood"),
        (dict(prior_precision=0.0), ValueError, "prior_precision"),
        (dict(num_samples=0), ValueError, "num_samples"),
        (dict(hessian="kfac"), ValueError, "hessian"),
        (dict(hessian_structure="kfac"), ValueError, "hessian_structure"),
        (dict(subset="first"), ValueError, "subset"),
        (dict(predictive="probit"), ValueError, "predictive"),
        (dict(noise_scale=-1.0), ValueError, "noise_scale"),
    ],
)
def test_constructor_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        LaplaceApproximation(relu_mlp(2, 1, 4), **kwargs)


def test_other_argument_errors():
    with pytest.raises(ValueError, match="nn.Linear"):
        LaplaceApproximation(nn.Conv1d(1, 1, 1), subset="last_layer")
    with pytest.raises(TypeError, match="model"):
        LaplaceApproximation("net")
    x, y = torch.randn(10, 2), torch.randn(10, 1)
    la = LaplaceApproximation(relu_mlp(2, 1, 4), "regression")
    with pytest.raises(TypeError, match="y must be None"):
        la.fit(DataLoader(TensorDataset(x, y)), y)
    la.fit(x, y, epochs=0, progress=False)
    with pytest.raises(ValueError, match="bounds"):
        la.optimize_prior_precision((10.0, 1.0))


def test_model_without_parameters_is_rejected():
    with pytest.raises(ValueError, match="parameters"):
        LaplaceApproximation(nn.ReLU())
