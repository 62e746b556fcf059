"""benchmarks/co2.py: one ``--quick`` run (its three files, a row per contender), its metric
helpers against hand computations, and the committed page re-derived: its tables rebuilt from
``co2.json`` by today's report code, and the GP reference's row re-fitted (scikit-learn's fit on
one thread is deterministic: about 20 CPU-s) and compared with the committed cells at their
printed precision.

The quick run's numbers mean nothing (two epochs on a subsample) and are never compared with
figures: what is checked is that every cell the report promises is there.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import bnn_pyro as bp
from benchmarks import co2
from benchmarks import co2_report as report
from tests.benchmarks.in_process import run_main
from tests.benchmarks.test_results_rederived import assert_printed, sections

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


@pytest.fixture(scope="module")
def quick(tmp_path_factory) -> tuple[str, Path]:
    """``co2.py --quick --out <tmp>``, once: (what it printed, the folder it wrote). Its
    ``main`` runs in this process (a fresh interpreter's start and imports cost more CPU-s than
    the quick run's own training), its random generators put back after."""
    out = tmp_path_factory.mktemp("co2")
    return run_main(co2.main, ["--quick", "--out", str(out)]), out


def _rows(markdown: str, title: str) -> dict[str, list[str]]:
    """The table under ``## title``: first cell -> the other cells."""
    out = {}
    for line in sections(markdown)[title].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0] != "contender":
            out[cells[0]] = cells[1:]
    return out


# ---------------------------------------------------------------------------- the quick run
def test_quick_run_writes_its_three_files_and_a_row_per_contender(quick):
    printed, out = quick
    assert sorted(p.name for p in out.iterdir()) == ["co2.json", "co2.md", "co2.png"]
    assert (out / "co2.md").read_text(encoding="utf-8") + "\n" == printed  # print's newline
    assert (out / "co2.png").read_bytes()[:4] == b"\x89PNG"
    contenders = [co2.REFERENCE, *bp.METHODS]
    for title, _, _ in report.TABLES:
        rows = _rows(printed, title)
        assert list(rows) == contenders, title
        assert all(len(cells) == 4 + (title == report.TABLES[-1][0]) for cells in rows.values())
        cell = re.compile(r"-?\d+\.\d\d|diverged")  # a figure, or a fit with no predictive
        assert all(cell.fullmatch(c) for cells in rows.values() for c in cells[:4]), rows
    assert "## Targets" in printed and "the GP reference: coverage" in printed
    payload = json.loads((out / "co2.json").read_text(encoding="utf-8"))
    assert list(payload["rows"]) == contenders
    assert payload["settings"]["epochs"] == co2.QUICK.epochs


# ---------------------------------------------------------------------------- the helpers
def test_coverage_nll_and_rmse_against_hand_computations():
    mean, sd = np.array([0.0, 0.0, 0.0, 10.0]), np.array([1.0, 2.0, 1.0, 0.5])
    y = np.array([1.6, 3.3, -1.7, 10.0])
    # |y - mean| against 1.645 sd: 1.6 <= 1.645 in; 3.3 > 3.29 out; 1.7 > 1.645 out; 0 in
    assert co2.interval_coverage(mean, sd, y) == 0.5
    # -log N(y; m, s²) = log s + log(2π)/2 + (y - m)²/(2 s²), row by row
    by_hand = [
        0.0 + 0.5 * math.log(2 * math.pi) + 1.6**2 / 2,
        math.log(2.0) + 0.5 * math.log(2 * math.pi) + 3.3**2 / 8,
        0.0 + 0.5 * math.log(2 * math.pi) + 1.7**2 / 2,
        math.log(0.5) + 0.5 * math.log(2 * math.pi),
    ]
    assert co2.gaussian_nll(mean, sd, y) == pytest.approx(sum(by_hand) / 4, rel=1e-12)
    assert co2.rmse(mean, y) == pytest.approx(math.sqrt((1.6**2 + 3.3**2 + 1.7**2) / 4))
    assert co2.Z90 == pytest.approx(1.6449, abs=1e-4)


def test_horizon_buckets_split_the_years_at_their_first_week():
    t = np.array([1990.0, 1992.999, 1993.0, 1996.999, 1997.0, 2001.97])
    masks = co2.horizon_buckets(t)
    assert list(masks) == ["years 1–3", "years 4–7", "years 8–12", "all"]
    assert masks["years 1–3"].tolist() == [True, True, False, False, False, False]
    assert masks["years 4–7"].tolist() == [False, False, True, True, False, False]
    assert masks["years 8–12"].tolist() == [False, False, False, False, True, True]
    assert masks["all"].all()


def test_moment_match_against_a_hand_computation():
    locs = torch.tensor([[[1.0], [0.0]], [[3.0], [0.0]]])  # (K=2, N=2, 1)
    scales = torch.tensor([[[1.0], [1.0]], [[2.0], [1.0]]])
    mean, sd = co2.moment_match(locs, scales)
    # first row: mean (1 + 3)/2 = 2, variance (1² + 2²)/2 + ((1-2)² + (3-2)²)/2 = 3.5
    assert mean.tolist() == [2.0, 0.0]
    assert sd.pow(2).tolist() == pytest.approx([3.5, 1.0])
    mean, sd = co2.moment_match(locs, torch.tensor(0.5))  # one noise scale for all
    assert sd.pow(2).tolist() == pytest.approx([1.25, 0.25])


def test_a_diverged_fit_is_a_row_without_figures_and_is_not_counted():
    def row(cover: float) -> dict:
        cell = {"cover": cover, "nll": 2.0, "rmse": 1.0, "sd": 1.0, "weeks": 10}
        return {"buckets": {"all": cell}, "seconds": 1.0}

    diverged = {"diverged": "at epoch 7 of 9", "seconds": 2.0}
    rows = {"gp": row(0.5), "a": diverged, "b": row(0.9), "c": row(0.8498)}
    assert report.table(rows, "cover", "{:.2f}")[3] == "| a | diverged |"
    lines = report.targets(rows, "gp")
    assert lines[0].endswith(": b (no predictive, not counted: `a` (diverged at epoch 7 of 9))")
    assert lines[1].startswith("- the best method by coverage: `b` (closest to 0.90; coverage ")
    assert "coverage 0.9000 (9 of 10 weeks)" in lines[1] and lines[1].endswith("target met")


# ---------------------------------------------------------------------------- the committed page
def test_committed_page_is_todays_report_of_its_json():
    payload = json.loads((RESULTS / "co2.json").read_text(encoding="utf-8"))
    page = report.render(payload["header"], payload["rows"], payload["notes"])
    assert page == (RESULTS / "co2.md").read_text(encoding="utf-8")


def test_the_reference_optimizer_runs_to_the_optimum_not_to_the_default_tolerance():
    """Rosenbrock in 4-D from the classic start (optimum: all ones). scipy's L-BFGS-B with its
    default tolerances, what scikit-learn runs, stops 9e-7 from it; run to convergence it is
    within 1e-7. That gap is what moved the committed GP row's third digit between two
    machines: a reference must not depend on where a tolerance happens to stop."""
    from scipy.optimize import minimize, rosen, rosen_der

    objective = lambda t: (float(rosen(t)), rosen_der(t))  # noqa: E731
    start, bounds = np.array([-1.2, 1.0, -1.2, 1.0]), np.array([[-5.0, 5.0]] * 4)
    theta, value = co2.converged_lbfgs(objective, start, bounds)
    assert np.abs(theta - 1.0).max() < 1e-7
    assert value == pytest.approx(float(rosen(theta)), abs=0) and value < 1e-14
    default = minimize(objective, start, method="L-BFGS-B", jac=True, bounds=bounds).x
    assert np.abs(default - 1.0).max() > 1e-7  # the bound above is one the default misses


def test_committed_reference_row_is_refitted():
    """The GP reference re-fitted with the committed run's settings: each of its cells in the
    four tables at the printed precision (coverage counts weeks: exact)."""
    settings = co2.FULL
    series = co2.load_series(settings.train_every, settings.test_every)
    mean, sd, _ = co2.reference_gaussian(series, seed=0)
    derived = co2.score(mean, sd, series.y_test, series.t_test)
    page = (RESULTS / "co2.md").read_text(encoding="utf-8")
    for title, key, _ in report.TABLES:
        cells = _rows(page, title)[co2.REFERENCE]
        for bucket, cell in zip(derived, cells[: len(derived)], strict=True):
            assert_printed(cell, derived[bucket][key], what=f"{title}, {bucket}")
