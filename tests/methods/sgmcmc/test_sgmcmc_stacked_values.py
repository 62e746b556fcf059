"""The stacked SG-MCMC potential's check and terms, value by value.

:meth:`StackedPotential.agrees` is read against its documented tolerances (the value to
``1e-5`` relative to ``max(1, |U|)``, the gradient to ``1e-4`` of its largest entry plus
``1e-4`` relative) on hand-made values whose distance from the bound is worked out below;
:meth:`StackedPotential.gradient` and :func:`fit_stacked_sgmcmc` against each chain's Pyro
potential and its own ``fit``.
"""

from __future__ import annotations

import math

import pytest
import torch

from bnn_pyro.methods.sgmcmc.stacked import StackedPotential

F64 = torch.float64


class _Fixed:
    """A chain's potential whose ``gradient`` returns a fixed ``(U, ∇U / N)``."""

    def __init__(self, value: float, grad: list[float]) -> None:
        self.value, self.grad = value, torch.tensor(grad, dtype=F64)

    def gradient(self, theta, x, y, dataset_size):
        return self.value, self.grad


def _checked(stacked_values, stacked_grads, chains):
    """A ``StackedPotential`` whose own ``gradient`` gives ``(stacked_values, stacked_grads)``
    and whose chains' potentials are ``chains`` (``agrees`` reads nothing else)."""
    stacked = StackedPotential.__new__(StackedPotential)
    values = torch.tensor(stacked_values, dtype=F64)
    grads = torch.tensor(stacked_grads, dtype=F64)
    stacked.gradient = lambda theta, x, y, n: (values, grads)
    stacked.potentials = chains
    theta = torch.zeros(len(chains), grads.shape[1], dtype=F64)
    return stacked.agrees(theta, theta, theta, 10)


def test_equal_potentials_agree():
    """Exactly the chains' own values and gradients: ``None``."""
    chains = [_Fixed(2.0, [1.0, -3.0]), _Fixed(5.0, [0.5, 0.25])]
    assert _checked([2.0, 5.0], [[1.0, -3.0], [0.5, 0.25]], chains) is None


@pytest.mark.parametrize(
    ("stacked", "own", "agree"),
    [
        (1e-5, 0.0, True),  # |ΔU| = 1e-5 = 1e-5 * max(1, 0): on the bound, which is inclusive
        (1.5e-5, 0.0, False),  # past 1e-5 * max(1, 0), inside 1e-5 * max(2, 0)
        (0.5, 0.0, False),  # far past 1e-5, inside 1.00001 * max(1, 0)
        (1000.009, 1000.0, True),  # 9e-3 <= 1e-5 * 1000 = 1e-2: relative to |U| past 1
        (1000.011, 1000.0, False),  # 1.1e-2 > 1e-2
    ],
)
def test_the_value_is_checked_to_1e5_of_max_1_and_u(stacked, own, agree):
    """The value's bound ``|ΔU| <= 1e-5 max(1, |U|)`` on both sides (the gradients equal)."""
    reason = _checked([stacked], [[1.0, 2.0]], [_Fixed(own, [1.0, 2.0])])
    assert (reason is None) is agree
    if not agree:
        assert reason == (
            "the stacked potential of chain 1 differs from its Pyro model's (a prior, "
            "likelihood or layer it does not cover)"
        )


@pytest.mark.parametrize(
    ("stacked", "own", "agree"),
    [
        # atol = 1e-4 * max|g| = 1e-2 here: 5e-3 off a zero entry is inside it, and would not
        # be inside 1e-4 / max|g| = 1e-6
        ([100.0, 5e-3], [100.0, 0.0], True),
        ([100.0, 2e-2], [100.0, 0.0], False),  # 2e-2 > 1e-2 (+ rtol * 0)
        # max|g| = 1: atol 1e-4, so 0.5 off is out (it would be inside an atol of 1.0001)
        ([1.0, 0.5], [1.0, 0.0], False),
        # 1.5e-4 off the largest entry 1: past atol 1e-4 alone, inside atol + rtol * 1 = 2e-4
        ([1.0 + 1.5e-4, 0.0], [1.0, 0.0], True),
        ([1.0 + 2.5e-4, 0.0], [1.0, 0.0], False),  # past 2e-4
        ([1.5, 0.0], [1.0, 0.0], False),  # 0.5 off: out (inside an rtol of 1.0001)
        # max|g| = 1e-3: atol 1e-7 (the clamp at 1e-6 does not bite); 5e-5 off a zero entry is
        # out, though inside an atol of 1e-4 * 1.000001 (a clamp at 1.000001)
        ([1e-3, 5e-5], [1e-3, 0.0], False),
        # an all-zero gradient: atol 1e-4 * 1e-6 = 1e-10; 5e-11 off is in, 2e-10 out
        ([0.0, 5e-11], [0.0, 0.0], True),
        ([0.0, 2e-10], [0.0, 0.0], False),
    ],
)
def test_the_gradient_is_checked_to_1e4_of_its_largest_entry(stacked, own, agree):
    """The gradient's bound ``|Δg| <= 1e-4 max(max|g|, 1e-6) + 1e-4 |g|`` (the values equal):
    each case's margin to the bound is a factor of two or more, far above float64 round-off
    (about 1e-16 relative)."""
    reason = _checked([3.0], [stacked], [_Fixed(3.0, own)])
    assert (reason is None) is agree


def test_a_value_that_differs_with_an_equal_gradient_is_refused():
    """Both the value and the gradient must agree: an equal gradient does not excuse a value
    0.1 off."""
    reason = _checked([3.1], [[1.0, 2.0]], [_Fixed(3.0, [1.0, 2.0])])
    assert reason is not None and "chain 1 differs" in reason


def test_a_diverging_chain_is_left_to_the_run_and_the_next_chain_still_checked():
    """A chain whose own potential is not finite is skipped (the run's first step names it),
    and the check goes on to the chains after it: chain 3 differs and is named."""
    chains = [
        _Fixed(1.0, [1.0, 1.0]),
        _Fixed(math.inf, [1.0, 1.0]),
        _Fixed(1.0, [1.0, 1.0]),
    ]
    reason = _checked([1.0, 7.0, 1.5], [[1.0, 1.0], [9.0, 9.0], [1.0, 1.0]], chains)
    assert reason is not None and "chain 3 differs" in reason
    chains[1] = _Fixed(1.0, [math.nan, 1.0])  # a gradient that is not finite: skipped too
    reason = _checked([1.0, 7.0, 1.5], [[1.0, 1.0], [9.0, 9.0], [1.0, 1.0]], chains)
    assert reason is not None and "chain 3 differs" in reason
    # the skipped chain alone differing: nothing to refuse
    assert _checked([1.0, 7.0, 1.0], [[1.0, 1.0], [9.0, 9.0], [1.0, 1.0]], chains) is None


@pytest.mark.parametrize("error", [RuntimeError, ValueError, IndexError, TypeError, KeyError])
def test_a_stacked_potential_that_fails_is_named_with_its_error(error):
    """An error of the stacked potential itself is a reason (with its type and message), not a
    crash: these models cannot run stacked."""
    stacked = StackedPotential.__new__(StackedPotential)

    def fails(theta, x, y, n):
        raise error("no such layer")

    stacked.gradient = fails
    stacked.potentials = [_Fixed(1.0, [1.0])]
    reason = stacked.agrees(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1, 1), 4)
    shown = "'no such layer'" if error is KeyError else "no such layer"
    assert reason == (f"the stacked potential fails on these models ({error.__name__}: {shown})")
