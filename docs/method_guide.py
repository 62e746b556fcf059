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


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + [
        "| " + " | ".join(r) + " |" for r in rows
    ]


def page_markdown() -> str:
    """The whole page: a recommendation computed from the columns, then two tables (what a
    method costs and how well it fits; how good its uncertainty is), each listing every
    registered method."""
    uci = uci_columns(_read(RESULTS / "uci" / "uci.json"))
    coverage = coverage_column(_read(RESULTS / "uci" / "intervals.json"))
    ood_payload = _read(RESULTS / "ood.json")
    ood = ood_columns(ood_payload, SHIFTS)
    beyond = no_data_columns(_read(RESULTS / "no_data.json"))
    registered = specs()
    fit_rows, uq_rows = [], []
    for name, summary, stacked in registered:
        fit = uci.get(name)
        fit_rows.append(
            [
                f"`{name}`",
                summary,
                "—" if fit is None else f"{fit['rank']:.1f} of {fit['of']}",
                "—" if fit is None else f"{fit['seconds']:.0f} s",
                "yes" if stacked else "no",
            ]
        )
        uq_rows.append(
            [
                f"`{name}`",
                _cell(coverage.get(name), 3),
                *(_cell(v, 3) for v in ood.get(name, [None] * len(SHIFTS))),
                *(_cell(v, 2) for v in beyond.get(name, [None, None])),
            ]
        )
    for name in ("plain network", "laplace-torch LLLA"):
        if name in ood:
            uq_rows.append([f"{name} (for comparison)", "—", *(_cell(v, 3) for v in ood[name])])
            uq_rows[-1] += ["—", "—"]
    if "NUTS (reference)" in beyond:
        nuts = beyond["NUTS (reference)"]
        uq_rows.append(["NUTS (the 1-D reference)", *["—"] * 4, _cell(nuts[0], 2), "—"])
    names = {name for name, _, _ in registered}
    picks, recommend = [], []
    if uci:
        best = min(uci, key=lambda m: uci[m]["rank"])
        cheap = min(uci, key=lambda m: uci[m]["seconds"])
        picks.append(f"* best UCI test log-likelihood on average: `{best}`.")
        picks.append(f"* cheapest UCI protocol per split: `{cheap}`.")
        recommend.append(
            f"* **Start** with `vi`, the library's core and the model every Pyro idiom works on; "
            f"for the best held-out log-likelihood on the UCI sets try `{best}`, for the "
            f"cheapest fit `{cheap}`."
        )
    if coverage:
        closest = min(coverage, key=lambda m: abs(coverage[m] - NOMINAL))
        picks.append(f"* raw 90% intervals closest to 90%: `{closest}`.")
        recommend.append(
            f"* **Switch** for intervals you can rely on: `{closest}`'s raw intervals come "
            "closest to their level, and `bnn_pyro.calibration` (conformal, recalibration) "
            "makes any method's hold it."
        )
    for i, shift in enumerate(SHIFTS):
        scored = {m: v[i] for m, v in ood.items() if m in names and v[i] is not None}
        if scored:
            picks.append(f"* best at telling {shift} apart: `{max(scored, key=scored.get)}`.")
    covered = {m: v[0] for m, v in beyond.items() if m in names and v[0] is not None}
    if covered:
        far = max(covered, key=covered.get)
        recommend.append(
            f"* **Beyond the data**, `{far}`'s band covers the true function most often on the "
            "1-D problems; most bands do not (the last columns, and the note under the second "
            "table): read a band far from the training inputs with care."
        )
    return "\n".join(
        [
            "<!-- generated by docs/method_guide.py on every build: do not edit -->",
            "",
            "# Which method?",
            "",
            *recommend,
            "",
            "Every method answers to the same contract (`bp.make(name, net, likelihood)`, `fit`,",
            "`predict`, `save`, `load`), so trying another is one word. The tables put the",
            "benchmarks' measurements side by side. Each column comes from a results file the",
            "benchmark scripts wrote (see [Results](results.md)); a dash means not measured.",
            "Read each figure with its benchmark's caveats: the UCI columns are four small",
            "regression sets, the OOD columns one seeded run on digits and two moons, and each",
            "benchmark sets a method up its own way (the UCI `laplace` row is the GGN Laplace",
            "with the GLM predictive, for example; the Results page says how).",
            "",
            "## Cost and fit",
            "",
            "* **UCI test log-lik., mean rank**: each method's place by mean test",
            "  log-likelihood on each of the four UCI sets, averaged (1 is best).",
            "* **UCI seconds per split**: the whole protocol for one split on one CPU thread,",
            "  the hyper-parameter search and the final fit; a method with a larger grid costs",
            "  more here than one fit would, and where a method trains the splits stacked, this",
            "  is each split's share of the stacked run.",
            "* **stacked**: whether `fit_stacked` trains many models (seeds, folds, chains) in",
            "  one stacked pass.",
            "",
            *_table(
                [
                    "method",
                    "what it is",
                    "UCI test log-lik., mean rank",
                    "UCI s / split",
                    "stacked",
                ],
                fit_rows,
            ),
            "",
            "## Uncertainty",
            "",
            "* **90% coverage**: the share of UCI test targets inside the method's own raw 90%",
            "  predictive interval, averaged over the sets. Below 0.9 is over-confident;",
            "  `bnn_pyro.calibration` fixes either side (recalibration, or conformal intervals",
            "  with a guarantee).",
            "* **OOD AUROC**: how well the best of the method's uncertainty scores separates",
            "  inputs unlike the training data (0.5 is chance, 1 perfect), for a classifier",
            "  trained on the digits 0–4 (held-out digits 5–9; noise images) or on two moons",
            "  (a ring far around them).",
            "* **1-D beyond**: on four 1-D problems with a known function, the share of the",
            "  range beyond the training data where the true function lies inside the",
            "  method's 95 percent band, averaged; **1-D sd**: the share of the whole grid",
            "  where its standard deviation is within a factor of 2 of a converged NUTS run on",
            "  the same model.",
            "",
            *_table(
                [
                    "method",
                    "90% coverage",
                    "AUROC: digits 5–9",
                    "AUROC: noise",
                    "AUROC: far ring",
                    "1-D beyond",
                    "1-D sd",
                ],
                uq_rows,
            ),
            "",
            "Why the far ring reads below chance for most rows: a ReLU net's logits grow",
            "linearly with the distance from the data, so far away it is *more* confident,",
            "not less, and every score built on its predictions ranks the far points as more",
            "familiar than the data. The plain network's and laplace-torch's rows read the same:",
            "it is the net's, not the inference's. The distance-aware head is built against",
            "exactly this: `sngp`'s last layer is a Gaussian process on a net whose layers keep",
            "input distances, so its variance comes back to its prior's far from the data. For",
            "a regression, `dkl` puts an exact (or sparse) Gaussian process on the net's",
            "features; it does not classify.",
            *(
                [
                    "NUTS's row in the 1-D columns says the same of the first of them: the",
                    "exact posterior of the same net and prior misses the truth beyond the",
                    "data as well.",
                ]
                if beyond.get("NUTS (reference)", [1.0])[0] < 0.5
                else []
            ),
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
