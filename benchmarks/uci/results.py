"""Benchmark results: per-split records -> summary rows, the JSON file, the markdown table, charts.

The summary rows use the results format of :func:`~benchmarks.uci.plots.plot_uci_results` and
:data:`~benchmarks.uci.published.PUBLISHED_UCI`:
``{"dataset", "method", "metric", "mean", "stderr"}`` (plus ``n_splits``), with ``metric``
``"test_ll"`` or ``"rmse"``.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.uci.protocol import FINAL_FLAG_RATIO, mean_stderr
from benchmarks.uci.published import PUBLISHED_UCI
from benchmarks.uci.targets import evaluate_targets, targets_markdown

__all__ = [
    "METRICS",
    "append_jsonl",
    "drop_partial_line",
    "chosen_hyperparameters",
    "markdown_report",
    "read_jsonl",
    "summarize",
    "write_charts",
    "write_json",
]

#: The reported metrics: name -> (column title, higher is better).
METRICS = {"test_ll": ("test log-likelihood", True), "rmse": ("RMSE", False)}
_PUBLISHED = list(dict.fromkeys(str(row["method"]) for row in PUBLISHED_UCI))


def summarize(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Mean ± standard error over splits per (data set, method, metric).

    Records with an ``"error"`` are left out (``n_splits`` tells how many splits remain).

    Args:
        runs: per-split records with ``dataset``, ``method``, ``split``, ``test_ll``, ``rmse``.

    Returns:
        Rows ``{"dataset", "method", "metric", "mean", "stderr", "n_splits"}`` in the order the
        (data set, method) pairs first appear.

    Example:
        >>> runs = [{"dataset": "d", "method": "m", "split": k, "test_ll": v, "rmse": 1.0}
        ...         for k, v in enumerate([-1.0, -2.0])]
        >>> [(r["metric"], r["mean"], round(r["stderr"], 4)) for r in summarize(runs)]
        [('test_ll', -1.5, 0.3536), ('rmse', 1.0, 0.0)]
    """
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for run in runs:
        if "error" not in run:
            groups.setdefault((str(run["dataset"]), str(run["method"])), []).append(run)
    rows = []
    for (dataset, method), group in groups.items():
        for metric in METRICS:
            mean, stderr = mean_stderr([float(run[metric]) for run in group])
            rows.append(
                {
                    "dataset": dataset,
                    "method": method,
                    "metric": metric,
                    "mean": mean,
                    "stderr": stderr,
                    "n_splits": len(group),
                }
            )
    return rows


def chosen_hyperparameters(runs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """For each ``"dataset/method"``: how often each value of each hyper-parameter was chosen.

    Example:
        >>> runs = [{"dataset": "d", "method": "m", "config": {"lr": lr}} for lr in (1, 1, 2)]
        >>> chosen_hyperparameters(runs)
        {'d/m': {'lr': {'1': 2, '2': 1}}}
    """
    out: dict[str, dict[str, Counter]] = {}
    for run in runs:
        if "config" not in run:
            continue
        counters = out.setdefault(f"{run['dataset']}/{run['method']}", {})
        for key, value in run["config"].items():
            counters.setdefault(key, Counter())[str(value)] += 1
    return {
        name: {key: dict(counter.most_common()) for key, counter in counters.items()}
        for name, counters in out.items()
    }


def _cell(row: Mapping[str, Any] | None, digits: int = 2) -> str:
    if row is None:
        return "—"
    stderr = row.get("stderr")
    text = f"{row['mean']:.{digits}f}"
    return text if stderr is None else f"{text} ± {stderr:.{digits}f}"


def _table(
    summary: Sequence[Mapping[str, Any]], metric: str, labels: Mapping[str, str]
) -> list[str]:
    ours = {(r["dataset"], r["method"]): r for r in summary if r["metric"] == metric}
    published = {(r["dataset"], r["method"]): r for r in PUBLISHED_UCI if r["metric"] == metric}
    datasets = list(dict.fromkeys(r["dataset"] for r in summary))
    methods = list(dict.fromkeys(r["method"] for r in summary))
    higher = METRICS[metric][1]
    head = ["data", *(labels.get(m, m) for m in methods), *(f"*{p}*" for p in _PUBLISHED)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for dataset in datasets:
        values = {m: ours[(dataset, m)]["mean"] for m in methods if (dataset, m) in ours}
        best = (max if higher else min)(values, key=values.get) if values else None
        cells = []
        for method in methods:
            cell = _cell(ours.get((dataset, method)))
            cells.append(f"**{cell}**" if method == best else cell)
        cells += [_cell(published.get((dataset, p))) for p in _PUBLISHED]
        lines.append("| " + " | ".join([dataset, *cells]) + " |")
    return lines


def markdown_report(payload: Mapping[str, Any]) -> str:
    """The markdown page of a results payload (as written by :func:`write_json`).

    Tables of test log-likelihood and RMSE (mean ± standard error over splits, original units,
    best of ours in bold) beside the published values (in italics in the header), the
    targets (:mod:`~benchmarks.uci.targets`), then the chosen
    hyper-parameters.

    Example:
        >>> runs = [{"dataset": "yacht", "method": "vi", "split": 0, "test_ll": -1.0,
        ...          "rmse": 0.9, "config": {"lr": 0.01}}]
        >>> text = markdown_report({"summary": summarize(runs), "runs": runs,
        ...                         "methods": {"vi": {"label": "VI"}}})
        >>> "| yacht | **-1.00 ± 0.00** |" in text
        True
    """
    labels = {name: str(info.get("label", name)) for name, info in payload["methods"].items()}
    summary = payload["summary"]
    lines = ["# UCI regression benchmark", ""]
    for key, title in (("command", "Command"), ("date", "Date"), ("wall_time", "Wall time")):
        if key in payload:
            lines.append(f"- {title}: `{payload[key]}`")
    if "settings" in payload:
        lines.append(f"- Settings: `{json.dumps(payload['settings'], sort_keys=True)}`")
    if "versions" in payload:
        lines.append(f"- Versions: `{json.dumps(payload['versions'], sort_keys=True)}`")
    for metric, (title, higher) in METRICS.items():
        better = "higher" if higher else "lower"
        lines += ["", f"## {title} ({better} is better, mean ± s.e. over splits)", ""]
        lines += _table(summary, metric, labels)
    targets = evaluate_targets(summary)
    if targets:
        lines += ["", "## Targets against the published results (test log-likelihood)", ""]
        lines += targets_markdown(targets)
    lines += ["", "## Chosen hyper-parameters (value: number of splits)", ""]
    for name, params in chosen_hyperparameters(payload["runs"]).items():
        varied = {k: v for k, v in params.items() if len(v) > 1 or k == "epochs"}
        fixed = {k: next(iter(v)) for k, v in params.items() if k not in varied}
        text = "; ".join(f"{k}: {v}" for k, v in varied.items())
        lines.append(f"- {name}: {text} (fixed: {json.dumps(fixed, sort_keys=True)})")
    flagged = [r for r in payload["runs"] if r.get("flagged")]
    if flagged:
        lines += ["", f"## Flagged final fits ({len(flagged)})", ""]
        lines += [
            f"A final fit whose in-sample RMSE is more than {FINAL_FLAG_RATIO:g}× its search's "
            "validation RMSE of the same configuration "
            "(scored as it is above):",
            "",
        ]
        lines += [
            f"- {r['dataset']} split {r['split']} {r['method']}: in-sample RMSE "
            f"{r['train_rmse']:.4g} against {r['search_val_rmse']:.4g} in the search; test RMSE "
            f"{r['rmse']:.4g}"
            for r in flagged
        ]
    errors = [r for r in payload["runs"] if "error" in r]
    if errors:
        lines += ["", f"## Failed tasks ({len(errors)})", ""]
        lines += [f"- {r['dataset']} split {r['split']} {r['method']}" for r in errors]
    return "\n".join(lines) + "\n"


def write_json(path: str | os.PathLike, payload: Mapping[str, Any]) -> Path:
    """Write ``payload`` as indented JSON, atomically (temporary file, then rename).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     path = write_json(Path(tmp) / "r.json", {"runs": [1]})
        ...     json.loads(path.read_text())
        {'runs': [1]}
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1, sort_keys=False) + "\n")
    os.replace(tmp, path)
    return path


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Read records written one JSON object per line (a missing file gives ``[]``).

    A truncated last line (a run killed mid-write) is skipped.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     path = Path(tmp) / "runs.jsonl"
        ...     _ = path.write_text('{"split": 0}\\n{"split": 1}\\n{"spl')
        ...     read_jsonl(path), read_jsonl(Path(tmp) / "missing.jsonl")
        ([{'split': 0}, {'split': 1}], [])
    """
    path = Path(path)
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def append_jsonl(path: str | os.PathLike, record: Mapping[str, Any]) -> None:
    """Append ``record`` as one JSON line with a single ``write`` on an ``O_APPEND`` file: a
    signal handled in this process cannot leave half a line (it runs before or after).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     append_jsonl(Path(tmp) / "r.jsonl", {"split": 0})
        ...     append_jsonl(Path(tmp) / "r.jsonl", {"split": 1})
        ...     read_jsonl(Path(tmp) / "r.jsonl")
        [{'split': 0}, {'split': 1}]
    """
    line = (json.dumps(record) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def drop_partial_line(path: str | os.PathLike) -> None:
    """Cut a last line without its newline (a process killed mid-write), so the next
    :func:`append_jsonl` starts on a line of its own; a missing file is left missing.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     path = Path(tmp) / "r.jsonl"
        ...     _ = path.write_text('{"split": 0}\\n{"spl')
        ...     drop_partial_line(path)
        ...     path.read_text()
        '{"split": 0}\\n'
    """
    path = Path(path)
    if not path.is_file():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with path.open("r+b") as handle:
            handle.truncate(data.rfind(b"\n") + 1)


def write_charts(
    summary: Sequence[Mapping[str, Any]], out: str | os.PathLike, labels: Mapping[str, str]
) -> list[Path]:
    """One PNG per metric (``uci_test_ll.png``, ``uci_rmse.png``) beside the published values.

    Args:
        summary: rows of :func:`summarize`.
        out: folder to write to.
        labels: method name -> label in the legend.

    Returns:
        The paths written.

    Example:
        >>> import tempfile
        >>> runs = [{"dataset": "yacht", "method": "vi", "split": 0, "test_ll": -1.0, "rmse": 0.9}]
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     [p.name for p in write_charts(summarize(runs), tmp, {"vi": "VI"})]
        ['uci_test_ll.png', 'uci_rmse.png']
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    from benchmarks.uci.plots import plot_uci_results

    paths = []
    for metric, (title, _) in METRICS.items():
        rows = [{**r, "method": labels.get(r["method"], r["method"])} for r in summary]
        if not any(r["metric"] == metric for r in rows):
            continue
        fig, ax = plt.subplots(figsize=(13, 4.5))
        plot_uci_results(rows, metric=metric, ax=ax)
        ax.set_title(f"UCI regression: {title} (ours solid, published hatched)")
        fig.tight_layout()
        path = Path(out) / f"uci_{metric}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths
