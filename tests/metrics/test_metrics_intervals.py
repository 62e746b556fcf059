"""Interval metrics against closed forms."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bnn_pyro.metrics import interval_score, mean_interval_width, picp


def test_the_interval_score_is_lowest_at_the_true_quantiles():
    """Gneiting & Raftery: the interval score is proper; for y ~ N(0, 1) the expected score of
    [-c, c] at alpha = 0.1 is lowest at c = z_0.95 = 1.645. With 200,000 draws the sampled
    score's error is about 0.01, far below the gap to c = 1.3 or 2.0 (about 0.07 and 0.09)."""
    y = torch.randn(200_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    scores = {
        c: interval_score(torch.full_like(y, -c), torch.full_like(y, c), y, alpha=0.1)
        for c in (1.3, 1.645, 2.0)
    }
    assert scores[1.645] < scores[1.3] - 0.03 and scores[1.645] < scores[2.0] - 0.03, scores


def test_coverage_and_width_by_hand():
    lower, upper = torch.tensor([[0.0, 1.0], [2.0, 3.0]]), torch.tensor([[1.0, 3.0], [2.0, 5.0]])
    y = torch.tensor([[0.0, 4.0], [2.0, 4.0]])
    assert picp(lower, upper, y) == 0.75  # the second row's first output: [2, 2] holds 2
    assert mean_interval_width(lower, upper) == 1.25


def test_bad_input_is_refused_by_name():
    with pytest.raises(ValueError, match="upper must be >= lower"):
        picp(torch.ones(2), torch.zeros(2), torch.zeros(2))
    with pytest.raises(ValueError, match="y must have the intervals' shape"):
        picp(torch.zeros(2), torch.ones(2), torch.zeros(3))
    with pytest.raises(ValueError, match="alpha"):
        interval_score(torch.zeros(2), torch.ones(2), torch.zeros(2), alpha=0.0)


def test_the_winkler_score_of_one_miss_below_and_one_above_by_hand():
    """alpha = 0.5, so a miss costs 2 / 0.5 = 4 per unit. Interval [0, 2] with y = -1 (1 below):
    2 + 4 * 1 = 6; interval [1, 2] with y = 3.5 (1.5 above): 1 + 4 * 1.5 = 7; y = 1 inside
    [0, 4]: 4. Mean (6 + 7 + 4) / 3 = 17 / 3."""
    lower, upper = torch.tensor([0.0, 1.0, 0.0]), torch.tensor([2.0, 2.0, 4.0])
    y = torch.tensor([-1.0, 3.5, 1.0])
    assert interval_score(lower, upper, y, alpha=0.5) == pytest.approx(17 / 3, rel=1e-15)


@pytest.mark.parametrize("alpha", [1.0, 1.5])
def test_alpha_must_lie_strictly_below_one(alpha):
    """A miss rate of 1 (or more) is no interval at all: refused, with the bounds named."""
    with pytest.raises(
        ValueError, match=rf"^alpha must be a finite float in \(0.0, 1.0\), got {alpha}$"
    ):
        interval_score(torch.zeros(2), torch.ones(2), torch.zeros(2), alpha=alpha)


def test_an_alpha_just_below_one_is_accepted():
    """alpha = 0.99 on [0, 1] with y inside: the score is the width, 1."""
    assert interval_score(torch.zeros(2), torch.ones(2), torch.full((2,), 0.5), alpha=0.99) == 1.0


@pytest.mark.parametrize("bad", ["lower", "upper", "y"])
def test_a_nan_is_refused_naming_its_argument(bad):
    args = {"lower": [0.0, 0.0], "upper": [1.0, 1.0], "y": [0.5, 0.5]}
    args[bad] = [0.0, float("nan")] if bad != "upper" else [1.0, float("nan")]
    with pytest.raises(ValueError, match=rf"^{bad} must be finite, got 1 NaN or infinite value"):
        picp(args["lower"], args["upper"], args["y"])


def test_mismatched_interval_ends_are_refused_with_both_shapes():
    with pytest.raises(
        ValueError, match=r"^lower and upper must have one shape, got \(2,\) and \(3,\)$"
    ):
        mean_interval_width(torch.zeros(2), torch.ones(3))
    with pytest.raises(
        ValueError, match=r"^upper must be >= lower everywhere \(an interval \[lower, upper\]\)$"
    ):
        mean_interval_width(torch.ones(2), torch.zeros(2))
    with pytest.raises(ValueError, match=r"^y must have the intervals' shape \(2,\), got \(3,\)$"):
        picp(torch.zeros(2), torch.ones(2), torch.zeros(3))


def test_boolean_and_integer_arrays_are_read_as_numbers():
    """0/1 indicators and integer arrays are numeric inputs: every function reads them as the
    floats 0.0 and 1.0 (or the integers' values). Widths of [False, True] and [True, True] are
    1 and 0 (mean 0.5); the integer intervals [0, 2], [1, 2] have widths 2 and 1 (mean 1.5);
    y = True (1) is inside [0, 1] and y = False (0) misses [1, 1] by 1 below, so at alpha = 0.5
    the score is (1 + (0 + 4 * 1)) / 2 = 2.5 and the coverage 1/2."""
    lower, upper = np.array([False, True]), np.array([True, True])
    y = np.array([True, False])
    assert mean_interval_width(lower, upper) == 0.5
    assert mean_interval_width([0, 1], [2, 2]) == 1.5
    assert picp(lower, upper, y) == 0.5
    assert interval_score(lower, upper, y, alpha=0.5) == 2.5
    assert interval_score([0.0, 1.0], [1.0, 1.0], y, alpha=0.5) == 2.5
