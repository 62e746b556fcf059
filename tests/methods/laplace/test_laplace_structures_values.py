"""The diagonal and full Hessian structures called directly, against dense references built
here: the zero curvature's shape, the precision with λ = 0.1 (not a float32 number) or a λ
vector of another dtype, the functional variance ``diag(J Σ Jᵀ)``, the draws as the documented
transform of normal draws, and the layer path's refusal by its whole message."""

from __future__ import annotations

import pytest
import torch

from bnn_pyro.methods.laplace.structures import DiagonalHessian, FullHessian

F64 = torch.float64


def _spd(p: int = 4) -> torch.Tensor:
    """A random symmetric positive definite ``(p, p)`` curvature (float64)."""
    m = torch.randn(p, p, generator=torch.Generator().manual_seed(0), dtype=F64)
    return m @ m.T + 0.5 * torch.eye(p, dtype=F64)


def test_the_full_curvature_starts_as_a_square_of_zeros():
    h = FullHessian().zeros(3, torch.zeros(1, dtype=F64))
    assert h.shape == (3, 3) and h.dtype == F64 and not h.any()


def test_the_full_precision_adds_lambda_in_the_curvatures_precision():
    """``H + 0.1 I`` to float64 round-off (an identity in float32 would add 0.1 rounded to
    float32, 1.5e-9 off); a float64 λ vector on a float32 ``H`` is taken in ``H``'s dtype."""
    h = _spd()
    got = FullHessian().precision(h, 0.1)
    torch.testing.assert_close(got, h + torch.diag(torch.full((4,), 0.1, dtype=F64)),
                               rtol=0, atol=1e-15)  # fmt: skip
    lam = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=F64)
    single = FullHessian().precision(h.float(), lam)
    assert single.dtype == torch.float32
    torch.testing.assert_close(single, (h + torch.diag(lam)).float())


@pytest.mark.parametrize("structure", [DiagonalHessian(), FullHessian()])
def test_the_functional_variance_is_the_diagonal_of_j_sigma_jt(structure):
    """``diag(J Σ Jᵀ)`` per row and output, ``Σ = (H + λ I)⁻¹`` inverted densely here (the
    diagonal structure: ``H``'s diagonal only). float64: 1e-12 is round-off."""
    h = _spd()
    if isinstance(structure, DiagonalHessian):
        h, dense = h.diagonal().clone(), torch.diag(h.diagonal())
    else:
        dense = h
    sigma = torch.linalg.inv(dense + 0.3 * torch.eye(4, dtype=F64))
    jac = torch.randn(5, 2, 4, generator=torch.Generator().manual_seed(1), dtype=F64)
    expected = torch.einsum("bop,pq,boq->bo", jac, sigma, jac)
    got = structure.functional_variance(h, 0.3, jac)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


def test_diagonal_draws_are_the_mean_plus_scaled_normals():
    """``θ = θ* + z / sqrt(h + λ)``, ``z`` standard normal in the mean's dtype: the same normal
    draws (same seed) give the same θ to round-off."""
    h = torch.tensor([0.5, 2.0, 8.0], dtype=F64)
    mean = torch.tensor([1.0, -1.0, 0.25], dtype=F64)
    torch.manual_seed(3)
    draws = DiagonalHessian().sample(mean, h, 0.5, 6)
    torch.manual_seed(3)
    z = torch.randn(6, 3, dtype=F64)
    torch.testing.assert_close(draws, mean + z / (h + 0.5).sqrt(), rtol=1e-12, atol=1e-14)


def test_full_draws_are_the_mean_plus_the_inverse_transposed_cholesky_factor_of_normals():
    """With ``H + λ I = L Lᵀ``, ``θ = θ* + L⁻ᵀ z`` (covariance ``L⁻ᵀ L⁻¹ = (H + λ I)⁻¹``),
    ``z`` standard normal in the mean's dtype: the same normal draws (same seed) give the same
    θ, the solve done here by an explicit inverse (1e-10)."""
    h = _spd()
    mean = torch.linspace(-1.0, 1.0, 4, dtype=F64)
    torch.manual_seed(4)
    draws = FullHessian().sample(mean, h, 0.2, 5)
    torch.manual_seed(4)
    z = torch.randn(5, 4, dtype=F64)
    chol = torch.linalg.cholesky(h + 0.2 * torch.eye(4, dtype=F64))
    torch.testing.assert_close(draws, mean + z @ torch.linalg.inv(chol), rtol=1e-10, atol=1e-12)


def test_the_layer_path_of_the_diagonal_needs_the_shapes():
    s = DiagonalHessian()
    message = r"^DiagonalHessian\.add_layer_ggn needs the parameters' shapes$"
    with pytest.raises(TypeError, match=message):
        s.add_layer_ggn(s.zeros(3, torch.zeros(1)), {}, {}, torch.ones(1, 1), False)
