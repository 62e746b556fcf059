"""``DKL``: the exact GP equals scikit-learn's ``GaussianProcessRegressor`` on the trained net's
frozen features, its objective is scikit-learn's log marginal likelihood, the sparse GP's
objective is its closed form written out here, and what a Pyro user touches (a prior on a
kernel parameter, Pyro's global param store) behaves."""

from __future__ import annotations

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.nn import PyroSample
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Matern

import bnn_pyro as bp
from bnn_pyro.methods.dkl import DKL
from bnn_pyro.nn.param_scope import ParamScope
from tests.reliability.refusal import assert_refused

F64 = torch.float64
SKLEARN_KERNELS = {
    "rbf": lambda length: RBF(length, "fixed"),
    "matern32": lambda length: Matern(length, "fixed", nu=1.5),
    "matern52": lambda length: Matern(length, "fixed", nu=2.5),
}


def _data(n: int = 40, outputs: int = 1, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 2, generator=g, dtype=F64) * 4 - 2
    y = torch.sin(2 * x[:, :1]) + 0.5 * x[:, 1:] + 0.1 * torch.randn(n, 1, generator=g, dtype=F64)
    return x, (y if outputs == 1 else torch.cat([y, x[:, :1] ** 2], dim=-1))


def _dkl(outputs: int = 1, noise: object = "learned", **options) -> DKL:
    torch.manual_seed(0)
    return DKL(bp.nn.mlp(2, [16], outputs).to(F64), bp.Gaussian(scale=noise), **options)


def _fitted(outputs: int = 1, **options) -> tuple[DKL, torch.Tensor, torch.Tensor]:
    m = _dkl(outputs, **options)
    x, y = _data(outputs=outputs)
    m.fit(x, y, epochs=30, lr=1e-2, progress=False, seed=0)
    return m, x, y


def _frozen_features(m: DKL, x: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        m.model.eval()
        return m.features(x).numpy()


def _sklearn_gp(m: DKL, x: torch.Tensor, y: torch.Tensor) -> GaussianProcessRegressor:
    """scikit-learn's exact GP with DKL's fitted kernel, noise and mean, on the frozen
    features (Pyro adds ``noise + jitter`` to the diagonal, scikit-learn ``alpha``)."""
    kernel = m.gp.kernel
    sk_kernel = ConstantKernel(float(kernel.variance), "fixed") * SKLEARN_KERNELS[m.kernel](
        float(kernel.lengthscale)
    )
    gpr = GaussianProcessRegressor(
        sk_kernel, alpha=float(m.gp.noise) + m.jitter, optimizer=None, normalize_y=False
    )
    return gpr.fit(_frozen_features(m, x), (y - m.mean.detach()).numpy())


@pytest.mark.parametrize("kernel", list(SKLEARN_KERNELS))
@pytest.mark.parametrize("outputs", [1, 2])
def test_the_exact_gp_is_scikit_learns_on_the_frozen_features(kernel, outputs):
    """The issue's bar is 1e-6; in float64 both sides solve one 40x40 system, so their
    difference is round-off (~1e-12): 1e-9 leaves three orders of margin."""
    m, x, y = _fitted(outputs, kernel=kernel)
    assert float(m.gp.kernel.lengthscale) != 1.0  # the fit moved the kernel
    gpr = _sklearn_gp(m, x, y)
    x_new = torch.linspace(-4, 4, 25, dtype=F64).unsqueeze(-1).expand(-1, 2).contiguous()
    sk_mean, sk_std = gpr.predict(_frozen_features(m, x_new), return_std=True)
    mean, var = m.predict(x_new)
    sk_std = sk_std.reshape(len(x_new), -1)
    np.testing.assert_allclose(
        mean.numpy(), sk_mean.reshape(len(x_new), -1) + m.mean.detach().numpy(), atol=1e-9
    )
    np.testing.assert_allclose(var.numpy(), np.broadcast_to(sk_std**2, var.shape), atol=1e-9)


@pytest.mark.parametrize("kernel", list(SKLEARN_KERNELS))
def test_the_exact_objective_is_the_negative_log_marginal_likelihood_per_row(kernel):
    m, x, y = _fitted(kernel=kernel)
    m.model.eval()
    gpr = _sklearn_gp(m, x, y)
    assert float(m.objective(x, y)) == pytest.approx(
        -gpr.log_marginal_likelihood_value_ / len(x), abs=1e-10
    )


def test_the_sparse_objective_is_its_closed_form_on_a_minibatch():
    """Pyro's sparse GP, whitened: ``q(f_n) = N(Wᵀm, k_nn - |w_n|² + |Sᵀw_n|²)`` with
    ``W = L⁻¹ K_uf``; the ELBO is ``N/B Σ_batch log N(y_n | q's mean, q's var + σ²) - KL(q(u) ||
    N(0, I))``, per row over ``N``. Written out here with dense linear algebra, float64."""
    m, x, y = _fitted(inducing_points=12, jitter=1e-4)
    m.model.eval()
    batch = slice(5, 21)
    with torch.no_grad():
        got = m._objective(m.features(x[batch]), y[batch], len(x))
        h = m.features(x[batch])
        k, xu = m.gp.kernel, m.gp.Xu
        kuu = k(xu) + m.jitter * torch.eye(len(xu), dtype=F64)
        w = torch.linalg.solve_triangular(torch.linalg.cholesky(kuu), k(xu, h), upper=False)
        loc, s = m.gp.u_loc[0], m.gp.u_scale_tril[0]
        f_loc = w.t() @ loc + m.mean
        f_var = k(h, diag=True) - w.square().sum(0) + (s.t() @ w).square().sum(0)
        noise = m.gp.likelihood.variance
        ll = torch.distributions.Normal(f_loc, (f_var + noise).sqrt()).log_prob(y[batch, 0])
        kl = 0.5 * (s.square().sum() + loc.square().sum() - len(loc) - 2 * s.diag().log().sum())
        expected = -(len(x) / len(h) * ll.sum() - kl) / len(x)
    assert float(got) == pytest.approx(float(expected), abs=1e-10)


def test_the_sparse_gp_predicts_in_closed_form_and_starts_at_evenly_spaced_rows():
    """With as many inducing points as rows and a step too small to move them, the inducing
    points are the features of every row (the evenly spaced rows of N are all of them)."""
    m = _dkl(inducing_points=40)
    x, y = _data()
    m.fit(x, y, epochs=1, lr=1e-12, optimizer="sgd", batch_size=40, progress=False, seed=0)
    np.testing.assert_allclose(m.gp.Xu.detach().numpy(), _frozen_features(m, x), atol=1e-9)
    m, x, y = _fitted(inducing_points=8)
    with torch.no_grad(), ParamScope():
        m.model.eval()  # (a direct call of Pyro's GP, off Pyro's global param store)
        loc, var = m.gp(m.features(x[:5]), full_cov=False)
    mean, v = m.predict(x[:5])
    torch.testing.assert_close(mean[:, 0], loc[0] + m.mean, rtol=0, atol=1e-12)
    torch.testing.assert_close(v[:, 0], var[0], rtol=0, atol=1e-12)


def test_a_prior_on_a_kernel_parameter_is_part_of_the_objective():
    """A Pyro user's ``PyroSample`` prior on the lengthscale: the GP's guide holds its MAP
    value, and the objective gains ``-log p(ℓ) / N`` against the same GP without the prior."""
    x, y = _data()
    m = _dkl(noise=0.3)
    m.gp.kernel.lengthscale = PyroSample(dist.LogNormal(torch.tensor(0.0, dtype=F64), 1.0))
    length = float(m.gp.kernel.lengthscale_map)
    with_prior = float(m.objective(x, y))
    plain = _dkl(noise=0.3, lengthscale=length)
    log_prior = dist.LogNormal(0.0, 1.0).log_prob(torch.tensor(length, dtype=F64))
    expected = float(plain.objective(x, y)) - float(log_prior) / len(x)
    assert with_prior == pytest.approx(expected, abs=1e-9)
    m.fit(x, y, epochs=20, lr=5e-2, progress=False, seed=0)  # the MAP value is trained
    assert float(m.gp.kernel.lengthscale_map) != pytest.approx(length, abs=1e-3)


def test_two_models_keep_their_own_gp_parameters_and_pyro_s_store_is_untouched():
    """Pyro names a PyroModule's parameters by attribute path ("kernel.lengthscale"), the
    same for every GP, in one global store: DKL keeps its GP's out of it."""
    pyro.clear_param_store()
    pyro.param("user_loc", torch.zeros(2))
    a, x, y = _fitted()
    before = a.predict(x[:5])[0]
    b = _dkl(kernel="matern52")
    b.fit(x, -3 * y, epochs=30, lr=5e-2, progress=False, seed=1)
    torch.testing.assert_close(a.predict(x[:5])[0], before, rtol=0, atol=0)
    assert float(a.gp.kernel.lengthscale) != float(b.gp.kernel.lengthscale)
    assert list(pyro.get_param_store().keys()) == ["user_loc"]


def test_the_exact_gp_reads_every_row_whatever_the_batch_size():
    a, b = _dkl(), _dkl()
    x, y = _data()
    a.fit(x, y, epochs=5, batch_size=8, lr=1e-2, progress=False, seed=0)
    history = b.fit(x, y, epochs=5, batch_size=40, lr=1e-2, progress=False, seed=0)
    torch.testing.assert_close(a.predict(x)[0], b.predict(x)[0], rtol=0, atol=0)
    assert history["loss"][-1] == pytest.approx(float(b.objective(x, y)), rel=0.05)


def test_a_fixed_noise_stays_and_a_learned_one_finds_the_data_s():
    m, x, y = _fitted(noise=0.2)
    assert m.noise_scale == 0.2 and float(m.gp.noise) == pytest.approx(0.04, abs=1e-15)
    g = torch.Generator().manual_seed(5)
    x = torch.rand(300, 1, generator=g, dtype=F64) * 6 - 3
    y = torch.sin(x) + 0.1 * torch.randn(300, 1, generator=g, dtype=F64)
    torch.manual_seed(0)
    m = DKL(bp.nn.mlp(1, [16], 1).to(F64), bp.Gaussian(scale="learned"))
    m.fit(x, y, epochs=300, lr=2e-2, progress=False, seed=0)
    # the ML estimate of a std from 300 rows has a relative sd of 1/sqrt(600) = 4%: 15% is
    # beyond three of them, with room for the mean's own error
    assert m.noise_scale == pytest.approx(0.1, rel=0.15)
    locs, scales = m.predictive_gaussian(x[:4])
    var = m.predict(x[:4])[1]
    torch.testing.assert_close(scales[0], (var + float(m.gp.noise)).sqrt(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("options", [{}, {"inducing_points": 5}])
def test_an_unfitted_model_predicts_the_gp_prior(options):
    """Before a fit: the exact GP has no data and the sparse GP's ``q(u)`` is its whitened
    prior, so both predict the mean function and the kernel's variance."""
    m = _dkl(variance=2.5, **options)
    x = _data()[0][:4]
    mean, var = m.predict(x)
    torch.testing.assert_close(mean, m.mean.detach().expand(4, 1), rtol=0, atol=1e-12)
    torch.testing.assert_close(var, torch.full((4, 1), 2.5, dtype=F64), rtol=0, atol=1e-12)


def test_draws_follow_the_closed_form():
    """20,000 draws: each mean within 5 standard errors (sd / sqrt(20,000)) of the closed
    form, each variance within 5% (the sample variance's relative sd is sqrt(2/20,000) = 1%)."""
    m, x, _ = _fitted()
    mean, var, samples = m.predict(x[:6], return_samples=True, num_samples=20_000, seed=0)
    assert samples.shape == (20_000, 6, 1)
    se = (var / 20_000).sqrt()
    assert bool(((samples.mean(0) - mean).abs() <= 5 * se).all())
    torch.testing.assert_close(samples.var(0), var, rtol=0.05, atol=0)


def test_save_and_load_keep_the_sparse_and_the_exact_gp(tmp_path):
    for options in ({}, {"inducing_points": 6, "kernel": "matern32"}):
        m, x, _ = _fitted(**options)
        m.save(tmp_path / "dkl.pt")
        again = bp.load(tmp_path / "dkl.pt", net=bp.nn.mlp(2, [16], 1).to(F64))
        for a, b in zip(m.predict(x[:5]), again.predict(x[:5]), strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_kernel_matrix_that_is_not_positive_definite_is_named():
    """Every row's features the same (a net of zeros), no jitter and a vanishing noise: the
    kernel matrix ``v·11ᵀ`` is singular and the message says what helps."""
    net = bp.nn.mlp(2, [4], 1).to(F64)
    torch.nn.init.zeros_(net[0].weight)
    torch.nn.init.zeros_(net[0].bias)
    m = DKL(net, bp.Gaussian(scale=1e-12), jitter=0.0)
    message = (
        r"^DKL: the kernel matrix of the net's features is not positive definite \(features "
        r"that coincide, or a lengthscale grown large\): a larger jitter or a lower lr at "
        r"epoch 0, step 0: training stopped"
    )
    with pytest.raises(bp.TrainingDivergedError, match=message):
        m.fit(*_data(), epochs=1, progress=False, seed=0)


def test_features_that_are_not_finite_are_a_diverged_fit_at_its_step():
    """NaN features make the kernel's Cholesky factor fail: that is the net diverging, and
    ``fit`` names the epoch and step, as for any NaN loss."""
    net = bp.nn.mlp(2, [4], 1).to(F64)
    with torch.no_grad():
        net[0].bias.fill_(float("nan"))
    for options in ({}, {"inducing_points": 4}):
        m = DKL(net, bp.Gaussian(scale=0.1), **options)
        with pytest.raises(bp.TrainingDivergedError, match="epoch 0, step 0"):
            m.fit(*_data(), epochs=1, batch_size=40, progress=False, seed=0)


def test_a_failed_cholesky_factor_on_features_that_are_not_finite_is_a_nan_loss(monkeypatch):
    """Where the factorisation itself fails (LAPACK flags NaN pivots only sometimes), features
    that are not finite give a NaN loss, for ``fit`` to name the step; finite ones, the
    refusal that names the jitter."""
    from bnn_pyro.methods.dkl.gp import build_gp, gp_objective

    def fails(*args, **kwargs):
        raise torch.linalg.LinAlgError("not positive-definite")

    monkeypatch.setattr(torch.linalg, "cholesky", fails)
    model = build_gp(2, 1, kernel="rbf", inducing_points=None, lengthscale=1.0, variance=1.0,
                     jitter=1e-6)  # fmt: skip
    h = torch.zeros(3, 2)
    with ParamScope():
        with pytest.raises(bp.TrainingDivergedError, match="not positive definite"):
            gp_objective(model, h, torch.zeros(1, 3), 3)
        h[1, 0] = float("inf")
        loss = gp_objective(model, h, torch.zeros(1, 3), 3)
    assert loss.dim() == 0 and bool(torch.isnan(loss))


@pytest.mark.parametrize("options", [{}, {"inducing_points": 5}])
def test_every_tensor_the_model_holds_is_in_the_net_s_precision(options):
    m = _dkl(**options)
    m.fit(*_data(), epochs=1, progress=False, seed=0)
    floating = {k: v.dtype for k, v in m.state_dict().items() if torch.is_tensor(v)}
    assert floating and set(floating.values()) == {F64}, floating


def test_the_exact_gp_s_validation_loss_is_the_objective_of_the_validation_rows():
    """The exact GP's loss is the marginal likelihood of the rows it is given, per row: on
    validation rows, theirs (not scaled by the training rows' count)."""
    m = _dkl()
    x, y = _data()
    history = m.fit(x[:30], y[:30], epochs=1, validation_data=(x[30:], y[30:]), progress=False,
                    seed=0)  # fmt: skip
    m.model.eval()
    assert history["val_loss"][-1] == pytest.approx(float(m.objective(x[30:], y[30:])), rel=1e-9)


@pytest.mark.parametrize(
    ("options", "names"),
    [
        ({"kernel": "periodic"}, ["no kernel 'periodic'", "'rbf', 'matern32', 'matern52'"]),
        ({"inducing_points": 0}, ["inducing_points"]),
        ({"lengthscale": 0.0}, ["lengthscale"]),
        ({"variance": -1.0}, ["variance"]),
        ({"jitter": -1e-6}, ["jitter"]),
        ({"num_samples": 0}, ["num_samples"]),
        ({"noise_scale": torch.tensor([0.1, 0.2])}, ["share one GP noise", "one noise scale"]),
    ],
)
def test_bad_arguments_are_refused_by_name(options, names):
    outputs = 2 if "noise_scale" in options else 1
    net = bp.nn.mlp(2, [4], outputs)
    assert_refused(lambda: DKL(net, "regression", **options), ValueError, *names)


def test_more_inducing_points_than_rows_are_refused_before_any_work():
    m = _dkl(inducing_points=50)
    x, y = _data()
    assert_refused(
        lambda: m.fit(x, y, epochs=1, progress=False), ValueError,
        "50 inducing points", "fit got 40", "inducing_points <= 40", obj=m,
    )  # fmt: skip


@pytest.mark.parametrize(("noise", "learned"), [(0.2, False), ("learned", True)])
def test_the_optimizer_holds_the_body_and_the_gp_not_the_replaced_layer(noise, learned):
    """The net's own last layer is not read, so not trained; weight decay is the body's alone
    (the GP's parameters are its own); the noise is trained where it is learned."""
    groups = []

    def adam(params):
        groups.extend(params)
        return torch.optim.Adam(params, lr=1e-3)

    torch.manual_seed(0)
    net = bp.nn.mlp(2, [8], 1).to(F64)
    before = net[-1].weight.detach().clone()
    m = DKL(net, bp.Gaussian(scale=noise), inducing_points=4)
    m.fit(*_data(), epochs=1, optimizer=adam, weight_decay=1e-2, progress=False, seed=0)
    body, own = groups
    last = {id(p) for p in net[-1].parameters()}
    assert {id(p) for p in body["params"]} == {id(p) for p in net.parameters()} - last
    noise_raw = m.gp.likelihood.variance_unconstrained
    want = [m.mean, *(p for p in m.gp.parameters() if learned or p is not noise_raw)]
    assert [id(p) for p in own["params"]] == [id(p) for p in want]
    assert own["weight_decay"] == 0.0
    assert torch.equal(net[-1].weight, before)
    assert learned or float(m.gp.likelihood.variance) == pytest.approx(0.04, rel=1e-12)


def test_compile_is_refused_before_any_work():
    m = _dkl()
    x, y = _data()
    assert_refused(
        lambda: m.fit(x, y, epochs=1, compile=True, progress=False), ValueError,
        "torch.compile", "without compile=True", obj=m,
    )  # fmt: skip


def test_the_objective_checks_its_targets():
    m = _dkl(outputs=2)
    x, y = _data(outputs=2)
    assert_refused(lambda: m.objective(x, y[:, 0]), ValueError, "(N, 2)", "got (40,)")
    assert_refused(lambda: m.objective(x, y[:30]), ValueError, "40 rows", "(30, 2)")
    bad = y.clone()
    bad[3, 1] = float("nan")
    assert_refused(lambda: m.objective(x, bad), ValueError, "finite", "1 NaN")
