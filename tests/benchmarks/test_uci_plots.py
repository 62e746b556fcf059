"""The UCI chart of benchmarks/uci/plots.py carries the right bar heights, not pixels."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from benchmarks.uci import PUBLISHED_UCI, plot_uci_results  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _results():
    rows = []
    for i, dataset in enumerate(["yacht", "bostonHousing"]):
        rows.append({"dataset": dataset, "method": "MFVI", "metric": "test_ll",
                     "mean": -1.5 - i, "stderr": 0.1 * (i + 1)})  # fmt: skip
        rows.append({"dataset": dataset, "method": "MFVI", "metric": "rmse",
                     "mean": 1.0 + i, "stderr": None})  # fmt: skip
    rows.append({"dataset": "yacht", "method": "SWAG", "metric": "test_ll", "mean": -1.2})
    return rows


def _bars(ax):
    return {c.get_label(): c for c in ax.containers if hasattr(c, "patches")}


def test_uci_chart_bars_are_our_means_and_the_published_values():
    ax = plot_uci_results(_results())
    bars = _bars(ax)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["yacht", "bostonHousing"]
    assert [p.get_height() for p in bars["MFVI"].patches] == [-1.5, -2.5]
    assert [p.get_height() for p in bars["SWAG"].patches] == [-1.2]
    # Error bars span mean +- stderr.
    segments = bars["MFVI"].errorbar.lines[2][0].get_segments()
    np.testing.assert_allclose([s[:, 1] for s in segments], [[-1.6, -1.4], [-2.7, -2.3]])
    # Published bars: the reference values for these two data sets, nothing else.
    expected = {}
    for row in PUBLISHED_UCI:
        if row["metric"] == "test_ll" and row["dataset"] in ("yacht", "bostonHousing"):
            expected.setdefault(f"{row['method']} (published)", []).append(row["mean"])
    assert set(bars) == {"MFVI", "SWAG"} | set(expected)
    for label, means in expected.items():
        assert sorted(p.get_height() for p in bars[label].patches) == sorted(means)
    # Bars sit in their data set's group (tick 0: yacht, 1: boston), in series order.
    for group in (0, 1):
        centres = [c.patches[group].get_x() + c.patches[group].get_width() / 2
                   for label, c in bars.items() if label != "SWAG"]  # fmt: skip
        assert all(group - 0.5 < c < group + 0.5 for c in centres)
        assert centres == sorted(centres)
    # ... and each series lists yacht first, then boston, as the ticks.
    for row in PUBLISHED_UCI:
        if row["metric"] == "test_ll" and row["dataset"] in ("yacht", "bostonHousing"):
            group = 0 if row["dataset"] == "yacht" else 1
            patch = bars[f"{row['method']} (published)"].patches[group]
            assert patch.get_height() == row["mean"]


def test_uci_chart_other_metric_and_no_reference():
    ax = plot_uci_results(_results(), reference=[], metric="rmse")
    bars = _bars(ax)
    assert list(bars) == ["MFVI"]
    assert [p.get_height() for p in bars["MFVI"].patches] == [1.0, 2.0]
    assert bars["MFVI"].errorbar is None  # no stderr given
    assert "RMSE" in ax.get_ylabel()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"results": {"dataset": "yacht"}}, TypeError, "results must be a list of dicts"),
        ({"results": ["yacht"]}, TypeError, r"results\[0\] must be a dict"),
        ({"results": [{"dataset": "y", "method": "m", "mean": 1.0}]}, ValueError, "'metric'"),
        (
            {"results": [{"dataset": "y", "method": "m", "metric": "rmse", "mean": float("nan")}]},
            ValueError,
            "finite number 'mean'",
        ),  # fmt: skip
        (
            {
                "results": [
                    {"dataset": "y", "method": "m", "metric": "rmse", "mean": 1, "stderr": -1}
                ]
            },
            ValueError,
            "stderr",
        ),  # fmt: skip
        ({"results": _results(), "metric": "crps"}, ValueError, "no rows for metric 'crps'"),
        ({"results": _results() + _results()[:1]}, ValueError, "appears twice"),
        ({"results": _results(), "metric": 3}, TypeError, "metric must be a str"),
        ({"results": _results(), "ax": "axes"}, TypeError, "ax must be a matplotlib Axes"),
    ],
)
def test_uci_chart_bad_results_raise(kwargs, error, match):
    with pytest.raises(error, match=match):
        plot_uci_results(**kwargs)
