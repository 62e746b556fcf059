"""Two UCI runs compared split by split: ``python -m benchmarks.uci.compare NEW --base OLD``.

For every method and data set both runs hold, the mean and standard error of the per-split
differences (new minus old) of the test log-likelihood and the RMSE
(:func:`benchmarks.uci.variants.paired_change`); a difference more than three standard errors
from zero is marked. Pairing removes the split's own difficulty, which dominates the unpaired
standard errors of the tables. ``NEW`` and ``OLD`` are a ``uci.json`` or a ``uci_runs.jsonl``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.uci.variants import BASE, paired_change

__all__ = ["compare_markdown", "main", "read_runs"]


def read_runs(path: str | Path) -> list[dict[str, Any]]:
    """The per-split records of a ``uci.json`` (its ``runs``) or a ``uci_runs.jsonl``.

    Example:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "r.jsonl")
        >>> _ = open(path, "w").write('{"dataset": "d", "split": 0}\\n')
        >>> read_runs(path)
        [{'dataset': 'd', 'split': 0}]
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return list(json.loads(text)["runs"])


def compare_markdown(new: Sequence[dict], old: Sequence[dict], title: str) -> str:
    """The paired changes of every method both runs hold, as a markdown table.

    Example:
        >>> rec = lambda s, ll: {"dataset": "d", "split": s, "method": "vi", "test_ll": ll,
        ...                      "rmse": 1.0}
        >>> new, old = [rec(0, -1.0), rec(1, -1.2)], [rec(0, -1.1), rec(1, -1.2)]
        >>> table = compare_markdown(new, old, "t")
        >>> table.splitlines()[-1]
        '| vi | d | -1.100 | +0.050 ± 0.050 | +0.000 ± 0.000 | 2 |'
    """
    methods = sorted({r["method"] for r in new} & {r["method"] for r in old})
    lines = [
        f"# {title}",
        "",
        "New minus old, per split, then the mean ± its standard error over the splits both runs",
        "hold; `*` marks a change more than three standard errors from zero.",
        "",
        "| method | data | test LL (new) | change in test LL | change in RMSE | splits |",
        "|---|---|---|---|---|---|",
    ]
    for method in methods:
        for dataset, c in paired_change(new, old, method).items():
            marks = ["*" if abs(c[m]) > 3 * c[f"{m}_se"] else "" for m in ("test_ll", "rmse")]
            lines.append(
                f"| {method} | {dataset} | {c['mean_ll']:.3f} | {c['test_ll']:+.3f} ± "
                f"{c['test_ll_se']:.3f}{marks[0]} | {c['rmse']:+.3f} ± {c['rmse_se']:.3f}"
                f"{marks[1]} | {c['n']} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("new", help="the new run: uci.json or uci_runs.jsonl")
    parser.add_argument("--base", default=str(BASE), help="the old run (default: the committed)")
    parser.add_argument("--title", default="UCI: a run against the committed one")
    parser.add_argument("--out", default=None, help="also write the table here")
    args = parser.parse_args(argv)
    text = compare_markdown(read_runs(args.new), read_runs(args.base), args.title)
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
