"""The variations of the ``vi`` row that were tried, each one command, compared split by
split with a reference run::

    python -m benchmarks.uci.variants alpha --data benchmarks/uci/data \\
        --datasets bostonHousing,concrete --jobs 2 --out /tmp/uci_alpha

runs ``vi`` with the variant's configuration keys laid over its grid
(:data:`benchmarks.uci.variational.OVERRIDES_ENV`), writes the usual ``uci.json`` / ``uci.md``
to ``--out``, then prints, and writes to ``OUT/paired.md``, per data set the change in test
log-likelihood and RMSE paired split by split against ``--base`` (default: the committed
``benchmarks/results/uci/uci.json``): the mean of the per-split differences ± their standard
error. Pairing removes the split's own difficulty, which dominates the unpaired standard errors
of the table. ``benchmarks/results/uci/variants/`` keeps the tables of the runs quoted in
the design notes of the ``vi`` row (:mod:`benchmarks.uci.variational`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks._report import repo_command
from benchmarks.uci.cli import main as uci_main
from benchmarks.uci.variational import ALPHA_KEYS, OVERRIDES_ENV

__all__ = ["VARIANTS", "main", "paired_change", "paired_markdown"]

#: name -> the configuration keys laid over the ``vi`` grid.
VARIANTS: dict[str, dict[str, Any]] = {
    # the black-box alpha energy (bnn_pyro.elbos.alpha), alpha 0.5, 10 particles
    "alpha": ALPHA_KEYS,
    # tempered posteriors (a different model): the KL weighted by beta for the whole run
    "kl0.2": {"kl_weight": 0.2},
    "kl0.05": {"kl_weight": 0.05},
    # the KL weight warmed up linearly from 0 over the first half of each configuration's
    # epochs, checkpoints scored from its end (measured against the run before it; the
    # grid's since, variational.KL_WARMUP), and the grid without it
    "warmup0.5": {"kl_warmup_fraction": 0.5},
    "warmup0": {"kl_warmup_fraction": 0.0},
    # the guide's means from a MAP fit (bnn_pyro.methods.vi.map_init)
    "map": {"init": "map"},
    # twice the kaiming prior std; a 10x smaller initial posterior std
    "prior_gain2": {"prior_gain": 2.0},
    "init_scale1e-3": {"init_scale": 1e-3},
    # the predictive noise factors down to 0.25 (the grid's 0.5 is chosen in every split of
    # energy and yacht and 7 of boston's); measured worse on boston and yacht: the validation
    # rows' smaller factors do not carry over to the test rows
    "factors0.25": {
        "noise_factors": [0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.7, 0.85, 1.0, 1.2, 1.4, 1.7, 2.0]
    },
}

BASE = Path(__file__).resolve().parents[1] / "results" / "uci" / "uci.json"


def paired_change(
    runs: Sequence[Mapping[str, Any]], base: Sequence[Mapping[str, Any]], method: str = "vi"
) -> dict[str, dict[str, Any]]:
    """Per data set: the mean and standard error of ``run - base`` over the splits both hold.

    Args:
        runs, base: per-split records (``dataset``, ``split``, ``method``, ``test_ll``,
            ``rmse``; records with an ``"error"`` are left out).
        method: the method compared.

    Returns:
        ``{dataset: {"n", "test_ll", "test_ll_se", "rmse", "rmse_se", "mean_ll", "base_ll"}}``.

    Example:
        >>> rec = lambda s, ll, r: {"dataset": "d", "split": s, "method": "vi", "test_ll": ll,
        ...                         "rmse": r}
        >>> new = [rec(0, -1.0, 2.0), rec(1, -2.0, 3.0)]
        >>> old = [rec(0, -1.5, 2.0), rec(1, -2.1, 3.5)]
        >>> change = paired_change(new, old)["d"]
        >>> change["n"], round(change["test_ll"], 3), round(change["test_ll_se"], 3)
        (2, 0.3, 0.2)
    """
    if not isinstance(method, str):
        raise TypeError(f"method must be a str, got {type(method).__name__}")

    def keyed(records: Sequence[Mapping[str, Any]]) -> dict[tuple, Mapping[str, Any]]:
        return {
            (r["dataset"], int(r["split"])): r
            for r in records
            if r.get("method") == method and "error" not in r
        }

    new, old = keyed(runs), keyed(base)
    out: dict[str, dict[str, Any]] = {}
    for dataset in sorted({d for d, _ in new}):
        pairs = [(new[k], old[k]) for k in sorted(new) if k[0] == dataset and k in old]
        if not pairs:
            continue
        row: dict[str, Any] = {"n": len(pairs)}
        for metric in ("test_ll", "rmse"):
            diffs = [float(a[metric]) - float(b[metric]) for a, b in pairs]
            row[metric] = statistics.fmean(diffs)
            # the sample std (n - 1) of the differences, a paired test's; not the protocol's
            # mean_stderr, whose population std (n) follows the reference code for the table
            spread = statistics.stdev(diffs) if len(diffs) > 1 else math.nan
            row[f"{metric}_se"] = spread / math.sqrt(len(diffs))
        row["mean_ll"] = statistics.fmean(float(a["test_ll"]) for a, _ in pairs)
        row["base_ll"] = statistics.fmean(float(b["test_ll"]) for _, b in pairs)
        out[dataset] = row
    return out


def paired_markdown(
    variant: str, changes: Mapping[str, Mapping[str, Any]], base: str, command: str
) -> str:
    """The paired change of :func:`paired_change` as a markdown table (written to
    ``OUT/paired.md`` by :func:`main`).

    Example:
        >>> row = {"n": 20, "test_ll": 0.1, "test_ll_se": 0.05, "rmse": -0.2, "rmse_se": 0.1,
        ...        "mean_ll": -2.5, "base_ll": -2.6}
        >>> print(paired_markdown("alpha", {"d": row}, "uci.json", "cmd").splitlines()[-1])
        | d | -2.500 | -2.600 | +0.100 ± 0.050 | -0.200 ± 0.100 | 20 |
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose from {sorted(VARIANTS)}")
    lines = [
        f"# vi, variant `{variant}`: paired change against the reference run",
        "",
        f"- Configuration keys laid over the vi grid: `{json.dumps(VARIANTS[variant])}`",
        f"- Reference: `{base}`",
        f"- Command: `{command}`",
        "",
        "| data | test LL | reference | change in test LL | change in RMSE | splits |",
        "|---|---|---|---|---|---|",
    ]
    for dataset, c in changes.items():
        lines.append(
            f"| {dataset} | {c['mean_ll']:.3f} | {c['base_ll']:.3f} | {c['test_ll']:+.3f} ± "
            f"{c['test_ll_se']:.3f} | {c['rmse']:+.3f} ± {c['rmse_se']:.3f} | {c['n']} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one variant (see the module docstring); the arguments after the variant's name are
    ``python -m benchmarks.uci``'s (``--methods`` is ``vi``), plus ``--base``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("variant", choices=sorted(VARIANTS))
    parser.add_argument("--base", default=str(BASE), help="the reference uci.json")
    parser.add_argument("--out", required=True, help="output folder (not the committed one)")
    raw = list(sys.argv[1:] if argv is None else argv)
    args, rest = parser.parse_known_args(raw)
    if "--methods" in rest:
        parser.error("--methods is vi for a variant")
    base_path = Path(args.base)
    if not base_path.is_file():
        parser.error(f"no reference run at {base_path}")
    if Path(args.out).resolve() == base_path.parent.resolve():
        parser.error("--out must not be the reference run's folder")
    os.environ[OVERRIDES_ENV] = json.dumps(VARIANTS[args.variant])
    try:
        code = uci_main([*rest, "--methods", "vi", "--out", args.out])
    finally:
        del os.environ[OVERRIDES_ENV]
    runs = json.loads((Path(args.out) / "uci.json").read_text())["runs"]
    reference = json.loads(base_path.read_text())
    base = reference["runs"]
    changes = paired_change(runs, base)
    command = "python -m benchmarks.uci.variants " + repo_command(raw)
    label = f"{_shown(base_path)} (run of {reference.get('date', 'unknown date')})"
    table = paired_markdown(args.variant, changes, label, command)
    (Path(args.out) / "paired.md").write_text(table + "\n")
    print(f"vi, variant {args.variant} {VARIANTS[args.variant]}, paired against {base_path}:")
    for dataset, c in changes.items():
        print(
            f"  {dataset}: test LL {c['mean_ll']:.3f} (reference {c['base_ll']:.3f}), change "
            f"{c['test_ll']:+.3f} ± {c['test_ll_se']:.3f}; RMSE {c['rmse']:+.3f} ± "
            f"{c['rmse_se']:.3f} ({c['n']} splits)"
        )
    return code


def _shown(path: Path) -> str:
    """``path`` relative to the repository when inside it (tables do not name a machine)."""
    root = Path(__file__).resolve().parents[2]
    try:
        return str(path.resolve().relative_to(root))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    raise SystemExit(main())
