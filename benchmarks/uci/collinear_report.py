"""VI's final fits on the collinear, nearly noiseless synthetic set, split by split, before and
after the fix, beside ``bb_alpha``'s.

Three harness runs on the data set of :mod:`benchmarks.uci.synthetic` (20 splits each)::

    python -m benchmarks.uci.synthetic --out DATA/collinear_plant
    # the vi row on the code before the fix (lr 3e-3, no guards), from a checkout of it:
    python -m benchmarks.uci --data DATA --datasets collinear_plant --methods vi --out BEFORE
    # and on this code: the vi row, then the bb_alpha row
    python -m benchmarks.uci --data DATA --datasets collinear_plant --methods vi --out AFTER
    python -m benchmarks.uci --data DATA --datasets collinear_plant --methods bb_alpha --out BBA
    python -m benchmarks.uci.collinear_report BEFORE/uci_runs.jsonl AFTER/uci_runs.jsonl \\
        BBA/uci_runs.jsonl --before-code 542114f

keeps the per-split figures in ``benchmarks/results/uci/collinear_plant.json`` and writes the
table, ``benchmarks/results/uci/collinear_plant.md``. The target: the ``vi`` row's test RMSE
within 2x of ``bb_alpha``'s on every split. ``--seed-spread`` adds the outputs of
:mod:`benchmarks.uci.seed_spread` (a split's finals under other seeds) to the kept figures.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.uci.compare import read_runs  # noqa: E402
from benchmarks.uci.synthetic import SPREAD  # noqa: E402

__all__ = ["RATIO", "figures", "main", "markdown", "paired_ratio"]

RESULTS = ROOT / "benchmarks" / "results" / "uci"
RATIO = 2.0  #: the target: vi's test RMSE at most this times bb_alpha's, on every split
_KEPT = ("rmse", "test_ll", "train_rmse", "search_val_rmse", "flagged")


def figures(runs: Sequence[dict[str, Any]], method: str) -> dict[int, dict[str, Any]]:
    """``{split: {rmse, test_ll, train_rmse, search_val_rmse, flagged, lr}}`` of ``method``'s
    records (a field the run did not record is ``None``).

    Example:
        >>> figures([{"method": "vi", "split": 0, "rmse": 0.1, "config": {"lr": 0.001}}], "vi")
        {0: {'rmse': 0.1, 'test_ll': None, 'train_rmse': None, 'search_val_rmse': None, \
'flagged': None, 'lr': 0.001}}
    """
    out = {}
    for r in runs:
        if r.get("method") == method:
            out[int(r["split"])] = {k: r.get(k) for k in _KEPT} | {"lr": r["config"].get("lr")}
    return dict(sorted(out.items()))


def _cell(x: float | None, fmt: str) -> str:
    return "—" if x is None else format(x, fmt)


def paired_ratio(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, float]:
    """Split by split, ``ours`` test RMSE over ``theirs``: the geometric mean of the ratios, the
    band of its log mean +- 2 standard errors, and on how many splits each row's RMSE is over
    :data:`RATIO` times the other's.

    Example:
        >>> p = paired_ratio({"0": {"rmse": 4.0}, "1": {"rmse": 1.0}},
        ...                  {"0": {"rmse": 1.0}, "1": {"rmse": 4.0}})
        >>> p["geometric_mean"], p["ours_over"], p["theirs_over"]
        (1.0, 1, 1)
    """
    logs = [math.log(ours[s]["rmse"] / theirs[s]["rmse"]) for s in theirs]
    mean, se = statistics.fmean(logs), statistics.stdev(logs) / math.sqrt(len(logs))
    return {
        "geometric_mean": math.exp(mean),
        "low": math.exp(mean - 2 * se),
        "high": math.exp(mean + 2 * se),
        "ours_over": sum(x > math.log(RATIO) for x in logs),
        "theirs_over": sum(x < -math.log(RATIO) for x in logs),
    }


def _worst(runs: dict[str, Any], splits: list[int]) -> str:
    """The worst split's test RMSE, and in target sds."""
    worst = max(runs[str(s)]["rmse"] for s in splits)
    return f"worst test RMSE {worst:.2g} ({worst / SPREAD:.2g} target sds)"


def markdown(data: dict[str, Any]) -> str:
    """The table and the target's line from the kept figures."""
    before, after, bba = data["before"], data["after"], data["bb_alpha"]
    splits = sorted(int(s) for s in bba)
    lines = [
        "# VI on a collinear, nearly noiseless regression",
        "",
        "The data: `python -m benchmarks.uci.synthetic` (11,934 rows; 16 inputs spanning 7 "
        "directions; no noise). The harness's rows, 20 splits; test RMSE and log-likelihood in "
        f"the target's units. Before: the code at {data['before_code']} (vi at lr "
        f"{before[str(splits[0])]['lr']}, no guard). `flagged`: the final fit's in-sample RMSE "
        "is over 5x its search's validation RMSE.",
        "",
        "| split | vi before: RMSE | test LL | vi after: RMSE | test LL | flagged | "
        "bb_alpha: RMSE | test LL | vi after / bb_alpha |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    met = 0
    for s in splits:
        b, a, c = before.get(str(s)), after[str(s)], bba[str(s)]
        ratio = a["rmse"] / c["rmse"]
        met += ratio <= RATIO
        lines.append(
            f"| {s} | {_cell(b and b['rmse'], '.5f')} | {_cell(b and b['test_ll'], '.2f')} | "
            f"{a['rmse']:.5f} | {a['test_ll']:.2f} | {'yes' if a['flagged'] else 'no'} | "
            f"{c['rmse']:.5f} | {c['test_ll']:.2f} | {ratio:.2f} |"
        )
    verdict = "met" if met == len(splits) else "missed"
    pair = paired_ratio(after, bba)
    n = len(splits)
    lines += [
        "",
        f"- before: vi's test RMSE over {RATIO:g}x bb_alpha's on "
        f"{sum(before[str(s)]['rmse'] > RATIO * bba[str(s)]['rmse'] for s in splits)} of {n} "
        f"splits; {_worst(before, splits)}",
        f"- after: within {RATIO:g}x of bb_alpha's on {met} of {n} splits (target: all; "
        f"{verdict}); {_worst(after, splits)}",
        f"- bb_alpha: {_worst(bba, splits)}",
        "- paired, split by split, vi after / bb_alpha: geometric mean "
        f"{pair['geometric_mean']:.2f} (log mean +- 2 se: {pair['low']:.2f} to "
        f"{pair['high']:.2f}); vi's RMSE over {RATIO:g}x bb_alpha's on {pair['ours_over']} "
        f"splits, bb_alpha's over {RATIO:g}x vi's on {pair['theirs_over']}"
        + (
            f": a {RATIO:g}x band on every split is missed both ways, by two rows whose "
            "ratio's band holds 1"
            if pair["low"] <= 1 <= pair["high"] and pair["theirs_over"]
            else ""
        ),
        f"- flagged finals after: {sum(bool(after[str(s)]['flagged']) for s in splits)} of {n}",
    ]
    lines += _seed_lines(data)
    return "\n".join(lines) + "\n"


def _seed_lines(data: dict[str, Any]) -> list[str]:
    """Per split run again under other seeds (``benchmarks/uci/seed_spread.py``): each row's
    range of test RMSE beside the harness's own figure for that split."""
    spreads = data.get("seed_spread", [])
    if not spreads:
        return []
    harness = {"vi": data["after"], "bb_alpha": data["bb_alpha"]}
    lines = [
        "",
        "The same finals (each split's chosen configuration) under other seeds "
        "(`benchmarks/uci/seed_spread.py`): test RMSE, lowest to highest, and its spread.",
        "",
        "| split | row | seeds | lowest | highest | highest / lowest | the harness's run |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in sorted(spreads, key=lambda r: (int(r["split"]), r["method"] != "vi")):
        low, high = min(r["rmse"]), max(r["rmse"])
        own = harness[r["method"]][str(r["split"])]["rmse"]
        lines.append(
            f"| {r['split']} | {r['method']} | {len(r['rmse'])} | {low:.2e} | {high:.2e} | "
            f"{high / low:.1f}x | {own:.2e} |"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", nargs="?", help="the vi run on the code before the fix")
    parser.add_argument("after", nargs="?", help="the vi run on this code")
    parser.add_argument("bb_alpha", nargs="?", help="the bb_alpha run on this code")
    parser.add_argument("--before-code", default="", help="the commit the before run used")
    parser.add_argument(
        "--seed-spread", nargs="+", type=Path, help="benchmarks/uci/seed_spread.py outputs"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    kept = args.out / "collinear_plant.json"
    if args.before and args.after and args.bb_alpha:
        data = {
            "before_code": args.before_code,
            "before": figures(read_runs(args.before), "vi"),
            "after": figures(read_runs(args.after), "vi"),
            "bb_alpha": figures(read_runs(args.bb_alpha), "bb_alpha"),
        }
        kept.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    if args.seed_spread:  # kept beside the harness's figures
        data = json.loads(kept.read_text(encoding="utf-8"))
        data["seed_spread"] = [
            {k: v for k, v in json.loads(p.read_text(encoding="utf-8")).items() if k != "config"}
            for p in args.seed_spread
        ]
        kept.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    data = json.loads(kept.read_text(encoding="utf-8"))  # str keys, as a reader sees them
    text = markdown(data)
    (args.out / "collinear_plant.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
