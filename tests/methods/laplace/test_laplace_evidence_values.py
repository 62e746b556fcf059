"""The evidence of :class:`~bnn_pyro.methods.laplace.evidence.LaplaceEvidence` against the closed
form of Bayesian linear regression, with a prior precision per tensor or per coordinate.

A linear net ``y = w·x + b + N(0, σ²)`` on an orthogonal design (the rows ``(±1, ±1)``, twice:
``X̃ᵀ X̃ = 8 I`` with ``X̃ = [x, 1]``) has the curvature ``H = X̃ᵀ X̃ / σ² = 32 I`` (σ = 1/2),
which the diagonal and KFAC structures keep exactly (KFAC: ``G = 8/σ²``, ``A = xᵀx = 8 I``,
``G ⊗ A / N = 32 I``). With the net at the MAP ``θ* = (H + Λ)⁻¹ X̃ᵀ y / σ²`` under the prior
``N(0, Λ⁻¹)``, the Laplace evidence is exactly ``log N(y; 0, σ² I + X̃ Λ⁻¹ X̃ᵀ)``. For a fixed
θ*, the evidence is maximised per coordinate (or per tensor of ``k`` coordinates) where its
derivative ``k · 32 / (λ (32 + λ)) - ‖θ‖²`` is zero:
``λ = (-32 + sqrt(32² + 4 · 32 k / ‖θ‖²)) / 2``. Everything in float64."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
from torch.distributions import MultivariateNormal

import bnn_pyro as bp

F64 = torch.float64
SIGMA = 0.5
X = torch.tensor([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]] * 2, dtype=F64)
XT = torch.cat([X, torch.ones(8, 1, dtype=F64)], 1)
Y = torch.tensor([1.5, 0.2, -0.3, -1.1, 1.2, 0.6, 0.1, -0.9], dtype=F64)
H = 32.0  # X̃ᵀ X̃ / σ² = 32 I


def _fitted(structure: str, per: list[float]) -> bp.LaplaceApproximation:
    """The net at the MAP under ``Λ = diag(per)`` (weight 1, weight 2, bias)."""
    theta = torch.linalg.solve(XT.T @ XT / SIGMA**2 + torch.diag(torch.tensor(per, dtype=F64)),
                               XT.T @ Y / SIGMA**2)  # fmt: skip
    net = nn.Linear(2, 1).double()
    with torch.no_grad():
        net.weight.copy_(theta[:2].unsqueeze(0))
        net.bias.copy_(theta[2:])
    la = bp.LaplaceApproximation(net, "regression", hessian="ggn", hessian_structure=structure,
                                 noise_scale=SIGMA)  # fmt: skip
    la.fit(X, Y, epochs=0, progress=False)
    return la


def _exact(per: list[float]) -> float:
    cov = (
        SIGMA**2 * torch.eye(8, dtype=F64)
        + XT @ torch.diag(1 / torch.tensor(per, dtype=F64)) @ XT.T
    )
    return float(MultivariateNormal(torch.zeros(8, dtype=F64), cov).log_prob(Y))


def _best(theta2: float, k: int) -> float:
    """The root of ``k · H / (λ (H + λ)) = ‖θ‖²``."""
    return (-H + math.sqrt(H**2 + 4 * H * k / theta2)) / 2


@pytest.mark.parametrize("structure", ["full", "diag", "kron"])
def test_the_evidence_with_a_prior_per_tensor_is_the_linear_regression_evidence(structure):
    """λ = 0.5 on the weight's two coordinates and 3 on the bias: a tuple, a list or a tensor of
    the two values; the evidence at another λ than the fitted one is the closed form too."""
    la = _fitted(structure, [0.5, 0.5, 3.0])
    expected = _exact([0.5, 0.5, 3.0])
    for lam in ((0.5, 3.0), [0.5, 3.0], torch.tensor([0.5, 3.0])):
        assert float(la.log_marginal_likelihood(lam)) == pytest.approx(expected, rel=1e-10)
    la.prior_precision = (0.5, 3.0)
    assert float(la.log_marginal_likelihood()) == pytest.approx(expected, rel=1e-10)


@pytest.mark.parametrize("structure", ["full", "diag"])
def test_the_evidence_with_a_prior_per_coordinate_is_the_linear_regression_evidence(structure):
    per = [0.5, 2.0, 3.0]
    la = _fitted(structure, per)
    assert float(la.log_marginal_likelihood(per)) == pytest.approx(_exact(per), rel=1e-10)


@pytest.mark.parametrize("structure", ["full", "diag", "kron"])
def test_the_evidence_with_a_scalar_prior_is_the_linear_regression_evidence(structure):
    """A float, an int or a 0-d tensor: the same λ = 2."""
    la = _fitted(structure, [2.0, 2.0, 2.0])
    for lam in (2.0, 2, torch.tensor(2.0)):
        assert float(la.log_marginal_likelihood(lam)) == pytest.approx(_exact([2.0] * 3), rel=1e-10)


@pytest.mark.parametrize("structure", ["diag", "kron"])
def test_the_layerwise_maximiser_is_each_tensors_root(structure):
    la = _fitted(structure, [1.0, 1.0, 1.0])
    w, b = la.model.weight.detach(), la.model.bias.detach()
    got = la.optimize_prior_precision(layerwise=True)
    expected = (_best(float((w**2).sum()), 2), _best(float(b**2), 1))
    assert got == pytest.approx(expected, rel=1e-6) and la.prior_precision == got


def test_the_diagonal_maximiser_is_each_coordinates_root():
    la = _fitted("diag", [1.0, 1.0, 1.0])
    theta = torch.cat([la.model.weight.detach()[0], la.model.bias.detach()])
    got = la.optimize_prior_precision(diagonal=True)
    assert got == pytest.approx(tuple(_best(float(t**2), 1) for t in theta), rel=1e-6)
    assert la.prior_precision == got


@pytest.mark.parametrize("structure", ["full", "diag"])
def test_the_scalar_maximiser_is_the_root_over_all_coordinates(structure):
    la = _fitted(structure, [1.0, 1.0, 1.0])
    theta2 = float((la.model.weight.detach() ** 2).sum() + la.model.bias.detach() ** 2)
    assert la.optimize_prior_precision() == pytest.approx(_best(theta2, 3), rel=1e-6)


def test_the_maximiser_is_kept_within_the_bounds():
    """The root lies near 2 (θ* of order 1): bounds above it give their low end, below it the
    high end (to the bisection's tolerance)."""
    la = _fitted("full", [1.0, 1.0, 1.0])
    assert la.optimize_prior_precision(bounds=(10.0, 20.0)) == pytest.approx(10.0, rel=1e-6)
    assert la.optimize_prior_precision(bounds=(1e-3, 1e-2)) == pytest.approx(1e-2, rel=1e-6)


def test_bad_bounds_and_flags_are_refused_by_their_whole_message():
    la = _fitted("full", [1.0, 1.0, 1.0])
    for bounds in ((1.0, 1.0), (2.0, 1.0)):
        with pytest.raises(
            ValueError, match=r"^bounds must be \(low, high\) with low < high, got "
        ):
            la.optimize_prior_precision(bounds=bounds)
    with pytest.raises(ValueError, match=r"^bounds"):
        la.optimize_prior_precision(bounds=(0.0, 1.0))  # λ = 0 is no prior
    with pytest.raises(TypeError, match=r"^layerwise must be a bool, got int$"):
        la.optimize_prior_precision(layerwise=1)
    with pytest.raises(TypeError, match=r"^diagonal must be a bool, got str$"):
        la.optimize_prior_precision(diagonal="yes")
    both = (r"^diagonal=True chooses one λ per coordinate by the evidence: not with "
            r"layerwise=True or method='gridsearch'$")  # fmt: skip
    with pytest.raises(ValueError, match=both):
        la.optimize_prior_precision(diagonal=True, layerwise=True)
    with pytest.raises(ValueError, match=both):
        la.optimize_prior_precision(diagonal=True, method="gridsearch", validation=(X, Y))
    diag = (r"^diagonal prior precisions need hessian_structure='diag' \(its evidence "
            r"separates by coordinate\), got 'full'$")  # fmt: skip
    with pytest.raises(ValueError, match=diag):
        la.optimize_prior_precision(diagonal=True)
    layers = (r"^layerwise prior precisions need a structure whose evidence separates by "
              r"parameter tensor \('diag' or 'kron'\), got 'full'$")  # fmt: skip
    with pytest.raises(ValueError, match=layers):
        la.optimize_prior_precision(layerwise=True)
    with pytest.raises(ValueError, match=r"^validation and grid are for method='gridsearch'$"):
        la.optimize_prior_precision(grid=[1.0])


def test_bad_prior_precisions_are_refused_by_their_whole_message():
    la = _fitted("kron", [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match=r"^prior_precision must be a float, one per Bayesian "
                       r"parameter tensor \(2: weight, bias\) or one per Bayesian coordinate "
                       r"\(3\), got 4 values$"):  # fmt: skip
        la.log_marginal_likelihood([1.0] * 4)
    with pytest.raises(ValueError, match=r"^hessian_structure='kron' takes one prior precision "
                       r"per parameter tensor \(2\), not one per coordinate$"):  # fmt: skip
        la.log_marginal_likelihood([1.0] * 3)
    for bad in (0.0, [1.0, 0.0], -1.0):
        with pytest.raises(ValueError, match=r"^prior_precision"):
            la.log_marginal_likelihood(bad)


def test_the_held_out_criterion_is_the_linear_gaussian_predictive_density():
    """Two held-out rows: ``mean log N(y; x̃ θ*, x̃ (H + λ I)⁻¹ x̃ᵀ + σ²)`` with ``H = 32 I``:
    the variance ``‖x̃‖² / (32 + λ) + 1/4``; the fitted λ is left as it was."""
    la = _fitted("full", [1.0, 1.0, 1.0])
    la.prior_precision = 7.0
    xv = torch.tensor([[0.5, 2.0], [-1.0, 0.0]], dtype=F64)
    yv = torch.tensor([1.0, -2.0], dtype=F64)
    mean = la.model(xv).detach()[:, 0]
    var = ((xv**2).sum(1) + 1) / (32 + 2.0) + SIGMA**2
    expected = (-0.5 * ((yv - mean) ** 2 / var + var.log() + math.log(2 * math.pi))).mean()
    assert la.validation_log_likelihood(xv, yv, 2.0) == pytest.approx(float(expected), rel=1e-10)
    assert la.prior_precision == 7.0
    with pytest.raises(ValueError, match=r"^y must have 2 rows \(len\(x\)\), got shape \(1,\)$"):
        la.validation_log_likelihood(xv, yv[:1])


def test_the_held_out_criterion_of_a_classifier_is_the_probit_softmax():
    """A linear classifier on two rows: ``log softmax(f / sqrt(1 + π/8 · var))[y]`` with
    ``var = diag(J Σ Jᵀ)`` the GLM variance at λ = 0.5 (its own tests:
    test_laplace_predictive_values.py); the fitted λ (9) is not the one scored."""
    torch.manual_seed(0)
    net = nn.Linear(2, 3).double()
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(12, 2, generator=g, dtype=F64), torch.randint(0, 3, (12,), generator=g)
    la = bp.LaplaceApproximation(net, "classification", hessian_structure="full")
    la.fit(x, y, epochs=0, progress=False)
    xv, yv = x[:2], torch.tensor([2, 0])
    la.prior_precision = 0.5
    var = la.glm_variance(xv)
    logits = net(xv).detach() / torch.sqrt(1 + math.pi / 8 * var)
    expected = torch.log_softmax(logits, -1)[torch.arange(2), yv].mean()
    la.prior_precision = 9.0
    assert la.validation_log_likelihood(xv, yv, 0.5) == pytest.approx(float(expected), rel=1e-10)


def _scores(la, xv, yv, grid):
    return [la.validation_log_likelihood(xv, yv, v) for v in grid]


def test_the_default_grid_runs_from_1e_minus_4_to_1e4():
    """Held-out targets on the mean exactly: the smallest variance, the largest λ, scores best
    (1e4); targets far off: the largest variance, the smallest λ (1e-4)."""
    la = _fitted("full", [1.0, 1.0, 1.0])
    xv = torch.tensor([[3.0, -2.0], [1.0, 4.0]], dtype=F64)
    on = la.model(xv).detach()[:, 0]
    assert la.optimize_prior_precision(method="gridsearch", validation=(xv, on)) == pytest.approx(
        1e4
    )
    off = on + 100.0
    got = la.optimize_prior_precision(method="gridsearch", validation=(xv, off))
    assert got == pytest.approx(1e-4) and la.prior_precision == got
    # and in between, the default grid's steps of 10**0.4: its own best of the 21 values
    grid = [10.0 ** (k / 2.5) for k in range(-10, 11)]
    mid = on + 0.6  # var = 1/4 + ‖x̃‖² / (32 + λ) = 0.36 near λ = 100: inside the grid
    scores = _scores(la, xv, mid, grid)
    best = grid[scores.index(max(scores))]
    assert 1e-4 < best < 1e4
    assert la.optimize_prior_precision(method="gridsearch", validation=(xv, mid)) == pytest.approx(
        best
    )


def test_an_empty_grid_is_refused_by_its_whole_message():
    la = _fitted("full", [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match=r"^grid must hold at least one prior precision$"):
        la.optimize_prior_precision(method="gridsearch", validation=(X, Y), grid=[])
    with pytest.raises(ValueError, match=r"^method='gridsearch' needs validation=\(x, y\), the "
                       r"held-out rows$"):  # fmt: skip
        la.optimize_prior_precision(method="gridsearch", validation=(X,))
    with pytest.raises(ValueError, match=r"^method='gridsearch' searches one scalar λ: use "
                       r"layerwise=False$"):  # fmt: skip
        la.optimize_prior_precision(method="gridsearch", layerwise=True, validation=(X, Y))


def test_a_grid_value_that_is_no_prior_precision_is_refused_by_its_whole_message():
    la = _fitted("full", [1.0, 1.0, 1.0])
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError, match=rf"^grid must be a finite float > 0\.0, got {bad}$"):
            la.optimize_prior_precision(method="gridsearch", validation=(X, Y), grid=[1.0, bad])


def test_a_prior_per_tensor_enters_the_precision_in_the_means_dtype():
    """``X̃ᵀ X̃ / σ² + diag(0.1, 0.1, 0.3) = diag(32.1, 32.1, 32.3)`` in float64 (0.1 through
    float32 would be 0.10000000149: 5e-11 off)."""
    la = _fitted("full", [1.0, 1.0, 1.0])
    la.prior_precision = (0.1, 0.3)
    expected = torch.diag(torch.tensor([32.1, 32.1, 32.3], dtype=F64))
    torch.testing.assert_close(la.posterior_precision, expected, rtol=0, atol=1e-14)


def test_the_held_out_criterion_sums_the_outputs_of_a_row():
    """Two outputs on the orthogonal design: ``H = 32 I`` for each output's weights and bias,
    so each output's variance is ``‖x̃‖² / (32 + λ) + σ²``; the criterion is the mean over the
    rows of the sum over the outputs."""
    torch.manual_seed(0)
    net = nn.Linear(2, 2).double()
    la = bp.LaplaceApproximation(net, "regression", hessian="ggn", hessian_structure="full",
                                 noise_scale=SIGMA)  # fmt: skip
    la.fit(X, torch.stack([Y, -Y], 1), epochs=0, progress=False)
    xv = torch.tensor([[0.5, 2.0], [-1.0, 0.0], [1.0, 1.0]], dtype=F64)
    yv = torch.tensor([[1.0, 0.0], [-2.0, 1.0], [0.5, 0.5]], dtype=F64)
    mean = net(xv).detach()
    var = (((xv**2).sum(1) + 1) / (32 + 2.0) + SIGMA**2).unsqueeze(1)
    dens = -0.5 * ((yv - mean) ** 2 / var + var.log() + math.log(2 * math.pi))
    expected = float(dens.sum(1).mean())
    assert la.validation_log_likelihood(xv, yv, 2.0) == pytest.approx(expected, rel=1e-10)
