"""KFAC Laplace: bnn_pyro against laplace-torch on one net, side by side in one process.

The same trained-looking net (784→100→100→10, ReLU, a classifier on 2,000 rows of synthetic
inputs; the curvature does not care whether the weights are trained), the same prior precision,
``hessian_structure="kron"`` and the GGN in both. Contenders:

* ``bnn_pyro``: ``LaplaceApproximation(..., hessian_structure="kron")``: the factors from each
  layer's output Jacobians and inputs (:func:`bnn_pyro.methods.laplace.curvature.
  layer_jacobians`), and the GLM variance in each block's eigenbasis from those, never the full
  Jacobians;
* ``laplace-torch``: ``Laplace(..., subset_of_weights="all", hessian_structure="kron")`` with its
  default backend (curvlinops) and with BackPack; its GLM variance
  (``_glm_predictive_distribution``) goes through the full Jacobians ``(N, O, P)``.

Timed, round-robin, median of ``repeats`` after one warm-up call each: fitting the curvature
(128-row batches) and the GLM variance of the logits at 200 rows. Agreement: the relative gap of
the log-evidence and the largest relative gap of the GLM variance, against the curvlinops run.
Target: the same numbers (float32: evidence within 1e-6, variance within 1e-4 relative) and
neither call slower than laplace-torch's fastest.

Run: ``python benchmarks/laplace_kron.py [--quick] [--out PATH]`` (laplace-torch: the ``ood``
extra). ``--quick``: a small net and few rows, a smoke run that writes nothing.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from datetime import datetime, timezone

import pyro
import torch
import torch.nn as nn
from _report import publish  # benchmarks/_report.py (scripts run from this folder)
from torch.utils.data import DataLoader, TensorDataset

from bnn_pyro.methods.laplace.laplace import LaplaceApproximation

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "laplace_kron.md")
SIZES = {  # (input, hidden, classes, rows, predicted rows, repeats)
    "full": (784, 100, 10, 2_000, 200, 3),
    "quick": (20, 16, 3, 200, 50, 1),
}
PRIOR_PRECISION = 1.0
EVIDENCE_TOL, VARIANCE_TOL = 1e-6, 1e-4


def problem(size: str) -> tuple[nn.Module, DataLoader, torch.Tensor]:
    """The net, the 128-row loader of its data, and the rows to predict at."""
    d, hidden, classes, rows, predict_rows, _ = SIZES[size]
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, classes),
    )  # fmt: skip
    x, y = torch.randn(rows, d), torch.randint(0, classes, (rows,))
    return net, DataLoader(TensorDataset(x, y), batch_size=128), x[:predict_rows]


def contenders(net: nn.Module, loader: DataLoader) -> dict[str, Callable[[], object]]:
    """Name → a call that fits a fresh posterior on ``loader`` and returns it."""
    calls: dict[str, Callable[[], object]] = {}

    def ours() -> LaplaceApproximation:
        la = LaplaceApproximation(copy.deepcopy(net), "classification", hessian_structure="kron",
                                  prior_precision=PRIOR_PRECISION)  # fmt: skip
        la.fit(loader)
        return la

    calls["bnn_pyro"] = ours
    try:
        from laplace import Laplace
        from laplace.curvature import BackPackGGN, CurvlinopsGGN
    except ImportError:
        return calls
    for label, backend in (("curvlinops", CurvlinopsGGN), ("BackPack", BackPackGGN)):

        def theirs(backend: type = backend) -> object:
            la = Laplace(copy.deepcopy(net), "classification", subset_of_weights="all",
                         hessian_structure="kron", prior_precision=PRIOR_PRECISION,
                         backend=backend)  # fmt: skip
            la.fit(loader)
            return la

        calls[f"laplace-torch ({label})"] = theirs
    return calls


def variance(posterior: object, x: torch.Tensor) -> torch.Tensor:
    """The GLM variance of the logits ``(N, O)`` of either library's posterior."""
    if isinstance(posterior, LaplaceApproximation):
        return posterior.glm_variance(x)
    return posterior._glm_predictive_distribution(x)[1].diagonal(dim1=-2, dim2=-1)


def evidence(posterior: object) -> float:
    return float(posterior.log_marginal_likelihood())


def median_times(calls: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median seconds per call, round-robin, after one warm-up call of each."""
    for call in calls.values():
        call()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            began = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - began)
    return {name: statistics.median(values) for name, values in times.items()}


def report(size: str, argv: list[str]) -> tuple[str, bool]:
    """The markdown table, and whether the targets were met."""
    net, loader, x = problem(size)
    repeats = SIZES[size][-1]
    fits = contenders(net, loader)
    posteriors = {name: call() for name, call in fits.items()}
    fit_s = median_times(fits, repeats)
    var_s = median_times({n: (lambda p=p: variance(p, x)) for n, p in posteriors.items()}, repeats)
    reference = posteriors.get("laplace-torch (curvlinops)")
    d, hidden, classes, rows, predict_rows, _ = SIZES[size]
    lines = [
        f"torch {torch.__version__}, pyro {pyro.__version__}, 1 thread, median of {repeats} "
        f"round-robin runs; {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; "
        f"command: python benchmarks/laplace_kron.py{''.join(' ' + a for a in argv)}",
        "",
        f"{d}→{hidden}→{hidden}→{classes} ReLU classifier, {rows:,} rows in batches of 128, "
        f"GLM variance at {predict_rows} rows, prior precision {PRIOR_PRECISION}",
        "",
        "| contender | fit the KFAC curvature | GLM variance | log-evidence | evidence gap "
        "| variance gap |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    met = reference is not None
    ours_var = variance(posteriors["bnn_pyro"], x)
    ref_var = None if reference is None else variance(reference, x)
    for name, posterior in posteriors.items():
        ev = evidence(posterior)
        if reference is None:
            gaps = "n/a | n/a"
        else:
            ev_gap = abs(ev - evidence(reference)) / abs(evidence(reference))
            mine = ours_var if name == "bnn_pyro" else variance(posterior, x)
            var_gap = float(((mine - ref_var).abs() / ref_var.abs()).max())
            gaps = f"{ev_gap:.1e} | {var_gap:.1e}"
            if name == "bnn_pyro":
                met = met and ev_gap <= EVIDENCE_TOL and var_gap <= VARIANCE_TOL
        lines.append(
            f"| {name} | {fit_s[name] * 1e3:.1f} ms | {var_s[name] * 1e3:.1f} ms | {ev:.2f} "
            f"| {gaps} |"
        )
    if reference is not None:
        theirs = [n for n in posteriors if n != "bnn_pyro"]
        best_fit = min(fit_s[n] for n in theirs)
        best_var = min(var_s[n] for n in theirs)
        met = met and fit_s["bnn_pyro"] <= best_fit and var_s["bnn_pyro"] <= best_var
        lines += [
            "",
            f"bnn_pyro against laplace-torch's fastest: fit {best_fit / fit_s['bnn_pyro']:.2f}× "
            f"as fast, GLM variance {best_var / var_s['bnn_pyro']:.1f}× as fast. Gaps: relative, "
            "against laplace-torch (curvlinops). Targets: the evidence within "
            f"{EVIDENCE_TOL:g} and the variance within {VARIANCE_TOL:g} relative (float32), "
            f"and neither call slower than laplace-torch's fastest: "
            f"{'met' if met else '**not met**'}.",
        ]
    else:
        lines += ["", "laplace-torch is not installed (the `ood` extra): bnn_pyro alone."]
    return "\n".join(lines) + "\n", met


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small net, a smoke run")
    parser.add_argument("--out", default=RESULTS, help="markdown file of a full run")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    with warnings.catch_warnings():  # laplace-torch's and its backends' deprecation notes
        warnings.simplefilter("ignore")
        text, _ = report("quick" if args.quick else "full", argv)
    publish(text, None if args.quick else args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
