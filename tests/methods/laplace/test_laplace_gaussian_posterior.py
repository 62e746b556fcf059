"""The Laplace evidence and its maximisers in λ (``gaussian_posterior``) against closed forms:
the log-evidence written out, the scalar maximiser as the root of a quadratic (one eigenvalue)
or by SciPy's root finder, the bounds returned exactly where the maximum lies on them, and the
diagonal maximiser clipped to its bounds."""

from __future__ import annotations

import math
import re

import pytest
import torch

from bnn_pyro.methods.laplace.gaussian_posterior import (
    log_evidence,
    optimal_diagonal_prior_precision,
    optimal_prior_precision,
)

F64 = torch.float64


def test_the_log_evidence_is_its_formula_written_out():
    """``log p(D|θ*) - λ/2 ‖θ*‖² + P/2 log λ - 1/2 Σ log(e_i + λ)``, at ``log p = -3.2``,
    ``θ* = (1, -2)``, ``e = (0.5, 4)``, ``λ = 0.7`` (float64: 1e-12 is round-off)."""
    value = log_evidence(-3.2, torch.tensor([1.0, -2.0]), torch.tensor([0.5, 4.0], dtype=F64), 0.7)
    expected = -3.2 - 0.35 * 5 + math.log(0.7) - 0.5 * (math.log(1.2) + math.log(4.7))
    assert abs(float(value) - expected) < 1e-12


@pytest.mark.parametrize(
    ("theta2", "e", "bounds"),
    [(1.0, 1.0, (0.5, 10.0)), (0.25, 3.0, (1e-8, 1e8)), (4.0, 0.2, (1e-3, 0.3))],
)
def test_one_eigenvalue_gives_the_root_of_a_quadratic(theta2, e, bounds):
    """One eigenvalue ``e``: the slope ``e / (λ (e + λ)) - θ²`` vanishes at the positive root
    of ``θ² λ² + θ² e λ - e = 0``, ``λ = (-θ² e + sqrt(θ⁴ e² + 4 θ² e)) / (2 θ²)``; the first
    case has its root close to the lower bound (the slope there is below 1, not below 0).
    Bisection to 200 halvings: 1e-12 relative is round-off."""
    root = (-theta2 * e + math.sqrt(theta2**2 * e**2 + 4 * theta2 * e)) / (2 * theta2)
    assert bounds[0] < root < bounds[1]
    lam = optimal_prior_precision(
        torch.tensor([math.sqrt(theta2)]), torch.tensor([e], dtype=F64), bounds
    )
    assert math.isclose(lam, root, rel_tol=1e-12)


def test_several_eigenvalues_give_scipys_root_of_the_slope():
    """The maximiser is the root of ``Σ_i e_i / (λ (e_i + λ)) - ‖θ*‖²`` (Brent's method on
    ``log λ``, to 1e-14 there: 1e-10 relative is far above both methods' error)."""
    optimize = pytest.importorskip("scipy.optimize", reason="SciPy is not installed")
    e = torch.tensor([0.0, 0.3, 2.0, 50.0, 1e4], dtype=F64)
    mean = torch.tensor([0.4, -0.3, 0.2, 0.1])

    def slope(log_lam):
        lam = math.exp(log_lam)
        return sum(v / (lam * (v + lam)) for v in e.tolist()) - float((mean.double() ** 2).sum())

    expected = math.exp(optimize.brentq(slope, math.log(1e-8), math.log(1e8), xtol=1e-14))
    assert math.isclose(optimal_prior_precision(mean, e, (1e-8, 1e8)), expected, rel_tol=1e-10)


def test_a_maximum_beyond_a_bound_is_that_bound_exactly():
    """``θ* = 0``: the evidence rises for ever, so λ is the upper bound, ``1e8`` itself (not
    ``exp(log(1e8)) = 1e8 + 2e-7``, outside the bounds); a huge ``θ*``: the lower bound."""
    e = torch.tensor([1.0, 2.0], dtype=F64)
    assert optimal_prior_precision(torch.zeros(3), e, (1e-8, 1e8)) == 1e8
    assert optimal_prior_precision(torch.full((3,), 1e6), e, (1e-8, 1e8)) == 1e-8


def _flat_at(lam):
    """``(mean, eigenvalues)`` whose slope is exactly ``0.0`` in floating point at ``lam``:
    ``θ² = e / (lam (e + lam))`` for the first ``e`` whose square root squares back exactly."""
    for e in (1.0, 2.0, 3.0, 5.0, 6.0, 7.0, 0.5, 0.25, 10.0, 12.0):
        target = e / (lam * (e + lam))
        mean = torch.tensor([math.sqrt(target)], dtype=F64)
        if float((mean**2).sum()) == target:
            return mean, torch.tensor([e], dtype=F64)
    raise AssertionError("no exact construction")


def test_a_maximum_exactly_on_a_bound_is_that_bound():
    """The slope exactly 0 at the bound (evaluated where the search evaluates it,
    ``exp(log(3))``, which is not 3): the maximiser is the bound, returned as given."""
    lam = math.exp(math.log(3.0))
    assert lam != 3.0
    mean, e = _flat_at(lam)
    assert optimal_prior_precision(mean, e, (3.0, 50.0)) == 3.0
    assert optimal_prior_precision(mean, e, (0.1, 3.0)) == 3.0


def test_the_diagonal_maximiser_is_clipped_to_its_bounds():
    """Per coordinate the root ``2h / (θ² h + sqrt(θ⁴ h² + 4 θ² h))``: ``θ = 1, h = 1e-12``
    gives about 1e-6, below the lower bound 1e-3; ``θ = 1e-3, h = 1e6`` gives ``2e6 / (1 +
    sqrt 5)``, about 6.2e5, above the upper bound 1e3; ``θ = 1, h = 1`` the golden ratio's
    ``(√5 - 1) / 2`` inside them (1e-12: round-off)."""
    lam = optimal_diagonal_prior_precision(
        torch.tensor([1.0, 1e-3, 1.0], dtype=F64),
        torch.tensor([1e-12, 1e6, 1.0], dtype=F64),
        (1e-3, 1e3),
    )
    assert lam[0] == 1e-3 and lam[1] == 1e3
    assert math.isclose(float(lam[2]), (math.sqrt(5) - 1) / 2, rel_tol=1e-12)


@pytest.mark.parametrize("bounds", [(0.0, 1.0), (1.0, 1.0), (2.0, 1.0), (-1.0, 1.0)])
def test_the_diagonal_maximiser_needs_zero_below_low_below_high(bounds):
    """``0 < low < high`` strictly: a zero lower bound and equal bounds are refused too."""
    message = (
        r"^bounds must be \(low, high\) with 0 < low < high, got " + re.escape(str(bounds)) + "$"
    )
    with pytest.raises(ValueError, match=message):
        optimal_diagonal_prior_precision(torch.ones(2), torch.ones(2), bounds)


def test_the_smallest_legal_bounds_are_accepted():
    """Just above zero and just apart: accepted, every λ inside them."""
    low, high = 1e-300, math.nextafter(1e-300, 1.0)
    lam = optimal_diagonal_prior_precision(torch.ones(2), torch.ones(2), (low, high))
    assert ((lam >= low) & (lam <= high)).all()
