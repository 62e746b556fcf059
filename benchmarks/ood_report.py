"""The report of ``benchmarks/ood.py``: its targets and its markdown.

The results of a run are nested dicts (:data:`Results`: shift -> row -> :data:`Entry`, or a
sentence saying why a row has no numbers); a row's best score is its highest AUROC
(:func:`best_score`). Target 1 (:func:`held_out_targets`): every Bayesian method's best AUROC on
the held-out classes ≥ the plain network's entropy AUROC + :data:`HELD_OUT_MARGIN`; target 2
(:func:`laplace_targets`, :func:`every_shift`): the best method ≥ laplace-torch's best AUROC −
:data:`LAPLACE_MARGIN` on every shift. :func:`render` writes the report: a table per shift
(:func:`shift_table`) and the targets (:func:`targets_table`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

PLAIN = "plain network"
LAPLACE_TORCH = "laplace-torch LLLA"
INSTALL = 'pip install ".[ood]"'
SHIFTS = ("held-out classes", "permuted pixels", "uniform noise", "moons: far ring")
SCORES = ("entropy", "mutual information", "max-prob", "energy")
HELD_OUT_MARGIN = 0.02  # target 1: best AUROC >= plain entropy AUROC + this
LAPLACE_MARGIN = 0.01  # target 2: best method >= laplace-torch - this

Metrics = dict[str, float]  # "auroc", "aupr", "fpr95"
Entry = dict[str, Any]  # {"scores": {score: Metrics}, "accuracy": float}
Results = dict[str, dict[str, Entry | str]]  # shift -> row -> Entry, or why there is none


def best_score(scores: Mapping[str, Metrics]) -> str:
    """The score with the highest AUROC (the first in :data:`SCORES` order on a tie).

    Example:
        >>> best_score({"entropy": {"auroc": 0.8}, "max-prob": {"auroc": 0.9}})
        'max-prob'
    """
    if not scores:
        raise ValueError("no scores to choose from")
    order = sorted(scores, key=lambda s: SCORES.index(s) if s in SCORES else len(SCORES))
    return max(order, key=lambda s: scores[s]["auroc"])


# --- the targets ---------------------------------------------------------------------------
def _best_auroc(entry: Entry | str | None) -> float | None:
    if not isinstance(entry, dict):
        return None
    return entry["scores"][best_score(entry["scores"])]["auroc"]


def held_out_targets(results: Results, methods: Sequence[str]) -> list[dict[str, Any]]:
    """Target 1, per method: its best AUROC on the held-out classes ≥ the plain network's
    entropy AUROC + :data:`HELD_OUT_MARGIN`.

    Example:
        >>> row = lambda **a: {"scores": {k: {"auroc": v} for k, v in a.items()}}
        >>> res = {"held-out classes": {PLAIN: row(entropy=0.80), "vi": row(entropy=0.81,
        ...        energy=0.83), "swag": row(entropy=0.815)}}
        >>> [(t["method"], t["met"]) for t in held_out_targets(res, ["vi", "swag"])]
        [('vi', True), ('swag', False)]
    """
    shift = results["held-out classes"]
    threshold = shift[PLAIN]["scores"]["entropy"]["auroc"] + HELD_OUT_MARGIN
    out = []
    for name in methods:
        value = _best_auroc(shift.get(name))
        if value is not None:
            best = best_score(shift[name]["scores"])
            out.append(
                {
                    "method": name,
                    "value": value,
                    "score": best,
                    "threshold": threshold,
                    "met": value >= threshold,
                }
            )
    return out


def laplace_targets(results: Results, methods: Sequence[str]) -> list[dict[str, Any]]:
    """Target 2, per shift: the best method's best AUROC ≥ laplace-torch's best AUROC −
    :data:`LAPLACE_MARGIN` (``met`` is ``None`` where laplace-torch did not run).

    Example:
        >>> row = lambda v: {"scores": {"entropy": {"auroc": v}}}
        >>> res = {s: {"vi": row(0.90), LAPLACE_TORCH: row(0.905)} for s in SHIFTS}
        >>> res["uniform noise"][LAPLACE_TORCH] = row(0.95)
        >>> res["moons: far ring"][LAPLACE_TORCH] = "not installed"
        >>> [t["met"] for t in laplace_targets(res, ["vi"])]
        [True, True, False, None]
    """
    out = []
    for shift in SHIFTS:
        rows = results.get(shift, {})
        scored = [(v, n) for n in methods if (v := _best_auroc(rows.get(n))) is not None]
        if not scored:
            continue
        value, best = max(scored, key=lambda t: t[0])
        reference = _best_auroc(rows.get(LAPLACE_TORCH))
        threshold = None if reference is None else reference - LAPLACE_MARGIN
        out.append(
            {
                "shift": shift,
                "method": best,
                "value": value,
                "reference": reference,
                "threshold": threshold,
                "met": None if threshold is None else value >= threshold,
            }
        )
    return out


def every_shift(results: Results, methods: Sequence[str]) -> list[str]:
    """The methods whose own best AUROC reaches laplace-torch's − :data:`LAPLACE_MARGIN` on
    every shift (none where laplace-torch did not run).

    Example:
        >>> row = lambda v: {"scores": {"entropy": {"auroc": v}}}
        >>> res = {s: {"vi": row(0.9), "swag": row(0.5), LAPLACE_TORCH: row(0.8)} for s in SHIFTS}
        >>> every_shift(res, ["vi", "swag"])
        ['vi']
    """
    out = []
    for name in methods:
        pairs = [
            (_best_auroc(results[s].get(name)), _best_auroc(results[s].get(LAPLACE_TORCH)))
            for s in SHIFTS
            if s in results
        ]
        if pairs and all(
            v is not None and r is not None and v >= r - LAPLACE_MARGIN for v, r in pairs
        ):
            out.append(name)
    return out


# --- the report ----------------------------------------------------------------------------
def _f(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _yes(met: bool | None) -> str:
    return "n/a" if met is None else ("yes" if met else "**no**")


def shift_table(rows: Mapping[str, Entry | str]) -> list[str]:
    """One shift's markdown table: a line per contender (or why it has no numbers)."""
    head = ["contender", "best score", "AUROC", "AUPR", "FPR95"]
    head += [f"AUROC {s}" for s in SCORES] + ["accuracy (in)"]
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    for name, entry in rows.items():
        if isinstance(entry, str):
            lines.append(f"| {name} | {entry} |" + " |" * (len(head) - 2))
            continue
        scores = entry["scores"]
        best = best_score(scores)
        cells = [name, best, *(_f(scores[best][k]) for k in ("auroc", "aupr", "fpr95"))]
        cells += [_f(scores[s]["auroc"]) if s in scores else "—" for s in SCORES]
        cells.append(_f(entry["accuracy"]))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def targets_table(results: Results, methods: Sequence[str]) -> list[str]:
    """Both targets, a line per method (target 1) and per shift (target 2), and a summary."""
    lines = [
        "| target | method / shift | AUROC (score) | threshold | met |",
        "|---|---|---:|---:|---|",
    ]
    first = held_out_targets(results, methods)
    for t in first:
        lines.append(
            f"| held-out classes: best ≥ plain entropy + {HELD_OUT_MARGIN} | {t['method']} | "
            f"{t['value']:.3f} ({t['score']}) | {t['threshold']:.3f} | {_yes(t['met'])} |"
        )
    second = laplace_targets(results, methods)
    for t in second:
        ref = "laplace-torch not installed" if t["reference"] is None else _f(t["threshold"])
        lines.append(
            f"| best method ≥ laplace-torch − {LAPLACE_MARGIN} | {t['shift']}: {t['method']} | "
            f"{t['value']:.3f} | {ref} | {_yes(t['met'])} |"
        )
    missed = [t["method"] for t in first if not t["met"]]
    lines += [
        "",
        f"Held-out classes: {len(first) - len(missed)} of {len(first)} methods reach "
        f"the plain network's entropy + {HELD_OUT_MARGIN}"
        + (f" (not: {', '.join(missed)})." if missed else "."),
    ]
    if any(t["met"] is None for t in second):
        lines.append(f"laplace-torch is not installed here: `{INSTALL}` adds it.")
    else:
        short = [t["shift"] for t in second if not t["met"]]
        every = every_shift(results, methods)
        lines.append(
            f"Against laplace-torch: the best method reaches it − {LAPLACE_MARGIN} on "
            f"{len(second) - len(short)} of {len(second)} shifts"
            + (f" (not: {', '.join(short)})" if short else "")
            + "; one method on every shift: "
            + (", ".join(every) if every else "none")
            + "."
        )
    return lines


def render(results: Results, methods: Sequence[str], header: Sequence[str]) -> str:
    """The markdown report: header lines, a table per shift and the targets."""
    lines = [
        "# Out-of-distribution detection: every classifier, a plain network, laplace-torch",
        "",
        *header,
    ]
    for shift in SHIFTS:
        if shift in results:
            lines += ["", f"## {shift}", "", *shift_table(results[shift])]
    lines += ["", "## Targets", "", *targets_table(results, methods)]
    return "\n".join(lines) + "\n"
