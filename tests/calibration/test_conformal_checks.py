"""Split conformal's small contracts pinned by value: the conformal rank at its edges, each
refusal's whole message, the options that reach the method, the interval's dtype and a saved
score's name read back."""

from __future__ import annotations

import math

import pytest
import torch

from bnn_pyro.calibration import SplitConformal, conformal_quantile
from bnn_pyro.exceptions import NotFittedError


class _Recording:
    """A predictive N(x, 1) that records the options each call gets, in the input's dtype."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def predictive_gaussian(self, x: torch.Tensor, **options: object):
        self.calls.append(options)
        return x[:, :1].unsqueeze(0), torch.full((), 2.0, dtype=x.dtype)


def test_one_row_is_enough_for_alpha_one_half():
    """n = 1, alpha = 0.5: the rank is ⌈2 × 0.5⌉ = 1, the one score itself."""
    assert conformal_quantile(torch.tensor([[3.0]]), 0.5).tolist() == [3.0]


def test_too_few_rows_are_refused_with_the_rows_alpha_needs():
    """alpha = 0.1 needs ⌈(n + 1) 0.9⌉ <= n, i.e. n >= 9 = ⌈0.9 / 0.1⌉: five rows are refused
    saying so, nine are enough (the 9th smallest of 1..9 is 9)."""
    message = (
        r"^5 calibration rows are too few for alpha=0.1: a guaranteed interval needs at least "
        r"9 rows \(or a larger alpha\)$"
    )
    with pytest.raises(ValueError, match=message):
        conformal_quantile(torch.arange(1.0, 6.0).unsqueeze(-1), 0.1)
    assert conformal_quantile(torch.arange(1.0, 10.0).unsqueeze(-1), 0.1).tolist() == [9.0]
    message = r"^5 calibration rows are too few for alpha=0.01: .* at least 99 rows"
    with pytest.raises(ValueError, match=message):
        conformal_quantile(torch.arange(1.0, 6.0).unsqueeze(-1), 0.01)


def test_bad_alpha_and_bad_scores_are_refused_by_name():
    scores = torch.arange(1.0, 20.0).unsqueeze(-1)
    for bad in (0.0, -0.5, 1.0):
        with pytest.raises(
            ValueError, match=rf"^alpha must be a finite float in \(0.0, 1.0\), got {bad}$"
        ):
            conformal_quantile(scores, bad)
    with pytest.raises(
        ValueError, match=r"^scores must have shape \(n, O\) with n >= 1, got \(0, 1\)$"
    ):
        conformal_quantile(torch.zeros(0, 1), 0.5)
    with pytest.raises(TypeError, match=r"^scores must be a torch.Tensor, got list"):
        conformal_quantile([[1.0]], 0.5)
    conformal = SplitConformal(_Recording())
    with pytest.raises(
        NotFittedError, match=r"^SplitConformal is not calibrated: call calibrate\(\) first$"
    ):
        conformal.quantile(0.1)
    conformal.scores = scores
    with pytest.raises(
        ValueError, match=r"^alpha must be a finite float in \(0.0, 1.0\), got 1.0$"
    ):
        conformal.quantile(1.0)


def test_the_options_reach_the_method_and_the_interval_keeps_its_dtype():
    """Calibrated on float64 rows, predicting on float32 ones: the interval is float32, and
    ``num_samples`` and ``seed`` reach the method both times."""
    method = _Recording()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(30, 1, generator=g, dtype=torch.float64)
    conformal = SplitConformal(method, num_samples=5, seed=2).calibrate(x, x[:, 0] + 1.0)
    lower, upper = conformal.predict_interval(x[:3].float(), alpha=0.5)
    assert method.calls == [{"num_samples": 5, "seed": 2}] * 2
    assert lower.dtype == upper.dtype == torch.float32
    # every normalised score is |1| / 2 = 0.5: the half-width is 0.5 × sd = 1
    assert torch.allclose(upper - lower, torch.full((3, 1), 2.0))


def test_a_restored_state_brings_its_score_and_a_bad_one_is_refused():
    """The absolute score's half-width is q itself (here 3), not q × sd (6)."""
    conformal = SplitConformal(_Recording())  # normalized by default
    conformal.restore_calibrator_state({"score": "absolute", "scores": torch.full((4, 1), 3.0)})
    assert conformal.score == "absolute"
    lower, upper = conformal.predict_interval(torch.zeros(2, 1), alpha=0.5)
    assert upper.tolist() == [[3.0], [3.0]] and lower.tolist() == [[-3.0], [-3.0]]
    message = r"^score must be one of \('absolute', 'normalized'\), got 'ranked'$"
    with pytest.raises(ValueError, match=message):
        conformal.restore_calibrator_state({"score": "ranked", "scores": None})


def test_the_interval_defaults_to_alpha_one_tenth():
    """Scores 1..19: alpha 0.1 takes the 18th (⌈20 × 0.9⌉), so the default's half-width is 18."""
    conformal = SplitConformal(_Recording(), score="absolute")
    conformal.scores = torch.arange(1.0, 20.0).unsqueeze(-1)
    lower, upper = conformal.predict_interval(torch.zeros(1, 1))
    assert (lower.item(), upper.item()) == (-18.0, 18.0)


def test_the_rows_a_refusal_asks_for_are_the_fewest_its_own_check_accepts():
    """alpha = 1/3: (1 - alpha) / alpha is 2.0000000000000004 in float64, but 2 rows pass
    (⌈3 × 2/3⌉ = 2): the message asks for 2, not 3. alpha = 1/49 needs 48 (⌈49 × 48/49⌉ = 48);
    a subnormal alpha gets a message, not an OverflowError."""
    for alpha, n, needed in (
        (1 / 3, 1, "2"),
        (1 / 49, 47, "48"),
        (5e-324, 3, "more than 2\\*\\*53"),
    ):
        with pytest.raises(ValueError, match=rf"interval needs at least {needed} rows"):
            conformal_quantile(torch.arange(1.0, n + 1.0).unsqueeze(-1), alpha)
    assert conformal_quantile(torch.tensor([[1.0], [2.0]]), 1 / 3).tolist() == [2.0]


def test_fewest_rows_counts_from_one_and_stops_at_two_to_the_53():
    """The conformal rank check ⌈(n + 1)(1 - alpha)⌉ <= n: alpha = 1/2 needs 1 row, 0.001
    needs 999; from (1 - alpha) / alpha = 2**53 exactly (alpha = 1 / (2**53 + 1)) on, and at
    1.35e16, the count is not searched (float64 no longer tells n from n + 1)."""
    from bnn_pyro.calibration.conformal import fewest_rows

    def conformal(alpha):
        return lambda n: math.ceil((n + 1) * (1 - alpha)) <= n

    assert fewest_rows(0.5, conformal(0.5)) == "1"
    assert fewest_rows(0.001, conformal(0.001)) == "999"
    for alpha in (1 / (2**53 + 1), 1 / (1.5 * 2**53)):
        assert fewest_rows(alpha, conformal(alpha)) == "more than 2**53"
