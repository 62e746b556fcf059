"""Interval metrics against closed forms."""

from __future__ import annotations

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
