"""The benchmark's targets, checked against the published test log-likelihoods.

* ``vi`` beats "VI (PBP paper)" by more than two standard errors and reaches "MC dropout
  (2016)" (and, shown beside it, whether ``bb_alpha``, VI on the alpha energy, reaches it);
* ``sghmc`` and ``csghmc`` (SG-MCMC) reach "MC dropout (2016)" (the SG-MCMC target: on at
  least 3 of the 4 dev sets);
* ``dropout`` and ``ensemble`` reach their published values within one standard error;
* the best method here reaches "MC dropout (2018 rerun)".

A standard error of a difference combines both sides, ``sqrt(se_ours² + se_published²)``.
"Reaches" means a mean at least as high; "within one standard error" means at least as high
as the published mean minus one combined standard error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.uci.published import PUBLISHED_UCI

__all__ = ["evaluate_targets", "targets_markdown"]

_VI, _DROPOUT_2016 = "VI (PBP paper)", "MC dropout (2016)"
_DROPOUT_2018, _ENSEMBLE = "MC dropout (2018 rerun)", "Deep ensembles (2017)"


def _target(
    name: str,
    dataset: str,
    ours: Mapping[str, Any],
    ref: Mapping[str, Any],
    kind: str,
) -> dict[str, Any]:
    se = math.hypot(float(ours["stderr"]), float(ref.get("stderr") or 0.0))
    diff = float(ours["mean"]) - float(ref["mean"])
    met = {"beats_2se": diff > 2 * se, "reaches": diff >= 0, "within_1se": diff >= -se}[kind]
    return {
        "target": name,
        "dataset": dataset,
        "method": ours["method"],
        "ours": float(ours["mean"]),
        "ours_stderr": float(ours["stderr"]),
        "published": float(ref["mean"]),
        "published_stderr": ref.get("stderr"),
        "difference": diff,
        "combined_stderr": se,
        "met": bool(met),
    }


def evaluate_targets(summary: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Check the targets on the test log-likelihood rows of ``summary``.

    Args:
        summary: rows of :func:`benchmarks.uci.results.summarize`.

    Returns:
        One row per (target, data set) that both sides have: ``target``, ``dataset``,
        ``method``, ``ours`` ± ``ours_stderr``, ``published`` ± ``published_stderr``,
        ``difference`` (ours - published), ``combined_stderr`` and ``met``.

    Example:
        >>> rows = [{"dataset": "yacht", "method": m, "metric": "test_ll", "mean": v,
        ...          "stderr": 0.05} for m, v in (("vi", -1.2), ("dropout", -1.4))]
        >>> for t in evaluate_targets(rows):
        ...     print(t["target"], t["met"])
        vi beats VI (PBP paper) by > 2 s.e. True
        vi reaches MC dropout (2016) True
        dropout within 1 s.e. of MC dropout (2016) True
        dropout within 1 s.e. of MC dropout (2018 rerun) False
        best (vi) reaches MC dropout (2018 rerun) True
    """
    ours = {(r["dataset"], r["method"]): r for r in summary if r["metric"] == "test_ll"}
    published = {(r["dataset"], r["method"]): r for r in PUBLISHED_UCI if r["metric"] == "test_ll"}
    checks = [
        ("vi", _VI, "beats_2se", f"vi beats {_VI} by > 2 s.e."),
        ("vi", _DROPOUT_2016, "reaches", f"vi reaches {_DROPOUT_2016}"),
        ("bb_alpha", _DROPOUT_2016, "reaches", f"bb_alpha reaches {_DROPOUT_2016}"),
        ("sghmc", _DROPOUT_2016, "reaches", f"sghmc reaches {_DROPOUT_2016}"),
        ("csghmc", _DROPOUT_2016, "reaches", f"csghmc reaches {_DROPOUT_2016}"),
        ("dropout", _DROPOUT_2016, "within_1se", f"dropout within 1 s.e. of {_DROPOUT_2016}"),
        ("dropout", _DROPOUT_2018, "within_1se", f"dropout within 1 s.e. of {_DROPOUT_2018}"),
        ("ensemble", _ENSEMBLE, "within_1se", f"ensemble within 1 s.e. of {_ENSEMBLE}"),
    ]
    rows = []
    for dataset in dict.fromkeys(d for d, _ in ours):
        for method, ref_name, kind, name in checks:
            if (dataset, method) in ours and (dataset, ref_name) in published:
                ref = published[(dataset, ref_name)]
                rows.append(_target(name, dataset, ours[(dataset, method)], ref, kind))
        mine = [r for (d, _), r in ours.items() if d == dataset]
        if mine and (dataset, _DROPOUT_2018) in published:
            best = max(mine, key=lambda r: r["mean"])
            name = f"best ({best['method']}) reaches MC dropout (2018 rerun)"
            ref = published[(dataset, _DROPOUT_2018)]
            rows.append(_target(name, dataset, best, ref, "reaches"))
    return rows


def targets_markdown(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Markdown lines of a target table (one line per row of :func:`evaluate_targets`).

    Example:
        >>> rows = [{"dataset": "yacht", "method": "vi", "metric": "test_ll", "mean": -1.2,
        ...          "stderr": 0.05}]
        >>> targets_markdown(evaluate_targets(rows))[2]
        '| yacht | vi beats VI (PBP paper) by > 2 s.e. | -1.20 ± 0.05 | -3.43 ± 0.16 | +2.23 (13.3 s.e.) | yes |'
    """  # noqa: E501
    lines = [
        "| data | target | ours | published | difference (in combined s.e.) | met |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        pub_se = r["published_stderr"]
        published = f"{r['published']:.2f}" + ("" if pub_se is None else f" ± {pub_se:.2f}")
        ratio = r["difference"] / r["combined_stderr"] if r["combined_stderr"] > 0 else math.inf
        lines.append(
            f"| {r['dataset']} | {r['target']} | {r['ours']:.2f} ± {r['ours_stderr']:.2f} | "
            f"{published} | {r['difference']:+.2f} ({ratio:.1f} s.e.) | "
            f"{'yes' if r['met'] else '**no**'} |"
        )
    return lines
