"""Conformalized quantile regression's small contracts pinned by value: the crossing band's
midpoint, a saved state read back, each refusal's whole message and the interval's dtype."""

from __future__ import annotations

import pytest
import torch

from bnn_pyro.calibration import QuantileConformal
from bnn_pyro.exceptions import NotFittedError

ALPHA_MESSAGE = r"^alpha must be a finite float in \(0.0, 1.0\), got {}$"


class _Unit:
    """A one-sample predictive N(3 x, 1) in the input's dtype."""

    def predictive_gaussian(self, x: torch.Tensor, **_: object):
        return (3 * x[:, :1]).unsqueeze(0), torch.ones((), dtype=x.dtype)


def test_a_band_narrowed_past_crossing_is_its_midpoint():
    """A correction of -10 would turn the band [3x - 1.64, 3x + 1.64] inside out: both ends
    are its midpoint 3x instead (x = 2: 6; x = -1: -3)."""
    cqr = QuantileConformal(_Unit(), alpha=0.1)
    state = {"alpha": 0.1, "scores": torch.zeros(20, 1), "correction": torch.tensor([-10.0])}
    cqr.restore_calibrator_state(state)
    lower, upper = cqr.predict_interval(torch.tensor([[2.0], [-1.0]]))
    assert lower.tolist() == upper.tolist() == [[6.0], [-3.0]]


def test_the_state_reads_back_and_the_interval_keeps_the_inputs_dtype():
    """Calibrated in float64 (targets 3x + 2: every score is 2 - 1.645 = 0.355), restored into a
    fresh calibrator and used on float32 rows: the same scores and correction, float32 bounds."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 1, generator=g, dtype=torch.float64)
    cqr = QuantileConformal(_Unit(), alpha=0.1)
    assert cqr.scores is None and cqr.correction is None
    cqr.calibrate(x, 3 * x[:, 0] + 2)
    state = cqr.calibrator_state()
    assert torch.equal(state["scores"], cqr.scores) and torch.equal(
        state["correction"], cqr.correction
    )
    assert float(cqr.correction) == pytest.approx(2 - 1.6448536269514722, abs=1e-9)
    back = QuantileConformal(_Unit(), alpha=0.5)
    back.restore_calibrator_state(state)
    assert back.alpha == 0.1 and torch.equal(back.scores, cqr.scores)
    lower, upper = back.predict_interval(torch.zeros(2, 1, dtype=torch.float32))
    assert lower.dtype == upper.dtype == torch.float32
    assert upper[0, 0].item() == pytest.approx(2.0, abs=1e-6)  # 1.645 + 0.355


def test_bad_alpha_is_refused_by_name_when_built_and_when_restored():
    for bad in (0.0, -0.5, 1.0, 1.5):
        with pytest.raises(ValueError, match=ALPHA_MESSAGE.format(bad)):
            QuantileConformal(_Unit(), alpha=bad)
        with pytest.raises(ValueError, match=ALPHA_MESSAGE.format(bad)):
            QuantileConformal(_Unit()).restore_calibrator_state(
                {"alpha": bad, "scores": None, "correction": None}
            )
    message = r"^QuantileConformal is not calibrated: call calibrate\(\) first$"
    with pytest.raises(NotFittedError, match=message):
        QuantileConformal(_Unit()).predict_interval(torch.zeros(1, 1))
