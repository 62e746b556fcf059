"""Regression metrics against independent computations (numpy, scipy, closed forms)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate, optimize, special, stats

from bnn_pyro.base import BaseBayesianMethod, summarize_samples
from bnn_pyro.metrics import (
    calibration_errors,
    crps_from_samples,
    crps_gaussian_mixture,
    gaussian_log_likelihood,
    gaussian_mixture_cdf,
    gaussian_mixture_quantile,
    gaussian_nll,
    regression_calibration,
    rmse,
)
from bnn_pyro.training import History

# All library computations run in float64, so agreement with scipy/numpy float64 references is
# limited only by summation order: 1e-10 relative is generous for that and still catches any
# formula error (those show up at the 1e-2 level or worse).
RTOL = 1e-10


def _mixture(seed: int, s: int = 7, n: int = 11, o: int | None = None):
    g = torch.Generator().manual_seed(seed)
    shape = (s, n) if o is None else (s, n, o)
    locs = torch.randn(shape, generator=g, dtype=torch.float64)
    scales = 0.3 + torch.rand(shape, generator=g, dtype=torch.float64)
    y = torch.randn(shape[1:], generator=g, dtype=torch.float64) * 1.5
    return locs, scales, y


# ---------------------------------------------------------------------------------------- RMSE
def test_rmse_matches_numpy_and_scales_to_original_units():
    g = torch.Generator().manual_seed(0)
    mean, y = torch.randn(50, 2, generator=g), torch.randn(50, 2, generator=g)
    m, t = mean.double().numpy(), y.double().numpy()
    assert rmse(mean, y) == pytest.approx(np.sqrt(np.mean((m - t) ** 2)), rel=1e-12)
    # Per-output std: map both back to original units with numpy, then take the plain RMSE.
    y_mean, y_std = np.array([10.0, -3.0]), np.array([2.0, 0.5])
    expected = np.sqrt(np.mean(((m * y_std + y_mean) - (t * y_std + y_mean)) ** 2))
    assert rmse(mean, y, y_scale=torch.tensor(y_std)) == pytest.approx(expected, rel=1e-6)


# ------------------------------------------------------------------------------ log-likelihood
def _scipy_ll(locs, scales, y):
    locs, y = locs.numpy(), y.numpy()
    scales = np.broadcast_to(np.asarray(scales), locs.shape)
    per_point = []
    for n in range(locs.shape[1]):
        logpdf = stats.norm.logpdf(y[n], loc=locs[:, n], scale=scales[:, n])
        if logpdf.ndim == 2:  # (S, O): the outputs are independent given the sample
            logpdf = logpdf.sum(axis=1)
        per_point.append(special.logsumexp(logpdf) - np.log(locs.shape[0]))
    return np.array(per_point)


@pytest.mark.parametrize("o", [None, 3])
@pytest.mark.parametrize("scale_kind", ["full", "per_sample", "scalar"])
def test_log_likelihood_matches_scipy_logsumexp(o, scale_kind):
    locs, scales, y = _mixture(1, o=o)
    if scale_kind == "per_sample":
        scales = scales[(slice(None),) + (slice(0, 1),) * (locs.dim() - 1)]  # (S, 1[, 1])
    elif scale_kind == "scalar":
        scales = 0.7
    expected = _scipy_ll(locs, torch.as_tensor(scales, dtype=torch.float64), y)
    per_point = gaussian_log_likelihood(locs, scales, y, reduction="none")
    assert per_point.shape == (locs.shape[1],)
    np.testing.assert_allclose(per_point.numpy(), expected, rtol=RTOL)
    assert gaussian_log_likelihood(locs, scales, y) == pytest.approx(expected.mean(), rel=RTOL)
    assert gaussian_nll(locs, scales, y) == pytest.approx(-expected.mean(), rel=RTOL)


def test_log_likelihood_single_sample_is_the_gaussian_log_density():
    y, mu, sigma = 1.3, -0.4, 0.8
    closed_form = -0.5 * math.log(2 * math.pi * sigma**2) - (y - mu) ** 2 / (2 * sigma**2)
    got = gaussian_log_likelihood(torch.tensor([[mu]]), sigma, torch.tensor([y]))
    assert got == pytest.approx(closed_form, rel=1e-6)  # float32 inputs: 1e-6 relative


def test_log_likelihood_is_stable_far_in_the_tails():
    # Every component density underflows to 0 in float64 (z ~ 1e3); the logsumexp must not.
    locs = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
    y = torch.tensor([1000.0], dtype=torch.float64)
    got = gaussian_log_likelihood(locs, 1.0, y)
    assert math.isfinite(got)
    assert got == pytest.approx(_scipy_ll(locs, torch.tensor(1.0), y)[0], rel=RTOL)


@pytest.mark.parametrize("o", [None, 2])
def test_log_likelihood_y_scale_equals_computing_in_original_units(o):
    locs, scales, y = _mixture(2, o=o)
    y_mean = 5.0
    y_std = torch.tensor(3.0 if o is None else [3.0, 0.25], dtype=torch.float64)
    # Independent route: un-normalise everything and evaluate the densities in original units.
    expected = _scipy_ll(locs * y_std + y_mean, scales * y_std, y * y_std + y_mean).mean()
    assert gaussian_log_likelihood(locs, scales, y, y_scale=y_std) == pytest.approx(
        expected, rel=RTOL
    )
    # ... which is the normalised log-likelihood minus sum_o log(y_std[o]).
    shift = float(torch.log(y_std).sum())
    assert gaussian_log_likelihood(locs, scales, y) - shift == pytest.approx(expected, rel=RTOL)


class _FixedSamples(BaseBayesianMethod):
    """A method whose predictive samples are given: exercises the predict contract end to end."""

    def __init__(self, samples: torch.Tensor, noise_scale: float) -> None:
        super().__init__()
        self.samples, self.noise_scale = samples, noise_scale

    def fit(self, X, y=None, **kwargs):
        return History()  # nothing to learn: the samples are given

    def predict(self, x, return_samples=False, **kwargs):
        return summarize_samples(self.samples, return_samples=return_samples)


def test_metrics_consume_predictive_gaussian_of_a_method():
    locs, _, y = _mixture(11, o=1)
    method = _FixedSamples(locs, noise_scale=0.4)
    got_locs, got_scales = method.predictive_gaussian(torch.zeros(11, 1))
    expected = _scipy_ll(locs, torch.tensor(0.4, dtype=torch.float64), y).mean()
    assert gaussian_log_likelihood(got_locs, got_scales, y) == pytest.approx(expected, rel=RTOL)
    mean, _ = method.predict(torch.zeros(11, 1))
    assert rmse(mean, y) == pytest.approx(np.sqrt(((locs.mean(0) - y) ** 2).mean().item()))


# ------------------------------------------------------------------------------------- CRPS
def _crps_by_quadrature(locs: np.ndarray, scales: np.ndarray, y: float) -> float:
    """CRPS definition: integral of (F(x) - 1{x >= y})^2 dx for the mixture CDF F."""

    def cdf(x):
        return stats.norm.cdf(x, loc=locs, scale=scales).mean()

    lo, hi = locs.min() - 12 * scales.max(), locs.max() + 12 * scales.max()
    left = integrate.quad(lambda x: cdf(x) ** 2, min(lo, y - 1), y, epsabs=1e-11, limit=200)[0]
    right = integrate.quad(lambda x: (1 - cdf(x)) ** 2, y, max(hi, y + 1), epsabs=1e-11, limit=200)
    return left + right[0]


def test_crps_mixture_matches_numerical_integration_of_the_definition():
    locs, scales, y = _mixture(3, s=5, n=6)
    per_point = crps_gaussian_mixture(locs, scales, y, reduction="none")
    expected = [
        _crps_by_quadrature(locs[:, n].numpy(), scales[:, n].numpy(), y[n].item()) for n in range(6)
    ]
    # quad's absolute error is ~1e-11 and the tails beyond 12 sigma hold < 1e-30: 1e-8 absolute.
    np.testing.assert_allclose(per_point.numpy(), expected, atol=1e-8)


def test_crps_mixture_single_gaussian_matches_closed_form():
    # Gneiting & Raftery (2007): CRPS(N(mu, s^2), y) = s [z (2 Phi(z) - 1) + 2 phi(z) - 1/sqrt(pi)]
    mu, s, y = 0.5, 1.7, -1.2
    z = (y - mu) / s
    closed = s * (z * (2 * stats.norm.cdf(z) - 1) + 2 * stats.norm.pdf(z) - 1 / math.sqrt(math.pi))
    got = crps_gaussian_mixture(torch.tensor([[mu]], dtype=torch.float64), s, torch.tensor([y]))
    assert got == pytest.approx(closed, rel=1e-6)  # y is float32: 1e-6 relative


def test_crps_mixture_chunking_multi_output_and_y_scale():
    locs, scales, y = _mixture(4, s=6, n=9, o=2)
    full = crps_gaussian_mixture(locs, scales, y, reduction="none")
    assert full.shape == (9, 2)
    chunked = crps_gaussian_mixture(locs, scales, y, reduction="none", chunk_size=2)
    np.testing.assert_allclose(chunked.numpy(), full.numpy(), rtol=1e-13)
    # Each output on its own is a univariate mixture: same numbers as the (S, N) call.
    single = crps_gaussian_mixture(locs[..., 1], scales[..., 1], y[:, 1], reduction="none")
    np.testing.assert_allclose(full[:, 1].numpy(), single.numpy(), rtol=1e-13)
    # Original units by quadrature in original units (y_std = 4, y_mean = -2).
    n = 3
    expected = _crps_by_quadrature(
        locs[:, n, 0].numpy() * 4 - 2, scales[:, n, 0].numpy() * 4, y[n, 0].item() * 4 - 2
    )
    scaled = crps_gaussian_mixture(locs, scales, y, y_scale=4.0, reduction="none")
    assert scaled[n, 0].item() == pytest.approx(expected, abs=1e-8)


def test_crps_from_samples_matches_brute_force_pairwise():
    g = torch.Generator().manual_seed(5)
    samples = torch.randn(13, 8, 2, generator=g, dtype=torch.float64)
    y = torch.randn(8, 2, generator=g, dtype=torch.float64)
    x, t = samples.numpy(), y.numpy()
    expected = np.empty((8, 2))
    for n in range(8):
        for o in range(2):
            xs = x[:, n, o]
            pair = sum(abs(a - b) for a in xs for b in xs)
            expected[n, o] = np.mean(np.abs(xs - t[n, o])) - pair / (2 * len(xs) ** 2)
    got = crps_from_samples(samples, y, reduction="none")
    np.testing.assert_allclose(got.numpy(), expected, rtol=RTOL)
    assert crps_from_samples(samples, y, y_scale=2.5) == pytest.approx(2.5 * expected.mean())


def test_crps_from_many_samples_approaches_the_mixture_crps():
    locs, scales, y = _mixture(6, s=3, n=4)
    g = torch.Generator().manual_seed(7)
    draws = 20_000
    comp = torch.randint(0, 3, (draws, 4), generator=g)
    samples = locs.gather(0, comp) + scales.gather(0, comp) * torch.randn(
        draws, 4, generator=g, dtype=torch.float64
    )
    # Monte Carlo error of a CRPS estimate with 20k draws is ~1e-2 / sqrt(20k) * a few: 0.01.
    assert crps_from_samples(samples, y) == pytest.approx(
        crps_gaussian_mixture(locs, scales, y), abs=0.01
    )


# ------------------------------------------------------------------------------ calibration
def test_mixture_cdf_matches_scipy():
    locs, scales, y = _mixture(8)
    expected = stats.norm.cdf(y.numpy()[None], loc=locs.numpy(), scale=scales.numpy()).mean(0)
    np.testing.assert_allclose(gaussian_mixture_cdf(locs, scales, y).numpy(), expected, rtol=1e-12)


def test_calibration_coverage_matches_quantiles_found_by_brentq():
    locs, scales, y = _mixture(9, s=4, n=40)
    levels = torch.tensor([0.1, 0.5, 0.8, 0.95], dtype=torch.float64)
    result = regression_calibration(locs, scales, y, levels)
    expected = []
    for p in levels.tolist():
        inside = 0
        for n in range(40):
            mu, s = locs[:, n].numpy(), scales[:, n].numpy()

            def cdf_minus(x, q, mu=mu, s=s):
                return stats.norm.cdf(x, loc=mu, scale=s).mean() - q

            lo, hi = mu.min() - 20 * s.max(), mu.max() + 20 * s.max()
            q_lo = optimize.brentq(cdf_minus, lo, hi, args=((1 - p) / 2,), xtol=1e-12)
            q_hi = optimize.brentq(cdf_minus, lo, hi, args=((1 + p) / 2,), xtol=1e-12)
            inside += q_lo <= y[n].item() <= q_hi
        expected.append(inside / 40)
    np.testing.assert_allclose(result.coverage.numpy(), expected)
    assert result.error == pytest.approx(np.mean(np.abs(np.array(expected) - levels.numpy())))


def test_mixture_quantiles_match_brentq_on_scipys_cdf():
    """Each quantile is the root of scipy's mixture CDF minus the level (brentq to 1e-12):
    bisection to float64 resolution agrees to 1e-9, for (S, N) and (S, N, O) inputs."""
    locs, scales, _ = _mixture(11, s=4, n=6)
    levels = [0.01, 0.3, 0.5, 0.9, 0.999]
    got = gaussian_mixture_quantile(locs, scales, levels)
    assert got.shape == (5, *locs.shape[1:])
    for n in range(locs.shape[1]):
        mu, s = locs[:, n].numpy(), scales[:, n].numpy()
        lo, hi = mu.min() - 20 * s.max(), mu.max() + 20 * s.max()
        for i, p in enumerate(levels):
            root = optimize.brentq(
                lambda x, p=p, mu=mu, s=s: stats.norm.cdf(x, mu, s).mean() - p, lo, hi, xtol=1e-12
            )
            assert float(got[i, n]) == pytest.approx(root, abs=1e-9)
    one = gaussian_mixture_quantile(torch.zeros(1, 3, 2, dtype=torch.float64), 2.0, [0.05])
    np.testing.assert_allclose(one.numpy(), 2 * stats.norm.ppf(0.05), rtol=1e-9)


@pytest.mark.parametrize("levels", [[0.0], [1.0], [0.5, 1.2], [[0.5]], [math.nan]])
def test_mixture_quantile_levels_must_be_probabilities(levels):
    with pytest.raises(ValueError, match="levels"):
        gaussian_mixture_quantile(torch.zeros(1, 2), 1.0, levels)


def test_calibration_of_a_true_model_and_of_an_overconfident_one():
    g = torch.Generator().manual_seed(10)
    s, n = 5, 4000
    locs = torch.randn(s, n, generator=g, dtype=torch.float64)
    scales = torch.full((s, n), 0.5, dtype=torch.float64)
    comp = torch.randint(0, s, (1, n), generator=g)
    y = (locs.gather(0, comp) + 0.5 * torch.randn(1, n, generator=g, dtype=torch.float64))[0]
    good = regression_calibration(locs, scales, y)
    # y drawn from the predictive: coverage is Binomial(4000, p) / 4000 with std <= 0.008, so
    # 0.03 is ~4 standard deviations.
    np.testing.assert_allclose(good.coverage.numpy(), good.levels.numpy(), atol=0.03)
    assert good.error < 0.02
    # y ~ N(0, 1) but the model says N(0, 0.5^2): the level-p interval +-0.5 z_p covers
    # 2 Phi(0.5 z_p) - 1 < p of the targets, with z_p = Phi^-1((1 + p) / 2).
    truth = torch.randn(n, generator=g, dtype=torch.float64)
    bad = regression_calibration(torch.zeros(1, n, dtype=torch.float64), 0.5, truth)
    levels = bad.levels.numpy()
    expected = 2 * stats.norm.cdf(0.5 * stats.norm.ppf((1 + levels) / 2)) - 1
    np.testing.assert_allclose(bad.coverage.numpy(), expected, atol=0.03)  # same 4-sd margin
    assert bool((bad.coverage < bad.levels).all())
    assert bad.error == pytest.approx(np.mean(levels - expected), abs=0.03)


# ------------------------------------------------------------------------------- validation
_L, _S, _Y = torch.zeros(3, 4), torch.ones(3, 4), torch.zeros(4)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: rmse([1.0], _Y), TypeError, "mean must be a torch.Tensor"),
        (lambda: rmse(torch.zeros(4), torch.zeros(4, 1)), ValueError, "y must have shape"),
        (lambda: rmse(torch.zeros(4), _Y, y_scale=0.0), ValueError, "y_scale must be positive"),
        (lambda: rmse(torch.zeros(4), _Y, y_scale="2"), TypeError, "y_scale must be"),
        (lambda: gaussian_log_likelihood(torch.zeros(4), 1.0, _Y), ValueError, "locs must have"),
        (lambda: gaussian_log_likelihood(torch.zeros(0, 4), 1.0, _Y), ValueError, "S >= 1"),
        (lambda: gaussian_log_likelihood(_L.long(), 1.0, _Y), TypeError, "locs must be a float"),
        (lambda: gaussian_log_likelihood(_L, -_S, _Y), ValueError, "scales must be positive"),
        (lambda: gaussian_log_likelihood(_L, torch.ones(5), _Y), ValueError, "broadcastable"),
        (lambda: gaussian_log_likelihood(_L, "1", _Y), TypeError, "scales must be"),
        (lambda: gaussian_log_likelihood(_L, _S, torch.zeros(3)), ValueError, "y must have"),
        (lambda: gaussian_log_likelihood(_L, _S, _Y, reduction="sum"), ValueError, "reduction"),
        (lambda: gaussian_nll(_L * math.nan, _S, _Y), ValueError, "locs must be finite"),
        (lambda: crps_gaussian_mixture(_L, _S, _Y, chunk_size=0), ValueError, "chunk_size"),
        (lambda: crps_gaussian_mixture(_L, 0.0, _Y), ValueError, "scales must be positive"),
        (lambda: crps_from_samples(_L, torch.zeros(4, 1)), ValueError, "y must have shape"),
        (lambda: crps_from_samples(_L, _Y, y_scale=torch.ones(2)), ValueError, "y_scale must"),
        (lambda: regression_calibration(_L, _S, _Y, torch.tensor([1.5])), ValueError, "levels"),
        (lambda: regression_calibration(_L, _S, _Y, torch.ones(2, 2)), ValueError, "levels"),
        (lambda: regression_calibration(_L, _S, _Y, [0.5]), TypeError, "levels must be"),
        (lambda: gaussian_mixture_cdf(_L, _S, _Y.int()), TypeError, "y must be a float"),
    ],
)
def test_bad_arguments_raise_clear_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("scale", [0.6, 1.0, 1.7])
def test_calibration_errors_are_uncertainty_toolboxs(scale):
    """MACE, RMSCE and miscalibration area against uncertainty-toolbox (its "interval"
    proportions, 100 levels), one Gaussian per point: the same numbers."""
    ut = pytest.importorskip("uncertainty_toolbox.metrics_calibration")
    g = torch.Generator().manual_seed(0)
    mean = torch.randn(2000, generator=g, dtype=torch.float64)
    sd = 0.5 + torch.rand(2000, generator=g, dtype=torch.float64)
    y = mean + scale * sd * torch.randn(2000, generator=g, dtype=torch.float64)
    errors = calibration_errors(mean[None], sd[None], y)
    args = (mean.numpy(), sd.numpy(), y.numpy())
    assert errors.mace == pytest.approx(ut.mean_absolute_calibration_error(*args), abs=1e-9)
    assert errors.rmsce == pytest.approx(ut.root_mean_squared_calibration_error(*args), abs=1e-9)
    assert errors.miscalibration_area == pytest.approx(ut.miscalibration_area(*args), abs=1e-9)
    assert (errors.mace > 0.05) == (scale != 1.0)  # over- and under-confidence both show
