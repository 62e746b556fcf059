"""The UCI dev sets' rows of methods outside the committed table, beside that table's best row.

The committed run (``benchmarks/results/uci/uci.json``) holds the tuned rows. A method run
later on the same splits (an untuned row of :mod:`benchmarks.uci.generic`, say) is reported
here from its own runs file: per data set its test log-likelihood and RMSE, mean ± standard
error over the splits it has, and the committed table's best test log-likelihood; then the
target, per method: its test log-likelihood within one standard error (the best row's) of that
best row on at least 3 of the 4 data sets::

    python -m benchmarks.uci --data benchmarks/uci/data --methods vbll,sngp,dkl \
        --out /tmp/uci_dev --resume
    python -m benchmarks.uci.dev_report /tmp/uci_dev/uci_runs.jsonl

The committed runs, cut to what the report reads and the chosen configurations, are
``benchmarks/results/uci_dev_runs.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import platform
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.uci.gap_report import read_runs, untuned_note
from benchmarks.uci.protocol import mean_stderr

__all__ = ["SETS_NEEDED", "dev_tables"]

RESULTS = Path(__file__).resolve().parents[1] / "results"
SETS_NEEDED = 3  #: data sets of the four where a method must be within one s.e. of the best


def _best(summary: list[dict[str, Any]]) -> dict[str, tuple[str, float, float]]:
    """Per data set, the committed table's best test log-likelihood: ``(method, mean, se)``."""
    best: dict[str, tuple[str, float, float]] = {}
    for row in summary:
        if row["metric"] != "test_ll":
            continue
        if row["dataset"] not in best or row["mean"] > best[row["dataset"]][1]:
            best[row["dataset"]] = (row["method"], row["mean"], row["stderr"])
    return best


def dev_tables(records: list[dict[str, Any]], summary: list[dict[str, Any]]) -> str:
    """Markdown: the new rows by data set (``test LL ± se``, ``RMSE ± se``, splits) with the
    committed table's best row; then the target line of each method.

    Args:
        records: the new methods' per-split records (``dataset``, ``method``, ``test_ll``,
            ``rmse``).
        summary: the committed run's ``summary`` (rows of ``dataset``, ``method``, ``metric``,
            ``mean``, ``stderr``).

    Example:
        >>> runs = [{"dataset": "d", "method": "vbll", "test_ll": v, "rmse": 1.0}
        ...         for v in (-1.0, -1.2)]
        >>> best = [{"dataset": "d", "method": "vi", "metric": "test_ll", "mean": -1.0,
        ...          "stderr": 0.05}]
        >>> text = dev_tables(runs, best)
        >>> "| vbll | -1.10 ± 0.07 (2) |" in text  # se: population sd / sqrt(n)
        True
        >>> text.splitlines()[-1]  # -1.10 is below -1.00 - 0.05
        '- vbll: within on 0 of 1: missed.'

    """
    cells: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        cells[r["method"]][r["dataset"]].append(r)
    best = _best(summary)
    sets = sorted(best)
    head = " | ".join(f"{s} test LL (splits) | {s} RMSE" for s in sets)
    lines = [
        f"| method | {head} |",
        "|---|" + "---|" * (2 * len(sets)),
    ]
    within: dict[str, list[str]] = {}
    for method in sorted(cells):
        row = [method]
        within[method] = []
        for s in sets:
            runs = cells[method].get(s, [])
            if not runs:
                row += ["—", "—"]
                continue
            ll, ll_se = mean_stderr([float(r["test_ll"]) for r in runs])
            rmse, rmse_se = mean_stderr([float(r["rmse"]) for r in runs])
            row += [f"{ll:.2f} ± {ll_se:.2f} ({len(runs)})", f"{rmse:.2f} ± {rmse_se:.2f}"]
            if ll >= best[s][1] - best[s][2]:
                within[method].append(s)
        lines.append("| " + " | ".join(row) + " |")
    tops = [[f"{best[s][1]:.2f} ± {best[s][2]:.2f} ({best[s][0]})", ""] for s in sets]
    lines.append("| *best committed row* | " + " | ".join(c for top in tops for c in top) + " |")
    lines += ["", f"Target (test LL within one s.e. of the best committed row on >= {SETS_NEEDED} "
              "of the 4 sets, the best row's s.e.), per method:"]  # fmt: skip
    for method in sorted(cells):
        hit = within[method]
        verdict = "met" if len(hit) >= SETS_NEEDED else "missed"
        where = f" ({', '.join(hit)})" if hit else ""
        lines.append(f"- {method}: within on {len(hit)} of {len(sets)}{where}: {verdict}.")
    return "\n".join(lines + untuned_note(records)) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Print the tables of a runs file; ``--output`` also writes them there."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", help="the harness's uci_runs.jsonl (or the committed cut)")
    parser.add_argument("--base", default=str(RESULTS / "uci" / "uci.json"))
    parser.add_argument("--output", default=None, help="a markdown file for the report")
    args = parser.parse_args(argv)
    summary = json.loads(Path(args.base).read_text())["summary"]
    text = (
        f"# UCI dev sets: the rows outside the committed table\n\n"
        f"{platform.machine()}; the harness's protocol on the standard splits; mean ± standard "
        "error over the splits run; command: python -m benchmarks.uci.dev_report\n\n"
        + dev_tables(read_runs(args.runs), summary)
    )
    print(text, end="")
    if args.output:
        Path(args.output).write_text(text)


if __name__ == "__main__":
    main()
