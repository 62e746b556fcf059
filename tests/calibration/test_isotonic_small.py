"""The isotonic recalibration on a handful of calibration rows, worked out by hand.

With ``n`` calibration rows the map's levels are multiples of ``1 / n``: a shift of one rank
(``(k - 1) / n`` or ``k / (n + 1)`` for ``k / n``) moves every level by up to ``1 / n``, which
5,000 rows hide inside a coverage test's sampling error but 5 or 6 rows do not.
"""

from __future__ import annotations

import pytest
import torch

from bnn_pyro.calibration import IsotonicRecalibration


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
