"""The UCI chart: grouped bars of our results beside the published ones.

Every row is ``{"dataset", "method", "metric", "mean"[, "stderr"]}``, the format of
:data:`~benchmarks.uci.published.PUBLISHED_UCI` and of :func:`~benchmarks.uci.results.summarize`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from benchmarks.uci.published import PUBLISHED_UCI
from bnn_pyro.plots import get_axes

if TYPE_CHECKING:  # matplotlib is imported where a figure is drawn (about a second)
    from matplotlib.axes import Axes

__all__ = ["plot_uci_results"]

_METRIC_LABELS = {
    "test_ll": "test log-likelihood (nats, higher is better)",
    "rmse": "test RMSE (lower is better)",
}


def _checked_rows(rows: object, name: str) -> list[Mapping[str, object]]:
    """Validate rows ``{"dataset", "method", "metric", "mean"[, "stderr"]}``."""
    if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Sequence):
        raise TypeError(f"{name} must be a list of dicts, got {type(rows).__name__}")
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise TypeError(f"{name}[{i}] must be a dict, got {type(row).__name__}")
        for key in ("dataset", "method", "metric"):
            if not isinstance(row.get(key), str):
                raise ValueError(f"{name}[{i}] needs a string {key!r}, got {row.get(key)!r}")
        mean, stderr = row.get("mean"), row.get("stderr")
        if isinstance(mean, bool) or not isinstance(mean, (int, float)) or not math.isfinite(mean):
            raise ValueError(f"{name}[{i}] needs a finite number 'mean', got {mean!r}")
        if stderr is not None and (
            isinstance(stderr, bool)
            or not isinstance(stderr, (int, float))
            or not stderr >= 0
            or not math.isfinite(stderr)
        ):
            raise ValueError(f"{name}[{i}]['stderr'] must be None or a number >= 0, got {stderr!r}")
    return list(rows)


def plot_uci_results(
    results: Sequence[Mapping[str, object]],
    reference: Sequence[Mapping[str, object]] | None = None,
    metric: str = "test_ll",
    ax: Axes | None = None,
) -> Axes:
    """Grouped bars of mean ± standard error per data set and method, beside published values.

    The results format (also that of :data:`~benchmarks.uci.published.PUBLISHED_UCI`) is a list of
    dicts, one per (data set, method, metric)::

        {"dataset": "bostonHousing", "method": "MC dropout", "metric": "test_ll",
         "mean": -2.45, "stderr": 0.03}

    ``metric`` is ``"test_ll"`` (mean test log-likelihood, original units) or ``"rmse"`` (or
    any name the rows use); ``stderr`` (standard error over splits) may be ``None`` or left out.
    Other keys are ignored.

    Args:
        results: our rows; only those with ``row["metric"] == metric`` are drawn.
        reference: published rows drawn hatched beside ours for the same data sets; default
            :data:`~benchmarks.uci.published.PUBLISHED_UCI`, ``[]`` for none.
        metric: which metric to draw.
        ax: axes to draw on; a new figure when ``None``.

    Returns:
        The ``Axes``: one bar container per method (labels as the methods, published ones
        suffixed ``" (published)"``), with error bars where a ``stderr`` is given.

    Raises:
        TypeError: if ``results``/``reference`` are not lists of dicts.
        ValueError: on a malformed row, no row for ``metric``, or a repeated (data set, method).

    Example:
        >>> rows = [{"dataset": "yacht", "method": "ours", "metric": "test_ll",
        ...          "mean": -1.3, "stderr": 0.05}]
        >>> ax = plot_uci_results(rows)
        >>> [c.get_label() for c in ax.containers if hasattr(c, "patches")][:2]
        ['ours', 'VI (PBP paper) (published)']
        >>> import matplotlib.pyplot as plt; plt.close(ax.figure)
    """
    if not isinstance(metric, str):
        raise TypeError(f"metric must be a str, got {type(metric).__name__}")
    ours = _checked_rows(results, "results")
    refs = _checked_rows(PUBLISHED_UCI if reference is None else reference, "reference")
    ours = [row for row in ours if row["metric"] == metric]
    if not ours:
        available = sorted({str(row["metric"]) for row in results})
        raise ValueError(f"results hold no rows for metric {metric!r}; available: {available}")
    datasets = list(dict.fromkeys(str(row["dataset"]) for row in ours))
    refs = [row for row in refs if row["metric"] == metric and row["dataset"] in datasets]
    series: dict[tuple[str, bool], dict[str, tuple[float, float]]] = {}
    for rows, published in ((ours, False), (refs, True)):
        for row in rows:
            values = series.setdefault((str(row["method"]), published), {})
            if row["dataset"] in values:
                raise ValueError(
                    f"{row['dataset']!r} / {row['method']!r} appears twice for metric {metric!r}"
                )
            stderr = row.get("stderr")
            values[str(row["dataset"])] = (
                float(row["mean"]),
                math.nan if stderr is None else stderr,
            )

    ax = get_axes(ax)
    width = 0.8 / len(series)
    for j, ((method, published), values) in enumerate(series.items()):
        index = sorted(datasets.index(d) for d in values)
        offsets = np.array(index) + (j - (len(series) - 1) / 2) * width
        means, errs = zip(*(values[datasets[i]] for i in index), strict=True)
        ax.bar(
            offsets,
            means,
            width=width,
            yerr=None if all(math.isnan(e) for e in errs) else errs,
            capsize=2,
            hatch="//" if published else None,
            alpha=0.6 if published else 1.0,
            edgecolor="k",
            label=f"{method} (published)" if published else method,
        )
    ax.set_xticks(range(len(datasets)), datasets)
    ax.set_ylabel(_METRIC_LABELS.get(metric, metric))
    ax.axhline(0.0, color="k", lw=0.5)
    # beside the axes, not on them: with ten bars per group no corner is free of bars
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return ax
