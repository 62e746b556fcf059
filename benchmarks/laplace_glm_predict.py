"""The diagonal Laplace's closed-form GLM predictive and its curvature: the per-layer path against
the full Jacobians, side by side in one process.

Where every Bayesian parameter is a plain ``nn.Linear``'s weight or bias, the diagonal structure
takes ``diag(H)`` and the GLM variance ``diag(J Σ Jᵀ)`` from each layer's output Jacobians ``δ``
and inputs ``a`` (a weight's Jacobian is ``δ ⊗ a``: :func:`bnn_pyro.methods.laplace.curvature.
layer_rows`); ``curvature.PER_LAYER = False`` sends it through the full Jacobians
``(rows, O, P)``, the path it took before. Two nets: the 784→256→256→10 ReLU classifier
(270k weights), and a small 20→64→64→1 tanh regression net. Timed, on one thread, the median of
``repeats`` round-robin calls after a warm-up on a few rows: ``fit(x, y, epochs=0)`` (the GGN
curvature) on the fit rows and ``predict`` (the closed-form GLM mean and variance, through the
probit approximation for the classifier) on the predict rows. Also the largest relative gap
between the two paths' ``diag(H)`` (against its largest entry) and predicted variance (per
entry), and for reference the 20-draw sampled GLM predictive (``link_approx="mc"``) where there
is a softmax. No time is asserted.

Run: ``python benchmarks/laplace_glm_predict.py [--quick] [--repeats N] [--out PATH]``;
``--quick``: small sizes, a smoke run.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone

import torch
import torch.nn as nn
from _report import publish  # benchmarks/_report.py (scripts run from this folder)

from bnn_pyro.methods.laplace import curvature
from bnn_pyro.methods.laplace.laplace import LaplaceApproximation

#: name: (layer widths, task, fit rows, predict rows)
NETS = {
    "full": {
        "784→256→256→10 classifier": ((784, 256, 256, 10), "classification", 1_000, 2_000),
        "20→64→64→1 regression": ((20, 64, 64, 1), "regression", 1_000, 2_000),
    },
    "quick": {
        "64→32→32→10 classifier": ((64, 32, 32, 10), "classification", 100, 200),
        "20→16→1 regression": ((20, 16, 1), "regression", 100, 200),
    },
}
PATHS = {"full Jacobians": False, "per layer": True}


def problem(
    widths: tuple[int, ...], task: str, rows: int
) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """The net (ReLU for a classifier, tanh for regression) and ``rows`` inputs and targets."""
    torch.manual_seed(0)
    act = nn.ReLU if task == "classification" else nn.Tanh
    layers: list[nn.Module] = []
    for i, (d_in, d_out) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        layers += [nn.Linear(d_in, d_out)] + ([act()] if i < len(widths) - 2 else [])
    x = torch.randn(rows, widths[0])
    if task == "classification":
        return nn.Sequential(*layers), x, torch.randint(0, widths[-1], (rows,))
    return nn.Sequential(*layers), x, torch.randn(rows, widths[-1])


def on_path(per_layer: bool, call: Callable[[], object]) -> Callable[[], object]:
    """``call`` with :data:`bnn_pyro.methods.laplace.curvature.PER_LAYER` set to ``per_layer``."""

    def run() -> object:
        before, curvature.PER_LAYER = curvature.PER_LAYER, per_layer
        try:
            return call()
        finally:
            curvature.PER_LAYER = before

    return run


def median_times(
    calls: dict[str, Callable[[], object]], repeats: int
) -> tuple[dict[str, float], dict[str, object]]:
    """Median seconds per call, round-robin, and each call's last result."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    results: dict[str, object] = {}
    for _ in range(repeats):
        for name, call in calls.items():
            began = time.perf_counter()
            results[name] = call()
            times[name].append(time.perf_counter() - began)
    return {name: statistics.median(values) for name, values in times.items()}, results


def rows_for(name: str, spec: tuple, repeats: int) -> list[str]:
    """The table rows of one net."""
    widths, task, fit_rows, predict_rows = spec
    net, x, y = problem(widths, task, max(fit_rows, predict_rows))
    noise = {"noise_scale": 0.5} if task == "regression" else {}

    def fitted() -> LaplaceApproximation:
        la = LaplaceApproximation(copy.deepcopy(net), task, hessian_structure="diag", **noise)
        la.fit(x[:fit_rows], y[:fit_rows], epochs=0, progress=False)
        return la

    for flag in PATHS.values():  # warm-up: a fit and a predict of a few rows each
        la = LaplaceApproximation(copy.deepcopy(net), task, hessian_structure="diag", **noise)
        on_path(flag, lambda la=la: la.fit(x[:8], y[:8], epochs=0, progress=False))()
        on_path(flag, lambda la=la: la.predict(x[:8]))()
    fit_s, posteriors = median_times({p: on_path(f, fitted) for p, f in PATHS.items()}, repeats)
    predict_s, outputs = median_times(
        {
            p: on_path(f, lambda la=posteriors[p]: la.predict(x[:predict_rows]))
            for p, f in PATHS.items()
        },  # fmt: skip
        repeats,
    )
    h_ref, h = (posteriors[p]._hessian for p in PATHS)
    h_gap = float((h - h_ref).abs().max() / h_ref.abs().max())
    v_ref, v = (outputs[p][1] for p in PATHS)
    v_gap = float(((v - v_ref).abs() / v_ref.abs()).max())
    old, new = PATHS
    lines = [
        f"| {name} | fit, {fit_rows:,} rows | {fit_s[old]:.3f} s | {fit_s[new]:.3f} s "
        f"| {fit_s[old] / fit_s[new]:.1f}× | diag(H) {h_gap:.1e} |",
        f"| {name} | predict, {predict_rows:,} rows | {predict_s[old]:.3f} s "
        f"| {predict_s[new]:.3f} s | {predict_s[old] / predict_s[new]:.1f}× "
        f"| variance {v_gap:.1e} |",
    ]
    if task == "classification":
        la = posteriors[new]
        sampled = median_times(
            {"mc": lambda: la.predict(x[:predict_rows], link_approx="mc", seed=0)}, repeats
        )[0]["mc"]
        lines.append(f"| {name} | predict, {predict_rows:,} rows, 20 draws (`link_approx='mc'`) "
                     f"| | {sampled:.3f} s | | |")  # fmt: skip
    return lines


def report(size: str, repeats: int, argv: list[str]) -> str:
    lines = [
        f"torch {torch.__version__}, 1 thread (the library's default), median of {repeats} "
        f"round-robin runs after a warm-up; {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; "
        f"command: python benchmarks/laplace_glm_predict.py{''.join(' ' + a for a in argv)}",
        "",
        "`hessian_structure='diag'`, the GGN; the gap: the largest relative difference between "
        "the two paths (diag(H) against its largest entry, the variance per entry).",
        "",
        "| net | call | full Jacobians | per layer | speed-up | gap |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, spec in NETS[size].items():
        lines += rows_for(name, spec, repeats)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small nets, a smoke run")
    parser.add_argument("--repeats", type=int, default=None, help="timed calls (3; quick: 1)")
    parser.add_argument("--out", default=None, help="also write the markdown table there")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    repeats = args.repeats or (1 if args.quick else 3)
    publish(report("quick" if args.quick else "full", repeats, argv), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
