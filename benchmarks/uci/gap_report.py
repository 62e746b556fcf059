"""The report of the UCI gap and tail splits: 95% interval coverage and test log-likelihood.

Reads the harness's runs file of a run on the folders :mod:`benchmarks.uci.gap_splits` wrote
and writes one table per kind of split: per method and data set, the mean over the splits
(one per input feature) of the share of test targets inside the predictive 95% interval and of
the test log-likelihood, each with its standard error; then the target: the best method's
coverage at least 0.90 on at least 3 of the 4 data sets' gap splits::

    python -m benchmarks.uci.gap_splits --data benchmarks/uci/data --out /tmp/uci_gap
    python -m benchmarks.uci --data /tmp/uci_gap --out /tmp/uci_gap_out --jobs 2
    python -m benchmarks.uci --data /tmp/uci_gap --out /tmp/uci_gap_out --jobs 2 --resume \
        --datasets bostonHousing_gap,bostonHousing_tail --splits 6-12  # 6-7: concrete, energy
    python -m benchmarks.uci.gap_report /tmp/uci_gap_out/uci_runs.jsonl

The committed run's records, cut to what the report reads and the chosen configurations, are
``benchmarks/results/uci_gap_runs.jsonl``.

(The harness's ``--splits all`` is the fewest splits of the sets it runs: yacht's 6.)
"""

from __future__ import annotations

import argparse
import json
import platform
from collections import defaultdict
from pathlib import Path

from benchmarks.uci.generic import generic_grid
from benchmarks.uci.method import DatasetInfo
from benchmarks.uci.protocol import mean_stderr
from benchmarks.uci.registry import DEV_METHODS, available_methods

__all__ = ["COVERAGE_TARGET", "gap_tables", "read_runs", "untuned_note"]

RESULTS = Path(__file__).resolve().parents[1] / "results" / "uci_gap.md"
COVERAGE_TARGET = 0.90  #: the best method's coverage on the gap splits
SETS_NEEDED = 3  #: of the four data sets


def read_runs(path: str | Path) -> list[dict]:
    """The records of a harness runs file (one JSON object per line)."""
    lines = Path(path).read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def gap_tables(records: list[dict]) -> str:
    """Markdown: a table per kind (``gap``, ``tail``), methods by data sets, ``coverage ± se``
    and ``test LL ± se``; then the coverage target on the gap splits.

    Example:
        >>> rows = [{"dataset": "toy_gap", "split": k, "method": "vi", "coverage_95": c,
        ...          "test_ll": -1.0} for k, c in enumerate([0.9, 1.0])]
        >>> text = gap_tables(rows)
        >>> "| vi | 0.950 ± 0.035 | -1.00 ± 0.00 |" in text  # se: population sd / sqrt(n)
        True
    """
    cells: dict[str, dict[str, dict[str, list[dict]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for r in records:
        name, _, kind = r["dataset"].rpartition("_")
        if kind not in ("gap", "tail") or "coverage_95" not in r:
            continue
        cells[kind][name][r["method"]].append(r)
    lines = []
    for kind in ("gap", "tail"):
        if kind not in cells:
            continue
        sets = sorted(cells[kind])
        methods = sorted({m for s in sets for m in cells[kind][s]})
        lines += [f"## {kind} splits", ""]
        lines.append("| method | " + " | ".join(f"{s} coverage | {s} test LL" for s in sets) + " |")
        lines.append("|---" * (2 * len(sets) + 1) + "|")
        for method in methods:
            row = []
            for s in sets:
                runs = cells[kind][s].get(method, [])
                if not runs:
                    row += ["—", "—"]
                    continue
                c, c_se = mean_stderr([r["coverage_95"] for r in runs])
                ll, ll_se = mean_stderr([r["test_ll"] for r in runs])
                row += [f"{c:.3f} ± {c_se:.3f}", f"{ll:.2f} ± {ll_se:.2f}"]
            lines.append(f"| {method} | " + " | ".join(row) + " |")
        lines.append("")
    if "gap" in cells:
        best = {}
        for s, by_method in sorted(cells["gap"].items()):
            means = {m: mean_stderr([r["coverage_95"] for r in runs])[0]
                     for m, runs in by_method.items()}  # fmt: skip
            method = max(means, key=means.get)
            best[s] = (method, means[method])
        met = sum(c >= COVERAGE_TARGET for _, c in best.values())
        listed = ", ".join(f"{s}: {m} {c:.3f}" for s, (m, c) in best.items())
        verdict = "met" if met >= SETS_NEEDED else "missed"
        lines.append(
            f"Target (best method's gap coverage >= {COVERAGE_TARGET} on >= {SETS_NEEDED} "
            f"of {len(best)} sets): {verdict}, {met} of {len(best)}. Best per set: {listed}."
        )
    lines += untuned_note(records)
    return "\n".join(lines).rstrip() + "\n"


def untuned_note(records: list[dict]) -> list[str]:
    """The lines that name the records' untuned rows (none if every row is tuned): a method
    with no tuned row, or a run of a dev row's method with the untuned row's configuration
    (:func:`~benchmarks.uci.generic.generic_grid`: runs made before that method had a grid),
    with the data sets it is untuned on where it is tuned on others.

    Example:
        >>> tuned = {"method": "vbll", "config": {"epochs": 8, "lr": 1e-3, "prior_scale": 1.0}}
        >>> old = {"method": "sngp", "config": {"epochs": 8, "lr": 1e-3, "batch_size": 32}}
        >>> untuned_note([tuned]), untuned_note([tuned, old, {"method": "vbnn"}])[1][:28]
        ([], 'Untuned rows (sngp; vbnn): t')
        >>> tuned_here = {**tuned, "method": "sngp", "dataset": "energy_gap"}
        >>> untuned_note([{**old, "dataset": "yacht_gap"}, tuned_here])[1][:33]
        'Untuned rows (sngp on yacht): the'

    """
    generic = generic_grid(DatasetInfo("any", 100, 1))[0]
    generic.pop("epochs")

    def untuned(record: dict) -> bool:
        if record["method"] in available_methods():
            return False
        config = dict(record.get("config") or {})
        config.pop("epochs", None)
        return record["method"] not in DEV_METHODS or config == generic

    where: dict[str, set[str]] = {}
    everywhere: dict[str, set[str]] = {}
    for r in records:
        base = r.get("dataset", "").rsplit("_", 1)[0]
        everywhere.setdefault(r["method"], set()).add(base)
        if untuned(r):
            where.setdefault(r["method"], set()).add(base)
    if not where:
        return []
    named = [
        m if where[m] == everywhere[m] else f"{m} on {', '.join(sorted(where[m]))}"
        for m in sorted(where)
    ]
    return [
        "",
        f"Untuned rows ({'; '.join(named)}): the harness's one configuration for a method "
        "without a grid of its own (`benchmarks/uci/generic.py`: Adam at 1e-3, batch 32, "
        "about 10,000 steps), not a search.",
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", help="the harness's uci_runs.jsonl of the gap/tail run")
    parser.add_argument("--out", default=str(RESULTS), help="markdown file to write")
    args = parser.parse_args(argv)
    import pyro
    import torch

    header = (
        "# UCI gap and tail splits\n\n"
        f"torch {torch.__version__}, pyro {pyro.__version__}, {platform.machine()}; the "
        "harness's grids and protocol on the splits of benchmarks/uci/gap_splits.py; mean ± "
        "standard error over the splits (one per input feature); command: python -m "
        "benchmarks.uci.gap_report\n\n"
    )
    text = header + gap_tables(read_runs(args.runs))
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
