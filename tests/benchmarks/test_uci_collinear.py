"""The committed before/after report of VI on the collinear synthetic set."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks.uci.collinear_report import RATIO, RESULTS, figures, main, markdown, paired_ratio
from benchmarks.uci.seed_spread import chosen_config, seeded_finals
from benchmarks.uci.synthetic import SPREAD


def test_the_committed_report_is_the_committed_figures_rendered(tmp_path):
    kept = json.loads((RESULTS / "collinear_plant.json").read_text(encoding="utf-8"))
    assert markdown(kept) == (RESULTS / "collinear_plant.md").read_text(encoding="utf-8")
    (tmp_path / "collinear_plant.json").write_text(json.dumps(kept), encoding="utf-8")
    main(["--out", str(tmp_path)])  # re-rendered from the kept figures alone
    assert (tmp_path / "collinear_plant.md").read_text() == markdown(kept)


def test_the_committed_runs_show_the_break_and_the_report_counts_it():
    """The reproduction the data set was made for: before the fix some vi finals broke (test
    RMSE over 2x bb_alpha's and over 1% of the target's sd); the report's two count lines are
    the kept figures' counts."""
    kept = json.loads((RESULTS / "collinear_plant.json").read_text(encoding="utf-8"))
    before, after, bba = kept["before"], kept["after"], kept["bb_alpha"]
    assert len(before) == len(after) == len(bba) == 20
    broke = [s for s in bba if before[s]["rmse"] > max(RATIO * bba[s]["rmse"], 0.01 * SPREAD)]
    assert broke
    within = sum(after[s]["rmse"] <= RATIO * bba[s]["rmse"] for s in bba)
    text = markdown(kept)
    assert f"on {within} of 20 splits (target: all;" in text
    assert max(after[s]["rmse"] for s in after) < min(before[s]["rmse"] for s in broke)


def test_the_paired_line_is_the_split_by_split_ratios():
    """The reading of the missed target: the ratio's spread is two-sided. The line's counts
    and geometric mean are recomputed here from the kept figures."""
    kept = json.loads((RESULTS / "collinear_plant.json").read_text(encoding="utf-8"))
    after, bba = kept["after"], kept["bb_alpha"]
    ratios = [after[s]["rmse"] / bba[s]["rmse"] for s in bba]
    geometric = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    over, under = sum(r > RATIO for r in ratios), sum(r < 1 / RATIO for r in ratios)
    text = markdown(kept)
    assert f"geometric mean {geometric:.2f} " in text
    assert f"on {over} splits, bb_alpha's over {RATIO:g}x vi's on {under}" in text
    pair = paired_ratio(after, bba)
    assert pair["low"] < pair["geometric_mean"] < pair["high"]


def test_figures_keep_one_method_by_split():
    runs = [
        {"method": "vi", "split": 1, "rmse": 0.2, "config": {"lr": 0.003}},
        {"method": "bb_alpha", "split": 0, "rmse": 0.1, "config": {"lr": 0.001}},
    ]
    assert list(figures(runs, "vi")) == [1] and figures(runs, "vi")[1]["lr"] == 0.003


def test_seed_spreads_are_kept_and_rendered_beside_the_harness_figures(tmp_path):
    kept = json.loads((RESULTS / "collinear_plant.json").read_text(encoding="utf-8"))
    kept.pop("seed_spread", None)
    (tmp_path / "collinear_plant.json").write_text(json.dumps(kept), encoding="utf-8")
    spread = tmp_path / "spread.json"
    record = {"dataset": "collinear_plant", "split": 0, "method": "bb_alpha", "seeds": 2}
    spread.write_text(json.dumps({**record, "config": {}, "rmse": [1e-5, 4e-5]}))
    main(["--out", str(tmp_path), "--seed-spread", str(spread)])
    again = json.loads((tmp_path / "collinear_plant.json").read_text(encoding="utf-8"))
    assert again["seed_spread"] == [{**record, "rmse": [1e-5, 4e-5]}]  # (its config dropped)
    own = kept["bb_alpha"]["0"]["rmse"]
    row = f"| 0 | bb_alpha | 2 | 1.00e-05 | 4.00e-05 | 4.0x | {own:.2e} |"
    assert row in (tmp_path / "collinear_plant.md").read_text(encoding="utf-8")


def test_the_chosen_configuration_is_the_splits_one():
    runs = [
        {"dataset": "d", "split": 0, "method": "vi", "config": {"noise_factor": 0.7, "lr": 1}},
        {"dataset": "d", "split": 1, "method": "vi", "config": {"noise_factor": 1.0, "lr": 2}},
    ]
    assert chosen_config(runs, "d", 1)["config"] == {"noise_factors": [1.0], "lr": 2}
    with pytest.raises(ValueError, match="one record of d split 2"):
        chosen_config(runs, "d", 2)
    with pytest.raises(ValueError, match="seeds must be an int >= 1"):
        seeded_finals("unused", 0, "vi", {}, 0)
