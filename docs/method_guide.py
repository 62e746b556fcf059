"""MkDocs hook: the "Which method?" page, generated on every build from the benchmarks' results.

Nothing on the page is typed by hand but its prose, which quotes no figure: every number comes
from a results file the benchmark scripts wrote (``benchmarks/results/uci/uci.json``,
``benchmarks/results/uci/intervals.json``, ``benchmarks/results/ood.json``,
``benchmarks/results/no_data.json``), and what a method
can do (train stacked, its summary) from its ``spec.py``. A method a results file does not
cover shows a dash: not measured. The page's picks (the best of each column) are computed.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PAGE = "which-method.md"
NOMINAL = 0.9  # the interval level of the coverage column


def _read(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


def specs() -> list[tuple[str, str, bool]]:
    """``(name, summary, trains stacked)`` of every registered method, in registry order."""
    from bnn_pyro.spec import discover_specs  # reads the specs; imports no method class

    ordered = sorted(discover_specs(), key=lambda s: s.rank)
    return [(s.name, s.summary, s.stacked_fit is not None) for s in ordered]


def uci_columns(payload: Mapping[str, Any] | None) -> dict[str, dict[str, float]]:
    """Per method: its mean rank by test log-likelihood over the data sets (1 is best), how
    many methods were ranked, and the mean seconds per split (search and final fit).

    Example:
        >>> runs = [{"dataset": d, "method": m, "search_seconds": 1.0, "final_seconds": 1.0}
        ...         for d in "ab" for m in "xy"]
        >>> summary = [{"dataset": d, "method": m, "metric": "test_ll", "mean": v}
        ...            for d, m, v in [("a", "x", -1.0), ("a", "y", -2.0), ("b", "x", -3.0),
        ...                            ("b", "y", -2.5)]]
        >>> uci_columns({"summary": summary, "runs": runs})["x"]
        {'rank': 1.5, 'of': 2, 'seconds': 2.0}
    """
    if not payload:
        return {}
    by_set: dict[str, dict[str, float]] = {}
    for row in payload["summary"]:
        if row["metric"] == "test_ll":
            by_set.setdefault(row["dataset"], {})[row["method"]] = float(row["mean"])
    ranks: dict[str, list[int]] = {}
    for scores in by_set.values():
        for place, method in enumerate(sorted(scores, key=scores.__getitem__, reverse=True), 1):
            ranks.setdefault(method, []).append(place)
    seconds: dict[str, list[float]] = {}
    for run in payload["runs"]:
        if "error" not in run:
            total = float(run["search_seconds"]) + float(run["final_seconds"])
            seconds.setdefault(run["method"], []).append(total)
    return {
        m: {
            "rank": statistics.mean(r),
            "of": max(len(s) for s in by_set.values()),
            "seconds": statistics.mean(seconds[m]),
        }
        for m, r in ranks.items()
    }


def coverage_column(payload: Mapping[str, Any] | None) -> dict[str, float]:
    """Per method: the mean over data sets of its raw 90% interval's test coverage.

    Example:
        >>> rec = lambda d, c: {"dataset": d, "method": "x",
        ...                     "intervals": {"0.1": {"raw": {"coverage": c}}}}
        >>> coverage_column({"records": [rec("a", 0.8), rec("a", 0.9), rec("b", 0.95)]})
        {'x': 0.9}
    """
    if not payload:
        return {}
    cells: dict[str, dict[str, list[float]]] = {}
    for record in payload["records"]:
        if "error" not in record:
            value = float(record["intervals"]["0.1"]["raw"]["coverage"])
            cells.setdefault(record["method"], {}).setdefault(record["dataset"], []).append(value)
    return {
        m: round(statistics.mean(statistics.mean(v) for v in sets.values()), 12)
        for m, sets in cells.items()
    }


def ood_columns(payload: Mapping[str, Any] | None, shifts: tuple[str, ...]) -> dict[str, list]:
    """Per contender: its best AUROC on each of ``shifts`` (``None`` where it has none).

    Example:
        >>> entry = {"scores": {"entropy": {"auroc": 0.9}, "max-prob": {"auroc": 0.95}}}
        >>> ood_columns({"results": {"s": {"x": entry, "y": "not installed"}}}, ("s",))
        {'x': [0.95], 'y': [None]}
    """
    if not payload:
        return {}
    out: dict[str, list] = {}
    for i, shift in enumerate(shifts):
        for name, entry in payload["results"].get(shift, {}).items():
            best = None
            if isinstance(entry, dict):
                best = max(float(m["auroc"]) for m in entry["scores"].values())
            out.setdefault(name, [None] * len(shifts))[i] = best
    return out


def no_data_columns(payload: Mapping[str, Any] | None) -> dict[str, list[float]]:
    """Per method of the 1-D benchmark (its registry name): the mean over the problems of the
    share of the extrapolation range where the true function is covered, and of the share of
    the whole grid where its sd is within 2x NUTS's.

    Example:
        >>> cell = lambda c, ok: {"extrapolation": {"cover": c}, "grid_sd_ok": ok}
        >>> no_data_columns({"a": {"vi": cell(0.0, 0.5)}, "b": {"vi": cell(1.0, 0.7)}})
        {'vi': [0.5, 0.6]}
    """
    if not payload:
        return {}
    cells: dict[str, list[tuple[float, float]]] = {}
    for methods in payload.values():
        for name, row in methods.items():
            cells.setdefault(name, []).append((row["extrapolation"]["cover"], row["grid_sd_ok"]))
    return {
        name: [round(statistics.mean(v[i] for v in values), 12) for i in (0, 1)]
        for name, values in cells.items()
    }


def _cell(value: float | None, digits: int) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


SHIFTS = ("held-out classes", "uniform noise", "moons: far ring")


def page_markdown() -> str:
    """The whole page."""
    uci = uci_columns(_read(RESULTS / "uci" / "uci.json"))
    coverage = coverage_column(_read(RESULTS / "uci" / "intervals.json"))
    ood_payload = _read(RESULTS / "ood.json")
    ood = ood_columns(ood_payload, SHIFTS)
    beyond = no_data_columns(_read(RESULTS / "no_data.json"))
    rows = []
    for name, summary, stacked in specs():
        fit = uci.get(name)
        rows.append(
            [
                f"`{name}`",
                summary,
                "yes" if stacked else "no",
                "—" if fit is None else f"{fit['rank']:.1f} of {fit['of']}",
                "—" if fit is None else f"{fit['seconds']:.0f} s",
                _cell(coverage.get(name), 3),
                *(_cell(v, 3) for v in ood.get(name, [None] * len(SHIFTS))),
                *(_cell(v, 2) for v in beyond.get(name, [None, None])),
            ]
        )
    for name in ("plain network", "laplace-torch LLLA"):
        if name in ood:
            dashes = ["—"] * 4
            rows.append(
                [name, "for comparison", *dashes, *(_cell(v, 3) for v in ood[name]), "—", "—"]
            )
    if "NUTS (reference)" in beyond:
        nuts = beyond["NUTS (reference)"]
        rows.append(["NUTS", "the 1-D reference", *["—"] * 7, _cell(nuts[0], 2), "—"])
    head = (
        "| method | what it is | `fit_stacked` | UCI test log-lik., mean rank | UCI seconds "
        "per split | raw 90% interval, coverage | OOD AUROC: held-out digits | OOD AUROC: "
        "noise images | OOD AUROC: far from two moons | 1-D, beyond the data: true f covered "
        "| 1-D: sd within 2x of NUTS |"
    )
    table = [head, "|" + "---|" * 11] + ["| " + " | ".join(r) + " |" for r in rows]
    picks = []
    if uci:
        best = min(uci, key=lambda m: uci[m]["rank"])
        cheap = min(uci, key=lambda m: uci[m]["seconds"])
        picks.append(f"* best UCI test log-likelihood on average: `{best}`;")
        picks.append(f"* cheapest UCI protocol per split: `{cheap}`;")
    if coverage:
        closest = min(coverage, key=lambda m: abs(coverage[m] - NOMINAL))
        picks.append(f"* raw 90% intervals closest to 90%: `{closest}`;")
    registered = {name for name, _, _ in specs()}
    for i, shift in enumerate(SHIFTS):
        scored = {m: v[i] for m, v in ood.items() if m in registered and v[i] is not None}
        if scored:
            picks.append(f"* best at telling {shift} apart: `{max(scored, key=scored.get)}`;")
    return "\n".join(
        [
            "<!-- generated by docs/method_guide.py on every build: do not edit -->",
            "",
            "# Which method?",
            "",
            "Every method answers to the same contract (`bp.make(name, net, likelihood)`, `fit`,",
            "`predict`, `save`, `load`), so trying another is one word. This page puts the",
            "benchmarks' measurements side by side to choose where to start. Each column comes",
            "from a results file the benchmark scripts wrote (see [Results](results.md)); a",
            "dash means not measured. Read each figure with its benchmark's caveats: the UCI",
            "columns are four small regression sets, the OOD columns one seeded run on digits",
            "and two moons, and each benchmark sets a method up its own way (the UCI `laplace`",
            "row is the GGN Laplace with the GLM predictive, for example; the Results page",
            "says how).",
            "",
            "* **UCI test log-lik., mean rank**: each method's place by mean test",
            "  log-likelihood on each of the four UCI sets, averaged (1 is best).",
            "* **UCI seconds per split**: the whole protocol for one split on one CPU thread,",
            "  the hyper-parameter search and the final fit; a method with a larger grid costs",
            "  more here than one fit would, and where a method trains the splits stacked, this",
            "  is each split's share of the stacked run.",
            "* **raw 90% interval, coverage**: the share of UCI test targets inside the",
            "  method's own 90% predictive interval, averaged over the sets. Below 0.9 is",
            "  over-confident; `bnn_pyro.calibration` fixes either side (recalibration, or",
            "  conformal intervals with a guarantee).",
            "* **OOD AUROC**: how well the best of the method's uncertainty scores separates",
            "  inputs unlike the training data (0.5 is chance, 1 perfect), for a classifier",
            "  trained on the digits 0–4 or on two moons.",
            "* **1-D, beyond the data**: on four 1-D problems with a known function, the share",
            "  of the range beyond the training data where the true function lies inside the",
            "  method's 95 percent band, averaged; and the share of the whole grid where its",
            "  standard deviation is within a factor of 2 of a converged NUTS run on the same",
            "  model. NUTS's own row shows that the first is a property of the model (the net",
            "  and its prior), not only of the inference.",
            "* **`fit_stacked`**: whether many models (seeds, folds, chains) train in one",
            "  stacked pass.",
            "",
            *table,
            "",
            "Computed from the columns:",
            "",
            *picks,
            "",
            "No method has been measured on a GPU in these tables; every figure is from a CPU.",
            "",
        ]
    )


def on_files(files, config):
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=page_markdown()))
    return files
