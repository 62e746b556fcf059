"""The prediction-interval tables of the UCI splits, and their targets.

Reads the per-split records of :func:`benchmarks.uci.intervals.interval_task` and writes:

* ``summarize``: mean ± standard error over splits of every (data set, method, quantity);
* ``interval_targets``: the targets, each with its figures and met or not:

  - split conformal keeps its guarantee: mean 90% coverage in
    ``[0.90, 0.90 + 1/(n_cal + 1) + 0.01]`` for every data set and method (both scores, and
    CQR), with ``n_cal`` the calibration rows;
  - the σ-normalised conformal interval is narrower than the absolute-score one on at least
    3 of 4 data sets, for each VI method (``vi``, ``lrt``, ``bb_alpha``);
  - the σ-normalised interval equals MAPIE's ``StdConformityScore`` interval within 1% (mean
    width, every split);
  - recalibrated (scaled and isotonic) 90% coverage within ±0.02 of 0.90 on every data set, for
    every method, with the scaled predictive's NLL no worse than the raw one by more than one
    standard error (of the raw NLL over splits);
  - shown beside them: how often the raw 90% coverage is off by more than 0.05.

* ``interval_markdown``: the full report; ``readme_markdown``: its 90% coverage table and the
  targets, for the README.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.uci.protocol import mean_stderr

__all__ = ["KINDS", "interval_markdown", "interval_targets", "readme_markdown", "summarize"]

#: The interval kinds that :mod:`benchmarks.uci.intervals` computes, in table order.
KINDS = ("raw", "scaled", "isotonic", "conformal_abs", "conformal_norm", "cqr", "mapie_norm")

#: Column labels of the interval kinds.
LABELS = {
    "raw": "raw",
    "scaled": "scaled",
    "isotonic": "isotonic",
    "conformal_abs": "conformal, abs. score",
    "conformal_norm": "conformal, σ-norm. score",
    "cqr": "CQR",
    "mapie_norm": "MAPIE, σ-norm. score",
}
VI_METHODS = ("vi", "lrt", "bb_alpha")


def _quantities(record: Mapping[str, Any]) -> dict[str, float]:
    """A record's numbers flattened: ``"0.1/raw/coverage"``, ``"mace/raw"``, ``"nll/raw"``, ...,
    and the relative gap between our σ-normalised 90% width and MAPIE's."""
    out: dict[str, float] = {}
    for alpha, kinds in record["intervals"].items():
        for kind, scores in kinds.items():
            for name, value in scores.items():
                out[f"{alpha}/{kind}/{name}"] = float(value)
    for name in ("mace", "nll"):
        for kind, value in record[name].items():
            out[f"{name}/{kind}"] = float(value)
    ours = record["intervals"]["0.1"]["conformal_norm"]["width"]
    out["mapie_gap"] = abs(record["intervals"]["0.1"]["mapie_norm"]["width"] - ours) / ours
    out["scale_factor"] = float(record["scale_factor"])
    out["n_cal"] = float(record["n_cal"])
    return out


def summarize(records: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Mean ± standard error over splits of every quantity, per (data set, method).

    Args:
        records: :func:`~benchmarks.uci.intervals.interval_task` records (those with an
            ``"error"`` are left out).

    Returns:
        ``{(dataset, method): {quantity: (mean, stderr), "n_splits": n, "max": {quantity:
        max}}}`` in the order the pairs first appear.

    Example:
        >>> rec = lambda c: {"dataset": "d", "method": "m", "scale_factor": 1.0, "n_cal": 9,
        ...     "intervals": {"0.1": {"conformal_norm": {"width": 1.0},
        ...                           "mapie_norm": {"width": 1.0}, "raw": {"coverage": c}}},
        ...     "mace": {}, "nll": {}}
        >>> row = summarize([rec(0.8), rec(0.9)])[("d", "m")]
        >>> [round(v, 4) for v in row["0.1/raw/coverage"]], row["n_splits"]
        ([0.85, 0.0354], 2)
    """
    groups: dict[tuple[str, str], list[dict[str, float]]] = {}
    for record in records:
        if "error" not in record:
            key = (str(record["dataset"]), str(record["method"]))
            groups.setdefault(key, []).append(_quantities(record))
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for key, rows in groups.items():
        names = sorted(set().union(*rows))
        summary: dict[str, Any] = {n: mean_stderr([r[n] for r in rows]) for n in names}
        summary["n_splits"] = len(rows)
        summary["max"] = {n: max(r[n] for r in rows) for n in names}
        out[key] = summary
    return out


def _target(name: str, dataset: str, method: str, figure: str, met: bool) -> dict[str, Any]:
    return {"target": name, "dataset": dataset, "method": method, "figure": figure, "met": met}


def interval_targets(summary: Mapping[tuple[str, str], Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every target of the module docstring, one row per (target, data set, method) it covers.

    Returns:
        Rows ``{"target", "dataset", "method", "figure", "met"}``; ``figure`` is the measured
        text (a mean ± s.e., a count, a gap).

    Example:
        >>> s = {("d", "vi"): {"0.1/conformal_abs/coverage": (0.91, 0.01),
        ...     "0.1/conformal_norm/coverage": (0.89, 0.01), "0.1/cqr/coverage": (0.9, 0.0),
        ...     "0.1/raw/coverage": (0.7, 0.02), "0.1/scaled/coverage": (0.9, 0.01),
        ...     "0.1/isotonic/coverage": (0.95, 0.01), "n_cal": (99.0, 0.0),
        ...     "0.1/conformal_abs/width": (2.0, 0.1), "0.1/conformal_norm/width": (1.5, 0.1),
        ...     "nll/raw": (2.0, 0.1), "nll/scaled": (2.05, 0.1), "max": {"mapie_gap": 0.02}}}
        >>> [t["met"] for t in interval_targets(s)][:4]  # abs, norm, CQR coverage; narrower
        [True, False, True, True]
    """
    rows: list[dict[str, Any]] = []
    for (dataset, method), s in summary.items():
        upper = 0.9 + 1 / (s["n_cal"][0] + 1) + 0.01
        for kind in ("conformal_abs", "conformal_norm", "cqr"):
            mean, se = s[f"0.1/{kind}/coverage"]
            name = f"conformal coverage in [0.90, 0.90 + 1/(n_cal + 1) + 0.01] ({LABELS[kind]})"
            figure = f"{mean:.3f} ± {se:.3f} (upper end {upper:.3f})"
            rows.append(_target(name, dataset, method, figure, 0.9 <= mean <= upper))
    for method in VI_METHODS:
        sets = [d for (d, m) in summary if m == method]
        if not sets:
            continue
        narrower = [
            d
            for d in sets
            if summary[(d, method)]["0.1/conformal_norm/width"][0]
            < summary[(d, method)]["0.1/conformal_abs/width"][0]
        ]
        rows.append(_target(
            "normalised narrower than absolute on >= 3 of 4 sets", "all", method,
            f"{len(narrower)} of {len(sets)}", len(narrower) >= min(3, len(sets)),
        ))  # fmt: skip
    for (dataset, method), s in summary.items():
        gap = s["max"]["mapie_gap"]
        rows.append(_target("equals MAPIE StdConformityScore within 1% (largest gap)", dataset,
                            method, f"{100 * gap:.2f}%", gap <= 0.01))  # fmt: skip
    for (dataset, method), s in summary.items():
        for kind in ("scaled", "isotonic"):
            mean, se = s[f"0.1/{kind}/coverage"]
            name = f"recalibrated ({kind}) coverage within 0.90 ± 0.02"
            figure = f"{mean:.3f} ± {se:.3f}"
            rows.append(_target(name, dataset, method, figure, abs(mean - 0.9) <= 0.02))
        raw, raw_se = s["nll/raw"]
        scaled = s["nll/scaled"][0]
        figure = f"{scaled:.3f} vs {raw:.3f} ± {raw_se:.3f}"
        name = "scaled NLL <= raw NLL + 1 s.e."
        rows.append(_target(name, dataset, method, figure, scaled <= raw + raw_se))
    return rows


def _cell(value: tuple[float, float], digits: int) -> str:
    return f"{value[0]:.{digits}f} ± {value[1]:.{digits}f}"


def _table(
    summary: Mapping[tuple[str, str], Mapping[str, Any]], alpha: str, quantity: str, digits: int
) -> str:
    head = "| data set | method | " + " | ".join(LABELS[k] for k in KINDS) + " |"
    lines = [head, "|" + "---|" * (len(KINDS) + 2)]
    for (dataset, method), s in summary.items():
        cells = [_cell(s[f"{alpha}/{k}/{quantity}"], digits) for k in KINDS]
        lines.append(f"| {dataset} | {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _calibration_table(summary: Mapping[tuple[str, str], Mapping[str, Any]]) -> str:
    lines = [
        "| data set | method | MACE raw | MACE scaled | MACE isotonic | NLL raw | NLL scaled "
        "| scale s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (dataset, method), s in summary.items():
        cells = [_cell(s[f"mace/{k}"], 3) for k in ("raw", "scaled", "isotonic")]
        cells += [_cell(s[f"nll/{k}"], 2) for k in ("raw", "scaled")]
        cells.append(_cell(s["scale_factor"], 2))
        lines.append(f"| {dataset} | {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _targets_table(targets: Sequence[Mapping[str, Any]]) -> str:
    """One line per target: how many of its rows are met, and the misses with figures."""
    order: dict[str, list[Mapping[str, Any]]] = {}
    for row in targets:
        order.setdefault(row["target"], []).append(row)
    lines = ["| target | met | misses (data set / method: figure) |", "|---|---|---|"]
    for name, rows in order.items():
        misses = [f"{r['dataset']} / {r['method']}: {r['figure']}" for r in rows if not r["met"]]
        met = sum(bool(r["met"]) for r in rows)
        lines.append(f"| {name} | {met} of {len(rows)} | {'; '.join(misses) or '-'} |")
    return "\n".join(lines)


def _raw_off(summary: Mapping[tuple[str, str], Mapping[str, Any]]) -> str:
    off = [k for k, s in summary.items() if abs(s["0.1/raw/coverage"][0] - 0.9) > 0.05]
    return (f"Raw 90% coverage is off by more than 0.05 for {len(off)} of {len(summary)} "
            "(data set, method) pairs.")  # fmt: skip


def interval_markdown(records: Sequence[Mapping[str, Any]], header: str) -> str:
    """The full report: coverage, width and Winkler at 90% and 95%, MACE and NLL, targets.

    Args:
        records: :func:`~benchmarks.uci.intervals.interval_task` records.
        header: the lines under the title (command, versions, sizes).
    """
    summary = summarize(records)
    parts = [f"# Prediction intervals on the UCI splits\n\n{header}"]
    for alpha, level in (("0.1", "90%"), ("0.05", "95%")):
        parts.append(f"## {level} intervals: coverage\n\n{_table(summary, alpha, 'coverage', 3)}")
        parts.append(f"## {level} intervals: mean width (original units)\n\n"
                     f"{_table(summary, alpha, 'width', 2)}")  # fmt: skip
        parts.append(f"## {level} intervals: Winkler score (original units, lower is better)\n\n"
                     f"{_table(summary, alpha, 'winkler', 2)}")  # fmt: skip
    parts.append(f"## Calibration: MACE and test NLL\n\n{_calibration_table(summary)}")
    targets = interval_targets(summary)
    parts.append(f"## Targets\n\n{_raw_off(summary)}\n\n{_targets_table(targets)}")
    return "\n\n".join(parts) + "\n"


def readme_markdown(records: Sequence[Mapping[str, Any]], header: str, link: str) -> str:
    """The README's part of the report: the header, the 90% coverage table and the targets,
    with a link to the full report at ``link``."""
    summary = summarize(records)
    targets = interval_targets(summary)
    return (
        f"# Prediction intervals on the UCI splits\n\n{header}\n\n"
        f"## 90% intervals: coverage\n\n{_table(summary, '0.1', 'coverage', 3)}\n\n"
        f"## Targets\n\n{_raw_off(summary)}\n\n{_targets_table(targets)}\n\n"
        f"Widths, Winkler scores, 95% intervals, MACE and NLL: [{link}]({link}).\n"
    )
