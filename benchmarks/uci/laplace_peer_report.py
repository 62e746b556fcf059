"""Summaries, targets and the markdown of :mod:`benchmarks.uci.laplace_peer`.

Per data set: each contender's test log-likelihood and RMSE, mean ± standard error over the
splits (:func:`benchmarks.uci.protocol.mean_stderr`, the protocol's); the paired differences
split by split, mean ± the standard error of the differences (:func:`benchmarks.uci.variants.
paired_change`, the sample std of a paired test); and the CPU-time ratio of ours to
laplace-torch (fit + prior precision + predict, summed over the splits). The targets:

1. ``glm_beats_nn``: ours GLM − ours NN sampling > 2 s.e. (paired) on ≥ 3 of the 4 data sets;
2. ``matches_laplace_torch``: ours GLM − laplace-torch's ≥ −1 s.e. (paired) on 4 of 4; and
   ``matches_laplace_torch_unpaired``, the reading of a UCI table: ours ≥ laplace-torch's mean
   − the s.e. of that mean over the splits;
3. ``time``: ours ≤ 1.5 × laplace-torch's CPU time, on every data set.
"""

from __future__ import annotations

import math
import platform
import statistics
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any

import torch

from benchmarks.uci.protocol import RegressionData, mean_stderr, score
from benchmarks.uci.variants import paired_change

__all__ = [
    "CONTENDERS",
    "PAIRS",
    "TARGETS",
    "closed_form_scores",
    "peer_markdown",
    "summarize_peer",
    "versions",
]

#: contender -> its label in the tables.
CONTENDERS = {
    "glm_full": "ours, full GGN, GLM",
    "nn_full": "ours, full GGN, NN sampling",
    "glm_kron": "ours, KFAC, GLM",
    "laplace_torch": "laplace-torch, full GGN, GLM",
    "laplace_torch_at_our_lambda": "laplace-torch, full GGN, GLM, at our λ (diagnostic: λ untimed)",
}

#: paired difference -> (contender, minus contender).
PAIRS = {
    "glm_minus_nn": ("glm_full", "nn_full"),
    "glm_minus_laplace_torch": ("glm_full", "laplace_torch"),
    "kron_minus_full": ("glm_kron", "glm_full"),
    "glm_minus_laplace_torch_at_our_lambda": ("glm_full", "laplace_torch_at_our_lambda"),
}
#: target -> (what it asks, how many data sets must meet it: a share of those run).
TARGETS = {
    "glm_beats_nn": ("GLM − NN sampling > 2 s.e. (paired)", 0.75),
    "matches_laplace_torch": ("ours GLM − laplace-torch ≥ −1 s.e. (paired)", 1.0),
    "matches_laplace_torch_unpaired": (
        "ours GLM ≥ laplace-torch − 1 s.e. of its mean (target 2, unpaired reading)",
        1.0,
    ),
    "time": ("ours fit + predict ≤ 1.5 × laplace-torch's CPU time", 1.0),
}
TIME_LIMIT = 1.5


def _paired(records: Sequence[Mapping[str, Any]], a: str, b: str) -> dict[str, Any] | None:
    def rows(name: str) -> list[dict[str, Any]]:
        return [
            {
                "dataset": r["dataset"],
                "split": r["split"],
                "method": "laplace",
                **r["contenders"][name],
            }
            for r in records
            if name in r["contenders"]
        ]

    out = paired_change(rows(a), rows(b), method="laplace").get(records[0]["dataset"])
    if out is not None:  # one split: no spread, no standard error (None, not NaN, in JSON)
        out = {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in out.items()}
    return out


def closed_form_scores(
    out: Mapping[str, Any], sigma: float, data: RegressionData
) -> dict[str, Any]:
    """The scores (:func:`~benchmarks.uci.protocol.score`) on ``data``'s evaluation rows of the
    Gaussian ``N(out["mean"], out["var"] + σ²)`` (``(M, 1)`` each, normalised units), and the
    ``seconds`` of ``out``'s ``fit``, ``prior`` and ``predict`` with their ``total``.

    Example:
        >>> data = RegressionData(torch.zeros(2, 1), torch.zeros(2, 1), torch.zeros(2, 1),
        ...                       torch.tensor([[0.0], [2.0]]), 2.0, 8)
        >>> out = {"mean": torch.zeros(2, 1), "var": torch.full((2, 1), 0.75), "fit": 1.0,
        ...        "prior": 0.5, "predict": 0.5}
        >>> scores = closed_form_scores(out, 0.5, data)  # N(0, 1): as score's own example
        >>> round(scores["test_ll"], 4), scores["seconds"]["total"]
        (-2.6121, 2.0)
    """
    scales = (out["var"] + sigma**2).sqrt()
    scores = score(out["mean"].unsqueeze(0), scales.unsqueeze(0), data.y_eval, data.y_std)
    seconds = {k: float(out[k]) for k in ("fit", "prior", "predict")}
    return {**scores, "seconds": {**seconds, "total": sum(seconds.values())}}


def summarize_peer(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per data set: ``{"n", "contenders": {name: {test_ll, test_ll_se, rmse, rmse_se,
    seconds, prior_precision}}, "paired": {pair: {test_ll, test_ll_se, rmse, rmse_se, n}},
    "time_ratio", "time_ratio_max", "harness_gap", "closed_minus_sampled_glm": {test_ll,
    test_ll_se, max}, "targets": {target: {"met", "figure"}}}``.

    Example:
        >>> def rec(split, glm, nn, lt, t=1.0):
        ...     c = lambda ll, s: {"test_ll": ll, "rmse": 1.0, "prior_precision": 1.0,
        ...                        "seconds": {"total": s}}
        ...     return {"dataset": "d", "split": split, "harness_test_ll": glm,
        ...             "committed_test_ll": glm, "contenders": {"glm_full": c(glm, t),
        ...             "nn_full": c(nn, t), "glm_kron": c(glm, t), "laplace_torch": c(lt, 2)}}
        >>> out = summarize_peer([rec(0, -1.0, -1.5, -1.0), rec(1, -2.0, -2.4, -2.1)])["d"]
        >>> round(out["paired"]["glm_minus_nn"]["test_ll"], 2), out["time_ratio"]
        (0.45, 0.5)
        >>> [t["met"] for t in out["targets"].values()]
        [True, True, True, True]
    """
    if not records:
        raise ValueError("records must hold at least one split's record")
    out: dict[str, dict[str, Any]] = {}
    for dataset in dict.fromkeys(r["dataset"] for r in records):
        mine = [r for r in records if r["dataset"] == dataset]
        row: dict[str, Any] = {"n": len(mine), "contenders": {}, "paired": {}}
        for name in dict.fromkeys(n for r in mine for n in r["contenders"]):
            runs = [r["contenders"][name] for r in mine if name in r["contenders"]]
            cell: dict[str, Any] = {"n": len(runs)}
            for metric in ("test_ll", "rmse"):
                cell[metric], cell[f"{metric}_se"] = mean_stderr([x[metric] for x in runs])
            cell["seconds"] = sum(x["seconds"]["total"] for x in runs)
            for step in ("fit", "prior", "predict"):
                cell[f"{step}_seconds"] = sum(x["seconds"].get(step, 0.0) for x in runs)
            cell["prior_precision"] = sorted(x["prior_precision"] for x in runs)[len(runs) // 2]
            row["contenders"][name] = cell
        for pair, (a, b) in PAIRS.items():
            if a in row["contenders"] and b in row["contenders"]:
                row["paired"][pair] = _paired(mine, a, b)
        gaps = [
            abs(r["harness_test_ll"] - r["committed_test_ll"])
            for r in mine
            if r.get("committed_test_ll") is not None
        ]
        row["harness_gap"] = max(gaps) if gaps else None
        sampled = [r["contenders"]["glm_full"]["test_ll"] - r["harness_test_ll"] for r in mine]
        row["closed_minus_sampled_glm"] = {
            "test_ll": statistics.fmean(sampled),
            "max": max(sampled),
            "test_ll_se": statistics.stdev(sampled) / math.sqrt(len(sampled))
            if len(sampled) > 1
            else None,
        }
        ratios = [
            r["contenders"]["glm_full"]["seconds"]["total"]
            / r["contenders"]["laplace_torch"]["seconds"]["total"]
            for r in mine
            if "laplace_torch" in r["contenders"]
        ]
        cells = row["contenders"]
        row["time_ratio"] = (
            cells["glm_full"]["seconds"] / cells["laplace_torch"]["seconds"] if ratios else None
        )
        row["time_ratio_max"] = max(ratios) if ratios else None
        row["targets"] = _targets(row)
        out[dataset] = row
    return out


def _targets(row: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    paired = {k: v for k, v in row["paired"].items() if v and v["test_ll_se"] is not None}
    out: dict[str, dict[str, Any]] = {}
    nn = paired.get("glm_minus_nn")
    out["glm_beats_nn"] = (
        {"met": None, "figure": "n/a (fewer than 2 splits)"}
        if nn is None
        else {
            "met": bool(nn["test_ll"] > 2 * nn["test_ll_se"]),
            "figure": f"{nn['test_ll']:+.3f} ± {nn['test_ll_se']:.3f} "
            f"({nn['test_ll'] / nn['test_ll_se']:+.1f} s.e.)",
        }
    )
    lt = paired.get("glm_minus_laplace_torch")
    out["matches_laplace_torch"] = (
        {"met": None, "figure": "n/a (no laplace-torch, or 1 split)"}
        if lt is None
        else {
            "met": bool(lt["test_ll"] >= -lt["test_ll_se"]),
            "figure": f"{lt['test_ll']:+.3g} ± {lt['test_ll_se']:.2g} "
            f"({lt['test_ll'] / lt['test_ll_se']:+.1f} s.e.)",
        }
    )
    cells = row["contenders"]
    if "laplace_torch" not in cells or cells["laplace_torch"]["test_ll_se"] == 0.0:
        out["matches_laplace_torch_unpaired"] = {"met": None, "figure": "n/a"}
    else:
        theirs = cells["laplace_torch"]["test_ll"] - cells["laplace_torch"]["test_ll_se"]
        out["matches_laplace_torch_unpaired"] = {
            "met": bool(cells["glm_full"]["test_ll"] >= theirs),
            "figure": f"{cells['glm_full']['test_ll']:.3f} vs {theirs:.3f}",
        }
    ratio = row["time_ratio"]
    out["time"] = (
        {"met": None, "figure": "n/a"}
        if ratio is None
        else {
            "met": bool(ratio <= TIME_LIMIT),
            "figure": f"{ratio:.3f}× (splits' max {row['time_ratio_max']:.3f}×)",
        }
    )
    return out


def _word(met: bool | None) -> str:
    return {True: "met", False: "**not met**", None: "n/a"}[met]


def _se(value: float | None) -> str:
    return "n/a (1 split)" if value is None else f"{value:.2g}"


def _pm(cell: Mapping[str, Any], metric: str, digits: int = 3) -> str:
    return f"{cell[metric]:.{digits}f} ± {cell[f'{metric}_se']:.{digits}f}"


def peer_markdown(payload: Mapping[str, Any]) -> str:
    """The report: how it was run, a table per data set, the targets.

    Example:
        >>> c = {"test_ll": -1.0, "rmse": 1.0, "prior_precision": 1.0, "seconds": {"total": 1.0}}
        >>> rec = {"dataset": "d", "split": 0, "harness_test_ll": -1.0, "committed_test_ll": None,
        ...        "config": {"epochs": 2}, "config_source": "search", "noise_scale": 0.5,
        ...        "contenders": {"glm_full": c, "nn_full": c}}
        >>> payload = {"command": "cmd", "date": "today", "wall_time_seconds": 1.0,
        ...            "versions": {"torch": "2"}, "settings": {"test_samples": 9},
        ...            "contenders": {"glm_full": "GLM", "nn_full": "NN"},
        ...            "summary": summarize_peer([rec]), "runs": [rec]}
        >>> print(peer_markdown(payload).splitlines()[0])
        # Laplace on UCI: GLM vs NN sampling vs KFAC vs laplace-torch
    """
    summary, labels = payload["summary"], payload["contenders"]
    runs = payload["runs"]
    counts = ", ".join(f"{d} {s['n']}" for d, s in summary.items())
    lines = [
        "# Laplace on UCI: GLM vs NN sampling vs KFAC vs laplace-torch",
        "",
        f"- Command: `{payload['command']}`",
        f"- Date: {payload['date']}; wall time {payload['wall_time_seconds'] / 60:.1f} min; "
        f"{', '.join(f'{k} {v}' for k, v in payload['versions'].items())}",
        f"- Splits: {counts}; "
        f"{payload['settings']['test_samples']} weight draws for NN sampling; one thread",
        "- Each split: the `laplace` row's config chosen on its validation rows "
        f"({', '.join(sorted({r['config_source'] for r in runs}))}), one MAP net, four "
        "posteriors on it; test LL and RMSE in original units, mean ± s.e. over splits. "
        "Paired columns: the mean of the per-split differences ± their s.e. (sample std / √n). "
        "Time: fit + prior precision + predict, summed over splits, ours ÷ laplace-torch's.",
        "- Contenders: " + "; ".join(f"`{k}` {v}" for k, v in labels.items()),
        "",
    ]
    for dataset, row in summary.items():
        gap = row["harness_gap"]
        lines += [
            f"## {dataset} ({row['n']} splits)",
            "",
            "| contender | test LL | RMSE | λ (median) | CPU s, all splits: fit + λ + predict |",
            "|---|---|---|---|---|",
        ]
        for name, cell in row["contenders"].items():
            lines.append(
                f"| {labels.get(name, name)} | {_pm(cell, 'test_ll')} | "
                f"{_pm(cell, 'rmse')} | {cell['prior_precision']:.3g} | "
                f"{cell['seconds']:.2f} = {cell['fit_seconds']:.2f} + "
                f"{cell['prior_seconds']:.2f} + {cell['predict_seconds']:.2f} |"
            )
        lines += ["", "| paired difference | test LL | RMSE |", "|---|---|---|"]
        for pair, cell in row["paired"].items():
            if cell is not None:
                lines.append(
                    f"| {pair.replace('_', ' ')} | {cell['test_ll']:+.3g} ± "
                    f"{_se(cell['test_ll_se'])} | {cell['rmse']:+.3g} ± "
                    f"{_se(cell['rmse_se'])} |"
                )
        if "laplace_torch" in row["contenders"]:
            theirs = row["contenders"]["laplace_torch"]
            ours = row["contenders"]["glm_full"]
            lines += [
                "",
                f"Unpaired: ours {ours['test_ll']:.3f} vs laplace-torch "
                f"{theirs['test_ll']:.3f} − 1 s.e. = "
                f"{theirs['test_ll'] - theirs['test_ll_se']:.3f}.",
            ]
        closed = row["closed_minus_sampled_glm"]
        lines += [
            "",
            "Ours closed-form GLM − the harness's score of the same posterior (the harness scores "
            "the method's `predictive_gaussian`, the same closed form: a consistency check): "
            f"{closed['test_ll']:+.4f} ± {_se(closed['test_ll_se'])} (largest split "
            f"{closed['max']:+.3f}).",
        ]
        if gap is not None:
            lines += [
                "",
                f"The harness's score on these nets against the committed `uci.json` (whose nets "
                f"were trained stacked, the splits of a data set at once): largest gap {gap:.2e}.",
            ]
        lines.append("")
    lines += [
        "## Targets",
        "",
        "| data set | " + " | ".join(t for t, _ in TARGETS.values()) + " |",
        "|---|" + "---|" * len(TARGETS),
    ]
    for dataset, row in summary.items():
        lines.append(
            f"| {dataset} | "
            + " | ".join(
                f"{_word(row['targets'][t]['met'])}: {row['targets'][t]['figure']}" for t in TARGETS
            )
            + " |"
        )
    lines.append("")
    for target, (text, share) in TARGETS.items():
        met = [row["targets"][target]["met"] for row in summary.values()]
        need = -(-share * len(met) // 1)
        lines.append(
            f"- {text}: {sum(m is True for m in met)} of {len(met)} data sets "
            f"(needed {int(need)}): {_word(sum(m is True for m in met) >= need)}"
        )
    return "\n".join(lines) + "\n"


def versions() -> dict[str, str]:
    """The versions a run reports: python, torch, pyro, bnn_pyro, laplace-torch, the platform.

    Example:
        >>> sorted(versions())[:3]
        ['bnn_pyro', 'laplace-torch', 'platform']
    """
    import pyro

    import bnn_pyro

    try:
        peer = metadata.version("laplace-torch")
    except metadata.PackageNotFoundError:
        peer = "not installed"
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "pyro": pyro.__version__,
        "bnn_pyro": bnn_pyro.__version__,
        "laplace-torch": peer,
        "platform": platform.platform(),
    }
