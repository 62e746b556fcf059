"""The probit approximation's values to round-off: the variance against Owen's T function (an
independent closed form of the bivariate normal CDF on its diagonal), one-dimensional inputs,
and the refusal's whole message."""

from __future__ import annotations

import math
import re

import pytest
import torch

from bnn_pyro.methods.laplace.probit import probit_moments


def test_the_probit_variance_is_owens_closed_form_to_round_off():
    """With ``h = Φ⁻¹(p)`` and ``ρ = a²v / (1 + a²v)``, ``a² = π/8``, the variance is
    ``Φ₂(h, h; ρ) - p²``, and on the diagonal ``Φ₂(h, h; ρ) = Φ(h) - 2 T(h, sqrt((1 - ρ) /
    (1 + ρ)))`` with ``T`` Owen's T function (Owen 1956), which SciPy evaluates to about 1e-16.
    The 32-node quadrature agrees to about 1e-15 in float64 (the module's own claim); 1e-12
    absolute leaves room for round-off in ``Φ⁻¹`` and is far below any change in the nodes,
    the weights or their precision (float32 nodes are off by about 1e-8). Three classes on a
    ``(2, 2, 3)`` batch: each class's variance uses its own ``v``."""
    special = pytest.importorskip("scipy.special", reason="SciPy is not installed (the dev extra)")
    logits = torch.tensor(
        [[[2.0, -1.0, 0.3], [0.0, 4.0, -2.5]], [[-3.0, 1.0, 1.0], [0.7, 0.1, -0.4]]],
        dtype=torch.float64,
    )
    variance = torch.tensor(
        [[[0.5, 3.0, 0.01], [10.0, 1.0, 0.2]], [[40.0, 0.0, 2.0], [1.5, 7.0, 0.3]]],
        dtype=torch.float64,
    )
    probs, var = probit_moments(logits, variance)
    a2 = math.pi / 8
    expected = torch.softmax(logits / torch.sqrt(1 + a2 * variance), dim=-1)
    torch.testing.assert_close(probs, expected, rtol=0, atol=1e-14)
    for p, v, got in zip(probs.flatten(), variance.flatten(), var.flatten(), strict=True):
        p, v = float(p), float(v)
        rho = a2 * v / (1 + a2 * v)
        h = float(special.ndtri(p))
        bvn = p - 2 * float(special.owens_t(h, math.sqrt((1 - rho) / (1 + rho))))
        assert abs(float(got) - (bvn - p * p)) < 1e-12, (p, v)


def test_at_even_odds_the_variance_is_the_arcsine_law():
    """Two equal logits of equal variance ``v``: ``p = 1/2``, ``h = 0``, and Sheppard's formula
    ``Φ₂(0, 0; ρ) = 1/4 + asin(ρ) / 2π`` leaves ``asin(ρ) / 2π`` (1e-14: round-off)."""
    for v in (0.1, 1.0, 25.0):
        probs, var = probit_moments(
            torch.zeros(1, 2, dtype=torch.float64), torch.full((1, 2), v, dtype=torch.float64)
        )
        rho = (math.pi / 8 * v) / (1 + math.pi / 8 * v)
        assert probs.tolist() == [[0.5, 0.5]]
        assert all(abs(x - math.asin(rho) / (2 * math.pi)) < 1e-14 for x in var[0].tolist())


def test_a_single_vector_of_logits_is_one_row():
    """``(C,)`` is ``(..., C)`` with no batch: the same numbers as the ``(1, C)`` row."""
    logits = torch.tensor([1.0, -0.5, 0.2], dtype=torch.float64)
    variance = torch.tensor([2.0, 0.3, 5.0], dtype=torch.float64)
    probs, var = probit_moments(logits, variance)
    row_probs, row_var = probit_moments(logits[None], variance[None])
    assert probs.shape == var.shape == (3,)
    torch.testing.assert_close(probs, row_probs[0], rtol=0, atol=0)
    torch.testing.assert_close(var, row_var[0], rtol=0, atol=0)


@pytest.mark.parametrize(
    ("logits", "variance"),
    [((2, 3), (2, 2)), ((2, 1), (2, 1)), ((), ()), ((3, 2), (2, 3))],
    ids=["shapes differ", "one class", "scalar", "transposed"],
)
def test_the_refusal_names_both_shapes(logits, variance):
    """The whole message, shapes as tuples (``(3, 2)`` against ``(2, 3)``: same size, refused)."""
    message = (
        r"^logits and variance must have one shape \(\.\.\., C\) with C >= 2 classes, got "
        + re.escape(f"{logits} and {variance}")
        + "$"
    )
    with pytest.raises(ValueError, match=message):
        probit_moments(torch.zeros(logits), torch.ones(variance))


def test_two_classes_are_enough():
    """``C = 2``, the smallest legal width, in a ``(1, 2)`` batch whose first dimension is 1
    (the class count is read from the last dimension, not another)."""
    probs, var = probit_moments(torch.tensor([[0.0, 0.0]]), torch.tensor([[1.0, 1.0]]))
    assert probs.tolist() == [[0.5, 0.5]]
    assert var.shape == (1, 2)


def test_float32_logits_give_float32_moments():
    """The quadrature's nodes and weights follow the logits' dtype: single precision in, single
    precision out (the variance not promoted to float64 by the float64 nodes), and its value
    the float64 computation's to float32 round-off (1e-6 on numbers at most 1/4)."""
    logits = torch.tensor([[1.0, -0.5, 0.2], [3.0, 0.0, -1.0]])
    variance = torch.tensor([[2.0, 0.3, 5.0], [0.1, 9.0, 1.0]])
    probs, var = probit_moments(logits, variance)
    assert probs.dtype == var.dtype == torch.float32
    probs64, var64 = probit_moments(logits.double(), variance.double())
    torch.testing.assert_close(var, var64.float(), rtol=0, atol=1e-6)
    torch.testing.assert_close(probs, probs64.float(), rtol=0, atol=1e-6)
