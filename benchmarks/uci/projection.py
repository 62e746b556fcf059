"""Projected time of the nine-set UCI benchmark, from timed runs at the sizes not shipped here.

The standard benchmark (Hernández-Lobato & Adams 2015) has nine data sets. Four ship with the
repository (``benchmarks/uci/data``): their time is the committed full run's
(``benchmarks/results/uci/uci.json``: each record's search and final seconds, summed per data
set and method). The
other five are stood in for by synthetic sets of their size (rows × features, splits: wine
1,599 × 11, kin8nm 8,192 × 8, naval 11,934 × 16, power 9,568 × 4, each over 20 splits; protein
45,730 × 9 over 5), written in the UCI folder format (:func:`benchmarks.uci.writer.
write_uci_folder`; no settings files, so the grids take their defaults, as a folder without
Gal's files would).

Full grids take hours at these sizes, so each (set, method) runs through the harness's own
:func:`~benchmarks.uci.bundle.run_bundle` (every split, the same protocol, grids and scoring)
at least twice, every configuration's epochs scaled to ``e1 = max(1, round(e · f))`` and then
``LONG_RUN · e1 = 4 · e1`` (``f = 80 / rows``, so each run trains a similar number of steps).
The time is modelled as ``a + b · E``, ``E`` the epochs trained over all splits (each grid
configuration's and the final fit's): the runs give ``a`` (scoring, the Laplace curvature,
set-up) and ``b`` (per epoch) by least squares (:func:`line_fit`), and the full run's ``E``
(its final fit counted at the grid's mean epochs, the chosen configuration being unknown)
gives the projection. The second run is four times the first, not twice: where the fixed part
dominates, the slope from a doubling was the difference of two noisy times (protein's dropout
projected at 13,883 s and then 3,844 s by two runs with ``2 · e1``); a lever arm of ``3 · e1``
divides that noise by three. Where even that is not enough (protein's Laplace, its full GGN
curvature on 36,584 rows per split: 108.0 s at 25 epochs and 107.8 s at 100, so ``b = 0`` and
a projection of 1.8 minutes, a floor), the epochs are multiplied by four again, up to ``64 ·
e1``, until a run takes :data:`RESOLVED_GROWTH` (half) more than the first. The wall
time with ``--jobs 2`` schedules the (set, method) jobs largest first on two workers (a job of
the harness is one split, or all splits of a stacked method: it never splits further).

``--sets kin8nm,protein`` times only those (the issue's 8,192- and 45,730-row sizes); the
sets left out are interpolated per method, linear in rows per split between the sizes measured
or timed (:func:`fill_untimed`).

One thread, as the harness's workers. Run: ``python -m benchmarks.uci.projection [--quick]
[--sets ...]``; a run that is not ``--quick`` writes ``benchmarks/results/uci_projection.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)  # run as a script too

from benchmarks._report import publish  # noqa: E402
from benchmarks.uci import registry  # noqa: E402
from benchmarks.uci.bundle import run_bundle  # noqa: E402
from benchmarks.uci.data import load_uci_split  # noqa: E402
from benchmarks.uci.runner import BenchmarkSettings, Task, dataset_info  # noqa: E402
from benchmarks.uci.writer import write_uci_folder  # noqa: E402

RESULTS = os.path.join(ROOT, "benchmarks", "results", "uci_projection.md")
#: ``--device cuda``'s table (every set timed there: the committed run measured the CPU).
RESULTS_GPU = os.path.join(ROOT, "benchmarks", "results", "uci_projection_gpu.md")
RUNS = os.path.join(ROOT, "benchmarks", "results", "uci", "uci.json")

#: The nine sets: name -> (rows, features, splits); ``shared`` names the folder measured in full.
NINE_SETS: dict[str, tuple[int, int, int]] = {
    "boston": (506, 13, 20),
    "concrete": (1030, 8, 20),
    "energy": (768, 8, 20),
    "kin8nm": (8192, 8, 20),
    "naval": (11934, 16, 20),
    "power": (9568, 4, 20),
    "protein": (45730, 9, 5),
    "wine": (1599, 11, 20),
    "yacht": (308, 6, 20),
}
SHARED = {"boston": "bostonHousing", "concrete": "concrete", "energy": "energy", "yacht": "yacht"}
ROWS_PER_EPOCH_SCALE = 80.0  # f = 80 / rows
LONG_RUN = 4  # the second run's epochs: LONG_RUN × the first's
#: A run that took less than this fraction more than the first leaves the slope in the noise:
#: the next run's epochs are LONG_RUN times longer again, up to MAX_MULT × the first's.
RESOLVED_GROWTH = 0.5
MAX_MULT = LONG_RUN**3


def synthetic_folder(path: Path, rows: int, features: int, splits: int, seed: int = 0) -> Path:
    """A smooth nonlinear regression set of ``rows`` × ``features`` in the UCI folder format.

    Example:
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     folder = synthetic_folder(Path(tmp) / "toy", 50, 3, 2)
        ...     load_uci_split(folder, 1).X_train.shape
        torch.Size([45, 3])
    """
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(rows, features, generator=g)
    w = torch.randn(features, 2, generator=g) / math.sqrt(features)
    h = X @ w
    y = torch.sin(2 * h[:, 0]) + 0.5 * h[:, 1] ** 2 + 0.1 * torch.randn(rows, generator=g)
    return write_uci_folder(path, X, y, n_splits=splits)


def scaled_grid(grid: Callable[..., list[dict[str, Any]]], f: float, mult: int) -> Callable:
    """``grid`` with every configuration's epochs ``mult · max(1, round(e · f))``.

    Example:
        >>> scaled = scaled_grid(lambda info, quick: [{"epochs": 400}, {"epochs": 40}], 0.01, 2)
        >>> [c["epochs"] for c in scaled(None, False)]
        [8, 2]
    """

    def scaled(info: Any, quick: bool) -> list[dict[str, Any]]:
        return [{**c, "epochs": mult * max(1, round(c["epochs"] * f))} for c in grid(info, quick)]

    return scaled


def timed_bundle(
    folder: str, method: str, splits: int, settings: BenchmarkSettings, f: float, mult: int
) -> tuple[float, int]:
    """Seconds and epochs trained (all splits) of ``method`` on ``folder`` with scaled grids."""
    spec = registry.METHODS[method]
    grid = scaled_grid(spec.grid, f, mult)
    registry.METHODS[method] = dataclasses.replace(spec, grid=grid)
    try:
        tasks = [Task(Path(folder).name, folder, s, method) for s in range(splits)]
        start = time.perf_counter()
        records = run_bundle(tasks, settings)
        seconds = time.perf_counter() - start
    finally:
        registry.METHODS[method] = spec
    info = dataset_info(folder, load_uci_split(folder, 0))
    searched = sum(c["epochs"] for c in grid(info, settings.quick))
    epochs = sum(searched + int(r["config"]["epochs"]) for r in records)
    return seconds, epochs


def full_epochs(folder: str, method: str, splits: int, quick: bool = False) -> float:
    """Epochs the full run trains over all splits: the grid's, and the final fit's at the
    grid's mean epochs."""
    info = dataset_info(folder, load_uci_split(folder, 0))
    grid = registry.METHODS[method].grid(info, quick)
    per_split = [c["epochs"] for c in grid]
    return splits * (sum(per_split) + sum(per_split) / len(per_split))


def line_fit(runs: list[tuple[float, int]]) -> tuple[float, float]:
    """``(a, b)`` of ``seconds = a + b · epochs``, least squares over the timed ``runs``
    (``[(seconds, epochs), ...]``, at least two epoch counts), neither below 0.

    Example:
        >>> a, b = line_fit([(12.0, 10), (24.0, 40), (72.0, 160)])
        >>> round(a, 6), round(b, 6)
        (8.0, 0.4)
    """
    if len({e for _, e in runs}) < 2:
        raise ValueError(f"runs must hold at least two epoch counts, got {runs!r}")
    mean_t = sum(t for t, _ in runs) / len(runs)
    mean_e = sum(e for _, e in runs) / len(runs)
    slope = sum((e - mean_e) * (t - mean_t) for t, e in runs) / sum(
        (e - mean_e) ** 2 for _, e in runs
    )
    slope = max(0.0, slope)
    return max(0.0, mean_t - slope * mean_e), slope


def project(folder: str, method: str, splits: int, settings: BenchmarkSettings, f: float) -> dict:
    """The scaled runs of (``folder``, ``method``) and the full run's projected seconds.

    The epochs are scaled once (``e1``), then by :data:`LONG_RUN`, and again by
    :data:`LONG_RUN` up to :data:`MAX_MULT` while the latest run took less than
    :data:`RESOLVED_GROWTH` more than the first (the per-epoch part still inside the fixed
    part's noise); :func:`line_fit` over all of them gives ``a + b · E``.
    """
    runs = [timed_bundle(folder, method, splits, settings, f, 1)]
    mult = LONG_RUN
    while True:
        runs.append(timed_bundle(folder, method, splits, settings, f, mult))
        resolved = runs[-1][0] - runs[0][0] >= RESOLVED_GROWTH * runs[0][0]
        if resolved or mult >= MAX_MULT or settings.quick:
            break
        mult *= LONG_RUN
    fixed, per_epoch = line_fit(runs)
    epochs = full_epochs(folder, method, splits, settings.quick)
    return {
        "runs": [list(r) for r in runs],
        "epochs": epochs,
        "seconds": fixed + per_epoch * epochs,
    }


def measured_seconds(path: str) -> dict[tuple[str, str], float]:
    """Seconds per (data set, method) of a committed run's records (its ``uci.json``)."""
    out: dict[tuple[str, str], float] = defaultdict(float)
    with open(path, encoding="utf-8") as handle:
        for r in json.load(handle)["runs"]:
            out[(r["dataset"], r["method"])] += r["search_seconds"] + r["final_seconds"]
    return dict(out)


def two_worker_wall(jobs: list[float]) -> float:
    """Largest first onto the less loaded of two workers: the later finish.

    Example:
        >>> two_worker_wall([5.0, 3.0, 3.0, 1.0])
        6.0
    """
    loads = [0.0, 0.0]
    for job in sorted(jobs, reverse=True):
        loads[loads.index(min(loads))] += job
    return max(loads)


def interpolated(points: list[tuple[int, float]], rows: int) -> float:
    """Seconds per split at ``rows``, linear in rows between the nearest known sizes
    ``points = [(rows, seconds per split), ...]`` (the end segments extended, never below 0).

    Example:
        >>> interpolated([(100, 1.0), (1000, 10.0), (10000, 40.0)], 5500)
        25.0
        >>> interpolated([(100, 1.0), (1000, 10.0)], 2000)
        20.0
    """
    pts = sorted(points)
    if len(pts) == 1:
        return pts[0][1] * rows / pts[0][0]
    right = next((i for i, (r, _) in enumerate(pts) if r >= rows), len(pts) - 1)
    right = max(1, right)
    (r0, s0), (r1, s1) = pts[right - 1], pts[right]
    return max(0.0, s0 + (s1 - s0) * (rows - r0) / (r1 - r0))


def fill_untimed(seconds: dict[tuple[str, str], float], source: dict[str, str]) -> None:
    """Seconds of the sets neither measured nor timed, per method from the sizes that were
    (:func:`interpolated` in rows, per split, times the set's splits)."""
    known = [n for n in NINE_SETS if n in source]
    for name, (rows, _, splits) in NINE_SETS.items():
        if name in source:
            continue
        for method in registry.available_methods():
            points = [
                (NINE_SETS[k][0], seconds[(k, method)] / NINE_SETS[k][2])
                for k in known
                if (k, method) in seconds
            ]
            if points:
                seconds[(name, method)] = interpolated(points, rows) * splits
        source[name] = "interpolated"


def report(
    seconds: dict[tuple[str, str], float],
    source: dict[str, str],
    runs: dict,
    device: str = "cpu",
) -> str:
    """The projection's markdown: the headline, minutes per set and method, the timed runs
    (``device``: where they ran; on a GPU the headline is one process's minutes there)."""
    methods = registry.available_methods()
    total = sum(seconds.values())
    wall = two_worker_wall(list(seconds.values()))
    if device == "cpu":
        headline = (
            f"Projected with `benchmarks/uci/projection.py` ({time.strftime('%Y-%m-%d')}, one "
            f"thread per worker): **{total / 60:.0f} CPU-minutes, about {wall / 60:.0f} minutes "
            "wall with `--jobs 2`** (the jobs scheduled largest first on two workers)."
        )
    else:
        headline = (
            f"Projected with `benchmarks/uci/projection.py --device {device}` "
            f"({time.strftime('%Y-%m-%d')}, {_device_name(device)}, one process): "
            f"**{total / 60:.0f} minutes** on one GPU, every set timed there."
        )
    lines = [
        "# The nine-set UCI benchmark: projected time",
        "",
        headline,
        "",
        "| data set | rows × features, splits | from | " + " | ".join(methods) + " | total (min) |",
        "|---|---|---|" + "---|" * (len(methods) + 1),
    ]
    for name, (rows, features, splits) in NINE_SETS.items():
        row = [seconds.get((name, m), 0.0) for m in methods]
        cells = " | ".join(f"{s / 60:.1f}" for s in row)
        lines.append(
            f"| {name} | {rows:,} × {features}, {splits} | {source.get(name, '-')} | {cells} | "
            f"{sum(row) / 60:.1f} |"
        )
    lines += [
        "",
        "Minutes per method (one thread). *measured*: the committed four-set run "
        "(`benchmarks/results/uci/uci.json`); *projected*: a synthetic set of that size, "
        "each method run at least twice with its grid's epochs scaled (table below; runs 4× "
        "longer again, up to 64×, while the latest took less than half more than the first), "
        "time = a + b × epochs by least squares; *interpolated*: not timed, each method's "
        "seconds per split linear in rows "
        "between the nearest measured or projected sizes.",
        "",
        "| data set | method | scaled runs (s, epochs) | full-run epochs | projected (s) |",
        "|---|---|---|---|---|",
    ]
    for (name, method), run in runs.items():
        scaled = ", ".join(f"{t:.1f} s / {e:,}" for t, e in run["runs"])
        lines.append(
            f"| {name} | {method} | {scaled} | {run['epochs']:,.0f} | {run['seconds']:.0f} |"
        )
    return "\n".join(lines)


def _device_name(device: str) -> str:
    if torch.device(device).type == "cuda":
        return torch.cuda.get_device_name(torch.device(device))
    return device


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one small set, two splits (smoke)")
    parser.add_argument("--output", default=RESULTS, help="markdown file for the table")
    parser.add_argument("--runs", default=RUNS, help="the four-set run's uci.json")
    parser.add_argument(
        "--sets", default=None, help="comma-separated synthetic sets to time (default: all five)"
    )
    parser.add_argument(
        "--device",
        default="cpu",
        help="time the runs there; on a GPU every set is timed (the committed run measured the "
        "CPU) and the table goes to results/uci_projection_gpu.md (default: %(default)s)",
    )
    args = parser.parse_args()
    try:
        BenchmarkSettings(device=args.device)
    except (TypeError, ValueError) as err:
        parser.error(str(err))
    on_cpu = args.device == "cpu"
    replace = dataclasses.replace
    if not on_cpu and args.output == RESULTS:
        args.output = RESULTS_GPU
    torch.set_num_threads(1)
    seconds = measured_seconds(args.runs) if on_cpu else {}
    names = {folder: name for name, folder in SHARED.items()}
    seconds = {(names.get(d, d), m): s for (d, m), s in seconds.items()}
    source = {name: "measured" for name in SHARED} if on_cpu else {}
    sizes = {n: v for n, v in NINE_SETS.items() if n not in SHARED or not on_cpu}
    if args.sets:
        wanted = args.sets.split(",")
        unknown = sorted(set(wanted) - set(sizes))
        if unknown:
            parser.error(f"--sets: unknown {unknown}; choose from {sorted(sizes)}")
        sizes = {n: sizes[n] for n in wanted}
    settings = BenchmarkSettings(validation_samples=200, test_samples=1000, device=args.device)
    if args.quick:  # the quick grids, one small set: a smoke run of the whole script
        sizes = {"wine": (150, 4, 2)}
        settings = BenchmarkSettings(
            quick=True, validation_samples=20, test_samples=50, device=args.device
        )
    runs: dict[tuple[str, str], dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        # first use of each method in the process (torch.func's set-up, allocator growth) off
        # the clock: a quick-grid run on a small set; not in a --quick run, whose times are a
        # smoke run's and whose timed runs call the same run_bundle
        if not args.quick:
            warm = str(synthetic_folder(Path(tmp) / "warm-up", 200, 4, 2))
            for method in registry.available_methods():
                warm_tasks = [Task("warm-up", warm, s, method) for s in range(2)]
                run_bundle(
                    warm_tasks,
                    replace(settings, quick=True, validation_samples=20, test_samples=50),
                )
        for name, (rows, features, splits) in sizes.items():
            folder = str(synthetic_folder(Path(tmp) / name, rows, features, splits))
            f = 1.0 if args.quick else min(1.0, ROWS_PER_EPOCH_SCALE / rows)
            for method in registry.available_methods():
                began = time.perf_counter()
                runs[(name, method)] = project(folder, method, splits, settings, f)
                runs[(name, method)]["took"] = time.perf_counter() - began
                seconds[(name, method)] = runs[(name, method)]["seconds"]
                print(f"{name} {method}: {runs[(name, method)]}", file=sys.stderr, flush=True)
            source[name] = "projected"
    fill_untimed(seconds, source)
    text = report(seconds, source, runs, args.device)
    publish(text, None if args.quick else args.output)


if __name__ == "__main__":
    main()
