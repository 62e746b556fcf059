"""Vectorized against loop implementations of the classic methods, side by side in one process.

1. Laplace diagonal empirical Fisher on 2,000 points of a 13 -> 50 -> 1 regression net:
   ``LaplaceApproximation.fit(batches)`` (per-example gradients with ``torch.func.vmap(grad)``)
   against the seed's loop (one ``backward`` per example), both fed the same four batches of
   500, once as tensor views and once through a ``DataLoader`` (whose per-example collation
   costs both sides the same ~10 ms). Target: >= 20x.
2. Deep ensemble of 5 such nets, ``predict`` on 10,000 points: ``DeepEnsemble.predict``
   (``stack_module_state`` + ``vmap`` + ``functional_call``) against the seed's loop over
   members. Target: >= 2x. The same comparison on 100 points shows the overhead-bound regime.
3. Laplace's set-up: the first and the second fit in fresh processes (the first pays
   torch.func's one-time set-up).

Both sides run on one thread (``torch.set_num_threads(1)``); each figure is the median of
``--repeats`` runs after a warm-up. The script also checks that both sides give the same numbers.

Run: ``python benchmarks/methods.py [--repeats 15] [--quick] [--output PATH]``. Prints a
markdown table; a full run also writes it to ``benchmarks/results/methods.md``. ``--quick`` is a
smoke run: one repeat, the Laplace comparison on 500 points (four batches of 125), one fresh
process; it writes only to an ``--output`` given.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timezone

import torch
import torch.nn as nn
import torch.nn.functional as F
from _report import publish  # benchmarks/_report.py (scripts run from this folder)
from torch.utils.data import DataLoader, TensorDataset

from bnn_pyro.methods import DeepEnsemble, LaplaceApproximation

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "methods.md")
POINTS, QUICK_POINTS = 2000, 500  # the Laplace comparison's points, in four batches


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``fn()`` over ``repeats`` runs, after one warm-up run."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def net_13_50_1() -> nn.Module:
    return nn.Sequential(nn.Linear(13, 50), nn.ReLU(), nn.Linear(50, 1))


def seed_fisher_diag(model: nn.Module, loader: Iterable) -> dict[str, torch.Tensor]:
    """The seed's ``_compute_hessian_diag`` (regression branch), summed instead of averaged."""
    diag = {name: torch.zeros_like(p) for name, p in model.named_parameters()}
    model.eval()
    for batch_x, batch_y in loader:
        for i in range(len(batch_x)):
            model.zero_grad()
            output = model(batch_x[i : i + 1])
            loss = 0.5 * F.mse_loss(output.squeeze(), batch_y[i : i + 1].float().squeeze())
            loss.backward()
            for name, p in model.named_parameters():
                diag[name] += p.grad.detach() ** 2
    return diag


@torch.no_grad()
def seed_ensemble_predict(models: nn.ModuleList, x: torch.Tensor):
    """The seed's ``DeepEnsemble.predict``: one forward per member, then mean and variance."""
    predictions = []
    for model in models:
        model.eval()
        predictions.append(model(x))
    predictions = torch.stack(predictions)
    return predictions.mean(dim=0), predictions.var(dim=0, correction=0)


def bench_laplace(
    repeats: int, use_loader: bool, points: int = POINTS
) -> tuple[float, float, float]:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(points, 13, generator=g), torch.randn(points, 1, generator=g)
    batch = points // 4
    if use_loader:  # both sides pay the DataLoader's per-example indexing and collation
        loader = DataLoader(TensorDataset(x, y), batch_size=batch)
    else:  # the same four batches as tensor views: times the curvature computation only
        loader = [(x[i : i + batch], y[i : i + batch]) for i in range(0, points, batch)]
    torch.manual_seed(0)
    model = net_13_50_1()
    # noise_scale=1 is the seed's unit-variance Gaussian NLL, 0.5 (y - f)²
    laplace = LaplaceApproximation(model, "regression", noise_scale=1.0, hessian="fisher")
    t_loop = median_seconds(
        lambda: seed_fisher_diag(model, loader), min(repeats, max(3, repeats // 2))
    )  # the slow loop: fewer runs, never more than asked
    t_vec = median_seconds(lambda: laplace.fit(loader), repeats)
    ref = torch.cat([t.reshape(-1) for t in seed_fisher_diag(model, loader).values()])
    err = float(((laplace._hessian - ref).abs() / ref.abs().clamp_min(1e-12)).max())
    return t_loop, t_vec, err


def bench_ensemble(n: int, repeats: int) -> tuple[float, float, float]:
    torch.manual_seed(0)
    ensemble = DeepEnsemble(net_13_50_1, num_models=5, likelihood="regression")
    x = torch.randn(n, 13, generator=torch.Generator().manual_seed(1))
    t_loop = median_seconds(lambda: seed_ensemble_predict(ensemble.models, x), repeats)
    t_vec = median_seconds(lambda: ensemble.predict(x), repeats)
    ref_mean, ref_var = seed_ensemble_predict(ensemble.models, x)
    mean, var = ensemble.predict(x)
    err = max(float((mean - ref_mean).abs().max()), float((var - ref_var).abs().max()))
    return t_loop, t_vec, err


def laplace_setup_child() -> None:
    """In a fresh process: the seconds of the first Laplace fit and of a second one."""
    import json

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(2000, 13, generator=g), torch.randn(2000, 1, generator=g)
    batches = [(x[i : i + 500], y[i : i + 500]) for i in range(0, 2000, 500)]
    times = []
    for _ in range(2):
        torch.manual_seed(0)
        laplace = LaplaceApproximation(  # the setting the published figure was measured in
            net_13_50_1(), "regression", noise_scale=1.0, hessian="fisher", predictive="nn"
        )
        start = time.perf_counter()
        laplace.fit(batches)
        times.append(time.perf_counter() - start)
    print(json.dumps({"first": times[0], "second": times[1]}))


def bench_laplace_setup(runs: int) -> tuple[float, float]:
    """Medians over ``runs`` fresh processes of the first and the second Laplace fit."""
    import json
    import subprocess
    import sys

    firsts, seconds = [], []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, __file__, "--laplace-setup-child"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        record = json.loads(out.strip().splitlines()[-1])
        firsts.append(record["first"])
        seconds.append(record["second"])
    return statistics.median(firsts), statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="timed runs per figure")
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: 1 repeat, 500 Laplace points"
    )
    parser.add_argument(
        "--output", default=None, help="markdown file for the table (full runs: results/methods.md)"
    )
    parser.add_argument("--laplace-setup-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.laplace_setup_child:
        laplace_setup_child()
        return
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    repeats = 1 if args.quick else args.repeats
    points = QUICK_POINTS if args.quick else POINTS
    torch.set_num_threads(1)
    rows = []
    for use_loader, how in ((False, "tensor batches"), (True, "DataLoader")):
        t_loop, t_vec, err = bench_laplace(repeats, use_loader, points)
        name = f"Laplace diag Fisher, {points:,} pts, 13-50-1 ({how})"
        rows.append((name, t_loop, t_vec, "20x", f"{err:.1e} rel"))
    for n, target in ((10_000, "2x"), (100, "-")):
        t_loop, t_vec, err = bench_ensemble(n, repeats)
        rows.append((f"Ensemble of 5, predict {n:,} pts", t_loop, t_vec, target, f"{err:.1e} abs"))
    lines = [
        f"torch {torch.__version__}, 1 thread, median of {repeats} runs; "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; command: python benchmarks/methods.py",
        "",
        "| measurement | loop (ms) | vectorized (ms) | speed-up | target | max diff |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, loop, vec, target, err in rows:
        speed = f"{loop / vec:.1f}x"
        lines.append(
            f"| {name} | {loop * 1e3:.2f} | {vec * 1e3:.2f} | {speed} | {target} | {err} |"
        )
    processes = min(repeats, 5)  # a fresh process each: 5 at most, fewer if fewer were asked
    first, second = bench_laplace_setup(processes)
    lines += [
        "",
        "| Laplace fit (diag Fisher, 2,000 pts, 13-50-1) in a fresh process | first fit | "
        "second fit | set-up paid once |",
        "|---|---:|---:|---:|",
        f"| median of {processes} processes | {first * 1e3:.0f} ms | "
        f"{second * 1e3:.0f} ms | {(first - second) * 1e3:.0f} ms |",
        "",
        "The first fit in a process pays torch.func's one-time set-up; every later fit in that "
        "process skips it.",
    ]
    text = "\n".join(lines) + "\n"
    publish(text, args.output or (None if args.quick else RESULTS))


if __name__ == "__main__":
    main()
