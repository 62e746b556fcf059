"""The isotonic recalibration on a handful of calibration rows, worked out by hand.

With ``n`` calibration rows the map's levels are multiples of ``1 / n``: a shift of one rank
(``(k - 1) / n`` or ``k / (n + 1)`` for ``k / n``) moves every level by up to ``1 / n``, which
5,000 rows hide inside a coverage test's sampling error but 5 or 6 rows do not.
"""

from __future__ import annotations

import pytest
import torch

from bnn_pyro.calibration import IsotonicRecalibration
from bnn_pyro.exceptions import NotFittedError


class _Shifted:
    """A predictive ``N(x, 0.5²)`` per row (one sample): ``z = (y - x) / 0.5``."""

    def predictive_gaussian(self, x: torch.Tensor, **_: object):
        return x[:, :1].unsqueeze(0).double(), torch.tensor(0.5, dtype=torch.float64)


def _fit(z: list[float]) -> IsotonicRecalibration:
    """Calibration rows whose standardised residuals are ``z`` (x = 1, y = 1 + 0.5 z)."""
    z_t = torch.tensor(z, dtype=torch.float64)
    x = torch.ones(len(z), 1, dtype=torch.float64)
    return IsotonicRecalibration(_Shifted()).fit(x, 1.0 + 0.5 * z_t)


def test_five_distinct_rows_give_the_levels_k_over_n():
    """z = 0.8, -1.2, 1.5, -0.3, 0.1: sorted -1.2 < -0.3 < 0.1 < 0.8 < 1.5, and the share of
    rows at or below the k-th is k / 5. Those shares already increase, so the isotonic fit keeps
    them. The map is linear between the points and held at the lowest z below them:

    * G⁻¹(0.5): between (-0.3, 0.4) and (0.1, 0.6), halfway: -0.1;
    * G⁻¹(0.3): between (-1.2, 0.2) and (-0.3, 0.4), halfway: -0.75;
    * G⁻¹(0.9): between (0.8, 0.8) and (1.5, 1.0), halfway: 1.15;
    * G⁻¹(0.1): below the lowest level 0.2: held at -1.2.
    """
    recal = _fit([0.8, -1.2, 1.5, -0.3, 0.1])
    assert recal.z.tolist() == pytest.approx([-1.2, -0.3, 0.1, 0.8, 1.5], abs=1e-12)
    assert recal.observed.tolist() == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0], abs=1e-12)
    quantiles = recal.standardized_quantile([0.5, 0.3, 0.9, 0.1]).tolist()
    assert quantiles == pytest.approx([-0.1, -0.75, 1.15, -1.2], abs=1e-12)
    # the interval of level 0.8 is [G⁻¹(0.1), G⁻¹(0.9)] in units of σ = 0.5 around μ = x
    lower, upper = recal.predict_interval(torch.tensor([[2.0], [-1.0]], dtype=torch.float64), 0.2)
    assert lower[:, 0].tolist() == pytest.approx([2.0 - 0.6, -1.0 - 0.6], abs=1e-12)
    assert upper[:, 0].tolist() == pytest.approx([2.0 + 0.575, -1.0 + 0.575], abs=1e-12)


def test_tied_rows_share_the_level_of_the_last_of_them():
    """z = 0.5, -1, 0.5, 2, -1, 0 (n = 6): sorted -1, -1, 0, 0.5, 0.5, 2. At or below -1 lie
    2 of 6 rows, at or below 0 lie 3, at or below 0.5 lie 5, at or below 2 all 6: the levels are
    2/6, 2/6, 3/6, 5/6, 5/6, 6/6 (both tied rows get the share at their common z).

    G⁻¹(0.5) = 0 (the level 1/2 is reached exactly there); G⁻¹(2/3): between (0, 1/2) and
    (0.5, 5/6), halfway: 0.25.
    """
    recal = _fit([0.5, -1.0, 0.5, 2.0, -1.0, 0.0])
    assert recal.z.tolist() == [-1.0, -1.0, 0.0, 0.5, 0.5, 2.0]
    expected = [2 / 6, 2 / 6, 3 / 6, 5 / 6, 5 / 6, 6 / 6]
    assert recal.observed.tolist() == pytest.approx(expected, abs=1e-12)
    assert recal.standardized_quantile([0.5, 2 / 3]).tolist() == pytest.approx(
        [0.0, 0.25], abs=1e-12
    )


def test_a_level_on_a_tie_takes_the_upper_end_of_the_flat_step():
    """With the rows of the tie test, the level 2/6 is reached at z = -1 by both tied rows:
    the step from (-1, 2/6) to (-1, 2/6) is flat, and the quantile is its upper end, -1 (not
    the 0 / 0 of a division by the flat step's height)."""
    recal = _fit([0.5, -1.0, 0.5, 2.0, -1.0, 0.0])
    assert recal.standardized_quantile([2 / 6]).tolist() == [-1.0]


def test_the_pool_adjacent_violators_pools_the_first_two_values_too():
    """y = 3, 1, 2 on x = 0, 1, 2: 3 > 1 pools to 2, and 2, 2 stays: the fit is 2, 2, 2."""
    from bnn_pyro.calibration.recalibration import _isotonic

    x = torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64)
    xs, fitted = _isotonic(x, torch.tensor([3.0, 1.0, 2.0], dtype=torch.float64))
    assert fitted.tolist() == [2.0, 2.0, 2.0]


def test_bad_levels_and_too_few_rows_are_refused_with_the_whole_message():
    recal = _fit([0.8, -1.2, 1.5, -0.3, 0.1])
    for bad in ([1.2], [-0.1], [[0.5]]):
        with pytest.raises(ValueError, match=r"^p must be a list of levels in \[0, 1\], got "):
            recal.standardized_quantile(bad)
    for bad in (0.0, 1.0, -0.5, 1.5):
        with pytest.raises(ValueError, match=r"^alpha must be a finite float in \(0.0, 1.0\), got"):
            recal.predict_interval(torch.ones(2, 1, dtype=torch.float64), alpha=bad)
    message = r"^IsotonicRecalibration is not fitted: call fit\(\) first$"
    with pytest.raises(NotFittedError, match=message):
        IsotonicRecalibration(_Shifted()).standardized_quantile([0.5])
    half = IsotonicRecalibration(_Shifted())
    half.restore_calibrator_state({"z": recal.z})  # a state without its levels
    with pytest.raises(NotFittedError, match=message):
        half.standardized_quantile([0.5])
    with pytest.raises(ValueError, match="at least 2 calibration rows, got 1"):
        _fit([0.3])


def test_the_interval_defaults_to_90_percent_in_the_method_s_dtype():
    """alpha = 0.1 unless given; a float32 predictive gives float32 bounds (the map is float64)."""
    recal = _fit([0.8, -1.2, 1.5, -0.3, 0.1])
    x = torch.tensor([[2.0], [-1.0]], dtype=torch.float64)
    assert torch.equal(
        torch.stack(recal.predict_interval(x)), torch.stack(recal.predict_interval(x, 0.1))
    )

    class Single:
        def predictive_gaussian(self, x, **_):
            return x[:, :1].unsqueeze(0).float(), torch.tensor(0.5)

    single = IsotonicRecalibration(Single())
    single.restore_calibrator_state(recal.calibrator_state())
    lower, upper = single.predict_interval(x.float())
    assert lower.dtype == upper.dtype == torch.float32


def test_two_rows_make_a_map_and_the_levels_0_and_1_are_its_ends():
    """z = 1, -1: levels 1/2 at -1 and 1 at 1. p = 0 is held at the lowest z, -1; p = 1 is
    the largest, 1; p = 3/4 is halfway between them, 0."""
    recal = _fit([1.0, -1.0])
    assert recal.standardized_quantile([0.0, 1.0, 0.75]).tolist() == [-1.0, 1.0, 0.0]


def test_the_levels_meet_the_map_on_its_device_whatever_torch_s_default():
    """The map lives where fit_rows put it (the CPU): a default device of "meta" must not move
    the levels off it (the quantiles stay computable, on the map's device)."""
    recal = _fit([0.8, -1.2, 1.5, -0.3, 0.1])
    with torch.device("meta"):
        quantiles = recal.standardized_quantile([0.5, 0.3])
    assert quantiles.device == recal.z.device
    assert quantiles.tolist() == pytest.approx([-0.1, -0.75], abs=1e-12)
