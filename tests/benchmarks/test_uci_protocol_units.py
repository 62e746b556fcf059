"""The UCI protocol's small pieces pinned by value: the hidden width by row count, the rows'
device, the mean and standard error over splits, the seeds every committed run trained
with (CRC-32 of the parts' text, re-derived here by a plain-Python CRC-32), and the training
rows a final fit's check reads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks.uci import load_uci_split, write_uci_folder
from benchmarks.uci.protocol import (
    FINAL_CHECK_ROWS,
    LARGE_DATASET_ROWS,
    RegressionData,
    hidden_units,
    mean_stderr,
    prepare,
    seed_for,
)
from benchmarks.uci.runner import final_report


def _crc32(data: bytes) -> int:
    """CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), bit by bit."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0xEDB88320 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


@pytest.mark.parametrize("parts", [("bostonHousing", 0, "vi"), ("yacht", 17, "laplace", 0.01)])
def test_seed_for_is_the_crc32_of_the_parts_reprs_in_31_bits(parts):
    text = "\x1f".join(repr(p) for p in parts).encode("utf-8")
    assert seed_for(*parts) == _crc32(text) & 0x7FFFFFFF
    assert 0 <= seed_for(*parts) < 2**31


def test_the_hidden_width_switches_above_ten_thousand_rows():
    assert hidden_units(1) == 50  # one row is a valid (tiny) data set
    assert hidden_units(LARGE_DATASET_ROWS) == 50
    assert hidden_units(LARGE_DATASET_ROWS + 1) == 100
    for bad in (0, -3, 2.5, "100", True):
        with pytest.raises(ValueError, match=r"n_rows must be a positive int, got "):
            hidden_units(bad)


def test_prepare_sizes_the_net_by_training_rows_not_features(tmp_path: Path):
    rows = 11_200  # split 0 trains on 90%: 10,080 rows, above the 10,000 threshold
    folder = write_uci_folder(tmp_path / "big", torch.randn(rows, 2), torch.randn(rows))
    data = prepare(load_uci_split(folder, 0))
    assert data.x.shape[0] > LARGE_DATASET_ROWS and data.hidden == 100


def test_prepare_puts_every_row_on_the_given_device_and_names_a_wrong_split(tmp_path: Path):
    folder = write_uci_folder(tmp_path / "toy", torch.randn(30, 2), torch.randn(30))
    # the meta device stands in for an accelerator: rows left on the default device would stay
    # on the CPU
    data = prepare(load_uci_split(folder, 0), device="meta")
    assert {t.device.type for t in (data.x, data.y, data.x_eval, data.y_eval)} == {"meta"}
    with pytest.raises(TypeError, match=r"split must be a UCISplit, got list"):
        prepare([1, 2])


def test_mean_stderr_in_float64_with_the_population_std():
    assert mean_stderr([2.0]) == (2.0, 0.0)  # one split: no spread
    # float32 inputs are summed in float64: 1e8 + 1 - 1e8 is 0 in float32
    mean, _ = mean_stderr([np.float32(1e8), np.float32(1.0), np.float32(-1e8)])
    assert mean == pytest.approx(1 / 3, rel=1e-12)
    with pytest.raises(ValueError, match=r"values must be a non-empty sequence of floats"):
        mean_stderr([])
    with pytest.raises(ValueError, match=r"values must be a non-empty sequence of floats"):
        mean_stderr([[1.0, 2.0]])
    with pytest.raises(ValueError, match=r"values must be finite, got \[1.0, nan\]"):
        mean_stderr([1.0, float("nan")])


@pytest.mark.parametrize("rows", [FINAL_CHECK_ROWS, FINAL_CHECK_ROWS + 1, 2500])
def test_a_finals_check_reads_at_most_a_thousand_evenly_spaced_training_rows(rows):
    """``train_rmse`` is the RMSE (original units) of the predictive mean on every training row
    up to ``FINAL_CHECK_ROWS``, beyond it on that many evenly spaced ones, first and last
    included; the test rows are scored whole."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(rows, 2, generator=g), torch.randn(rows, 1, generator=g)
    data = RegressionData(x, y, torch.randn(7, 2, generator=g), torch.randn(7, 1, generator=g),
                          2.0, 50)  # fmt: skip
    seen = []

    def predictor(inputs):
        seen.append(inputs)
        return inputs[:, :1].expand(3, -1, -1).clone(), torch.ones(3, len(inputs), 1)

    scores = {}
    final_report({"epochs": 4}, data, scores)(4, predictor)
    assert FINAL_CHECK_ROWS == 1000
    kept = min(rows, FINAL_CHECK_ROWS)
    assert [len(s) for s in seen] == [kept, 7]
    index = torch.linspace(0, rows - 1, kept).round().long()
    assert torch.equal(seen[0], x[index])
    want = 2.0 * float((x[index, 0] - y[index, 0]).square().mean().sqrt())
    assert scores["train_rmse"] == pytest.approx(want, rel=1e-6)
