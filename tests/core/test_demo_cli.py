"""The README's main job, `bnn-pyro demo`, on a few epochs."""

from __future__ import annotations

import json

from bnn_pyro.cli import main
from bnn_pyro.cli.demo import run_demo


def test_demo_writes_metrics_and_a_png(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path), "--epochs", "400", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "in the gap" in printed and "demo.png" in printed
    metrics = json.loads((tmp_path / "demo_metrics.json").read_text())
    assert (tmp_path / "demo.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert metrics["rmse_data"] < 0.5  # the toy function has range ~[-2.5, 2.5]


def test_the_band_widens_in_the_gap(tmp_path):
    # the full demo (5000 epochs, ~10 s): the epistemic std inside the gap exceeds the one on
    # the data; the same seed gives the same numbers
    result = run_demo(str(tmp_path), progress=False)
    assert result.std_gap > 1.2 * result.std_data
    assert result.rmse_data < 0.2  # the noise sd is 0.1
