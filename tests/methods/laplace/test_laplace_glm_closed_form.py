"""The Laplace GLM predictive in closed form: ``predict`` and ``predictive_gaussian`` against the
exact posterior predictive of Bayesian linear regression, computed here from the model alone; the
probit approximation of a classifier's predictive against its formula on an independently
computed GGN posterior, SciPy's bivariate normal CDF and a Monte Carlo check; laplace-torch's own
predictive side by side when it is installed (the ``ood`` extra)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import bnn_pyro as bp
from bnn_pyro.methods.laplace import curvature
from bnn_pyro.methods.laplace.probit import probit_moments
from tests.methods.laplace.test_laplace_glm_variance import _trained

SIGMA, LAM = 0.3, 2.0


def _blr(structure: str, n_out: int = 1):
    """Bayesian linear regression ``y = [x, 1] w + N(0, σ²)``, ``w ~ N(0, λ⁻¹ I)`` on every
    coordinate of the weight and the bias (the library's prior on its Bayesian parameters), per
    output: the exact posterior ``N(μ, Σ)``, ``Σ = (ΦᵀΦ / σ² + λ I)⁻¹``, ``μ = Σ Φᵀ y / σ²``
    (``diag``: the diagonal of ``ΦᵀΦ`` only, the structure's own posterior), and a Laplace
    fitted around ``μ``, the MAP (the GGN of a linear model does not depend on the weights)."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(60, 3, generator=g, dtype=torch.float64)
    w = torch.tensor([[1.0, -2.0, 0.5], [0.3, 0.0, -1.0]], dtype=torch.float64)[:n_out]
    y = X @ w.T + SIGMA * torch.randn(60, n_out, generator=g, dtype=torch.float64)
    phi = torch.cat([X, torch.ones(60, 1, dtype=torch.float64)], 1)
    h = phi.T @ phi / SIGMA**2
    h = h if structure == "full" else torch.diag(h.diagonal())
    cov = torch.linalg.inv(h + LAM * torch.eye(4, dtype=torch.float64))
    mean = cov @ phi.T @ y / SIGMA**2  # (4, O): the MAP of each output's [w, b]
    net = nn.Linear(3, n_out).double()
    with torch.no_grad():
        net.weight.copy_(mean[:3].T)
        net.bias.copy_(mean[3])
    la = bp.LaplaceApproximation(net, "regression", prior_precision=LAM,
                                 hessian_structure=structure, noise_scale=SIGMA)  # fmt: skip
    la.fit(X, y, epochs=0, progress=False)
    x_new = 2 * torch.randn(40, 3, generator=g, dtype=torch.float64)  # 40 points, some far out
    phi_new = torch.cat([x_new, torch.ones(40, 1, dtype=torch.float64)], 1)
    exact_mean = phi_new @ mean  # (40, O)
    exact_var = ((phi_new @ cov) * phi_new).sum(1, keepdim=True).expand(40, n_out)
    return la, x_new, exact_mean, exact_var


@pytest.mark.parametrize("n_out", [1, 2])
@pytest.mark.parametrize("structure", ["full", "diag"])
def test_predict_is_the_exact_posterior_predictive_of_bayesian_linear_regression(structure, n_out):
    """``predict`` returns ``φ* μ`` and ``φ* Σ φ*ᵀ`` with no sampling. The tolerance, 1e-5
    relative, is the target the closed form was asked to meet; it is far above float64
    round-off (the two agree to about 1e-14 here) and far below the error of a sampled
    variance (20 draws: a relative standard error of sqrt(2/20), about 30%, per point)."""
    la, x_new, exact_mean, exact_var = _blr(structure, n_out)
    mean, var = la.predict(x_new)
    assert mean.shape == var.shape == (40, n_out)
    torch.testing.assert_close(mean, exact_mean, rtol=1e-5, atol=1e-12)
    torch.testing.assert_close(var, exact_var, rtol=1e-5, atol=0)
    # no draws: the same numbers on every call, whatever the seed, and the global RNG untouched
    state = torch.get_rng_state()
    again = la.predict(x_new, seed=123, num_samples=3)
    assert torch.equal(again[0], mean) and torch.equal(again[1], var)
    assert torch.equal(state, torch.get_rng_state())


def test_samples_come_from_the_glm_predictive_beside_the_closed_form():
    """``return_samples=True``: the same closed-form mean and variance, and ``S`` draws of
    ``f(x, θ*) + J (θ - θ*)`` whose mean and variance scatter around them (S = 4000: the sample
    mean within 5 standard errors, ``sqrt(var / S)``; the sample variance within 5 of its own,
    ``var · sqrt(2 / S)``)."""
    la, x_new, exact_mean, exact_var = _blr("full")
    mean, var, samples = la.predict(x_new, return_samples=True, num_samples=4000, seed=0)
    assert samples.shape == (4000, 40, 1)
    torch.testing.assert_close(mean, exact_mean, rtol=1e-5, atol=1e-12)
    torch.testing.assert_close(var, exact_var, rtol=1e-5, atol=0)
    assert ((samples.mean(0) - exact_mean).abs() <= 5 * (exact_var / 4000).sqrt()).all()
    spread = samples.var(0, correction=0)
    assert ((spread - exact_var).abs() <= 5 * exact_var * math.sqrt(2 / 4000)).all()
    again = la.predict(x_new, return_samples=True, num_samples=4000, seed=0)[2]
    assert torch.equal(samples, again)  # the seed still fixes the draws


def test_predictive_gaussian_is_the_exact_predictive_of_y():
    """``N(φ* μ, φ* Σ φ*ᵀ + σ²)``: one mixture component, exact (same tolerance as above)."""
    la, x_new, exact_mean, exact_var = _blr("full")
    locs, scales = la.predictive_gaussian(x_new, num_samples=7, seed=0)
    assert locs.shape == scales.shape == (1, 40, 1)
    torch.testing.assert_close(locs[0], exact_mean, rtol=1e-5, atol=1e-12)
    torch.testing.assert_close(scales[0] ** 2, exact_var + SIGMA**2, rtol=1e-5, atol=0)
    mean_sd = bp.calibration.predictive_moments(la, x_new)  # what the calibrators read
    torch.testing.assert_close(mean_sd[1] ** 2, exact_var + SIGMA**2, rtol=1e-5, atol=0)


def test_the_sampled_predictive_is_unchanged():
    """``predictive="nn"`` still samples: its mean and variance are its samples' own."""
    la, x_new, _, _ = _blr("full")
    la.predictive = "nn"
    mean, var, samples = la.predict(x_new, return_samples=True, num_samples=50, seed=0)
    torch.testing.assert_close(mean, samples.mean(0))
    torch.testing.assert_close(var, samples.var(0, correction=0))
    locs, _ = la.predictive_gaussian(x_new, num_samples=50, seed=0)
    assert locs.shape == (50, 40, 1)


def _softmax_regression(n_classes: int = 3):
    """A linear softmax classifier ``nn.Linear(2, C)`` (float64) trained to near its MAP, and
    its GGN Laplace posterior computed here: ``J_n = [I_C ⊗ x_nᵀ, I_C]`` (the weight row-major,
    then the bias), ``H = Σ_n J_nᵀ (diag(p_n) - p_n p_nᵀ) J_n``, ``Σ = (H + λ I)⁻¹``."""
    g = torch.Generator().manual_seed(3)
    X = torch.randn(80, 2, generator=g, dtype=torch.float64)
    y = (X[:, 0] > 0).long() + (X[:, 1] > 0.5).long()
    torch.manual_seed(0)
    net = nn.Linear(2, n_classes).double()
    opt = torch.optim.Adam(net.parameters(), lr=0.05)
    for _ in range(300):
        opt.zero_grad()
        nn.functional.cross_entropy(net(X), y).backward()
        opt.step()

    def jac(x):  # (N, C, P)
        eye = torch.eye(n_classes, dtype=torch.float64)
        return torch.stack([torch.cat([torch.kron(eye, r[None]), eye], 1) for r in x])

    with torch.no_grad():
        p = torch.softmax(net(X), -1)
    lam_out = torch.diag_embed(p) - p[:, :, None] * p[:, None, :]
    j = jac(X)
    h = torch.einsum("ncp,ncd,ndq->pq", j, lam_out, j)
    cov = torch.linalg.inv(h + LAM * torch.eye(h.shape[0], dtype=torch.float64))
    x_new = 2 * torch.randn(30, 2, generator=g, dtype=torch.float64)
    j_new = jac(x_new)
    with torch.no_grad():
        f = net(x_new)
    var = torch.einsum("ncp,pq,ncq->nc", j_new, cov, j_new)
    return net, X, y, x_new, f, var


def _fitted_classifier(net, X, y, **options):
    la = bp.LaplaceApproximation(copy.deepcopy(net), "classification", prior_precision=LAM,
                                 hessian_structure="full", **options)  # fmt: skip
    la.fit(X, y, epochs=0, progress=False)
    return la


def test_probit_predict_is_the_probit_approximation_of_the_exact_glm():
    """The probabilities are ``softmax(f / sqrt(1 + π/8 · v))`` with ``v`` the logits' GLM
    variance of the posterior computed here (float64: 1e-8 is round-off room for the two ways
    of inverting ``H + λ I``); the variance is ``Φ₂(h, h; ρ) - p²`` by SciPy's bivariate
    normal CDF, ``h = Φ⁻¹(p)``, ``ρ = (π/8) v / (1 + (π/8) v)`` (1e-6: SciPy's CDF is computed
    by its own quadrature, to about 1e-8 absolute)."""
    net, X, y, x_new, f, v = _softmax_regression()
    la = _fitted_classifier(net, X, y)
    state = torch.get_rng_state()
    probs, var = la.predict(x_new)
    assert torch.equal(state, torch.get_rng_state())  # deterministic: no draws
    expected = torch.softmax(f / torch.sqrt(1 + math.pi / 8 * v), -1)
    torch.testing.assert_close(probs, expected, rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(probs.sum(-1), torch.ones(30, dtype=torch.float64))
    assert (var >= 0).all() and (var <= probs * (1 - probs) + 1e-12).all()
    # the logits themselves (no softmax): the exact GLM moments, as for regression
    logits, logit_var = la.predict(x_new, normalize_output=False)
    torch.testing.assert_close(logits, f, rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(logit_var, v, rtol=1e-8, atol=1e-12)

    stats = pytest.importorskip("scipy.stats", reason="SciPy is not installed (the dev extra)")
    rho = (math.pi / 8 * v) / (1 + math.pi / 8 * v)
    h = torch.special.ndtri(probs)
    bvn = torch.tensor(
        [
            [
                stats.multivariate_normal(cov=[[1.0, r], [r, 1.0]]).cdf([float(hk), float(hk)])
                for hk, r in zip(h_row, rho_row, strict=True)
            ]
            for h_row, rho_row in zip(h, rho, strict=True)
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(var, bvn - probs**2, rtol=0, atol=1e-6)


def test_the_probit_variance_is_the_variance_of_a_probit_link():
    """:func:`probit_moments`'s variance of a class of probability ``p`` and logit variance
    ``v`` is that of ``Φ(a u)``, ``a² = π/8``, for ``u ~ N(m, v)`` with the mean ``m`` that
    gives ``E[Φ(a u)] = Φ(a m / sqrt(1 + a² v)) = p``: by 10⁶ draws, within 5 standard errors
    of the sample variance (estimated from the draws)."""
    a = math.sqrt(math.pi / 8)
    g = torch.Generator().manual_seed(0)
    for logit, v in [(0.0, 1.0), (1.5, 4.0), (-3.0, 30.0), (0.5, 0.05), (4.0, 0.5)]:
        probs, var = probit_moments(
            torch.tensor([[logit, 0.0]], dtype=torch.float64),
            torch.tensor([[v, 0.0]], dtype=torch.float64),  # two classes, the second certain
        )
        m = float(torch.special.ndtri(probs[0, 0])) * math.sqrt(1 + a * a * v) / a
        u = m + math.sqrt(v) * torch.randn(10**6, generator=g, dtype=torch.float64)
        draws = torch.special.ndtr(a * u)
        assert math.isclose(float(probs[0, 0]), float(draws.mean()), abs_tol=5e-3)
        centred = (draws - draws.mean()) ** 2
        se = float(centred.std()) / 1e3
        assert abs(float(var[0, 0]) - float(centred.mean())) <= 5 * se, (logit, v)
        assert float(var[0, 1]) == 0.0  # a class of no logit variance: no spread


def test_link_approx_mc_samples_as_before_and_the_option_is_saved(tmp_path):
    """``link_approx="mc"`` (the constructor's or one call's): the moments of the sampled
    probabilities, the samples' own; the setting survives save and load."""
    net, X, y, x_new, _, _ = _softmax_regression()
    la = _fitted_classifier(net, X, y, link_approx="mc")
    mean, var, samples = la.predict(x_new, return_samples=True, num_samples=30, seed=0)
    torch.testing.assert_close(mean, samples.mean(0))
    torch.testing.assert_close(var, samples.var(0, correction=0))
    probit = la.predict(x_new, link_approx="probit")
    assert not torch.allclose(probit[0], mean)
    la.save(tmp_path / "la.pt")
    back = bp.load(tmp_path / "la.pt", net=copy.deepcopy(net))
    assert back.link_approx == "mc"
    torch.testing.assert_close(back.predict(x_new, num_samples=30, seed=0)[0], mean)
    default = _fitted_classifier(net, X, y)
    assert default.link_approx == "probit"
    torch.testing.assert_close(default.predict(x_new)[0], probit[0])


def test_bad_options_are_refused_before_any_work(monkeypatch):
    net, X, y, x_new, _, _ = _softmax_regression()
    with pytest.raises(ValueError, match="link_approx"):
        bp.LaplaceApproximation(net, "classification", link_approx="bridge")
    la = _fitted_classifier(net, X, y)

    def no_work(*args, **kwargs):
        raise AssertionError("Jacobians computed before the options were checked")

    monkeypatch.setattr("bnn_pyro.methods.laplace.predictive.output_jacobians", no_work)
    monkeypatch.setattr("bnn_pyro.methods.laplace.predictive.linearized_call", no_work)
    for kwargs, exc, match in [
        ({"link_approx": "Probit"}, ValueError, "link_approx"),
        ({"link_approx": 1}, ValueError, "link_approx"),
        ({"num_samples": 0}, ValueError, "num_samples"),
        ({"seed": -1}, ValueError, "seed"),
        ({"seed": 1, "generator": torch.Generator()}, ValueError, "seed or generator"),
        ({"vectorize": True}, TypeError, "vectorize"),
        ({"normalize_output": "yes"}, TypeError, "normalize_output"),
    ]:
        for return_samples in (False, True):
            with pytest.raises(exc, match=match):
                la.predict(x_new, return_samples, **kwargs)
    assert curvature.output_jacobians is not no_work  # the library's own, untouched


@pytest.mark.parametrize("structure", ["full", "diag", "kron"])
@pytest.mark.parametrize("task", ["regression", "classification"])
def test_laplace_torch_gives_the_same_predictive(task, structure):
    """laplace-torch's ``pred_type="glm"`` on the same net: regression's ``f_mu``, ``f_var``
    and classification's probit probabilities (``link_approx="probit"``, its default) equal
    ``predict``'s to 1e-5 relative (its GLM variance agrees with ours to 2.5e-6: see
    ``test_laplace_glm_variance.py``)."""
    laplace = pytest.importorskip(
        "laplace", reason="laplace-torch, the peer, is not installed: pip install -e '.[ood]'"
    )
    net, X, y = _trained(task, seed=0)  # the parity tests' MAP net (same seed, same steps)
    noise = {"noise_scale": 0.1} if task == "regression" else {}
    ours = bp.LaplaceApproximation(copy.deepcopy(net), task, prior_precision=2.0,
                                   hessian_structure=structure, **noise)  # fmt: skip
    ours.fit(X, y, epochs=0, progress=False)
    theirs = laplace.Laplace(copy.deepcopy(net), task, subset_of_weights="all",
                             hessian_structure=structure, prior_precision=2.0,
                             **({"sigma_noise": 0.1} if noise else {}))  # fmt: skip
    theirs.fit(DataLoader(TensorDataset(X, y), batch_size=50))
    x_new = torch.randn(6, 2, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    mean, var = ours.predict(x_new)
    if task == "regression":
        f_mu, f_var = theirs(x_new, pred_type="glm")
        torch.testing.assert_close(mean, f_mu, rtol=1e-5, atol=1e-8)
        torch.testing.assert_close(var, f_var.diagonal(dim1=-2, dim2=-1), rtol=1e-5, atol=0)
    else:
        probs = theirs(x_new, pred_type="glm", link_approx="probit")
        torch.testing.assert_close(mean, probs, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize(
    ("logits", "variance"),
    [((2, 3), (2, 2)), ((2, 1), (2, 1)), ((), ())],
    ids=["shapes differ", "one class", "scalar"],
)
def test_probit_moments_refuses_bad_shapes_by_name(logits, variance):
    with pytest.raises(ValueError, match=r"logits and variance .* C >= 2"):
        probit_moments(torch.zeros(logits), torch.ones(variance))
