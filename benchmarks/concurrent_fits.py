"""Concurrent small fits on one device: what the UCI harness's workers meet on a GPU machine.

The UCI harness runs one job per worker process, each fitting UCI-sized models (a few thousand
rows, one hidden layer of 50, minibatches of 32). This script starts ``N`` processes at once,
each fitting one such model (kin8nm's shape: 8,192 × 8, ``VariationalBNN(mlp(8, [50], 1))``
with a learned noise, ``--epochs`` epochs of batch 32, one CPU thread) on ``--devices``, and
prints, per device and ``N``: the wall time of the whole group (process start and imports
included), and the mean and largest time of one fit (after a short warm-up fit in the same
process). Throughput over one process alone is ``N · fit(1) / fit(N)``.

On a GPU, a step of so small a net is bound by kernel launches and Python, not arithmetic:
compare one process's fit on the GPU with one on a CPU thread of the same machine, and how each
time grows as processes share the device.

Run: ``python benchmarks/concurrent_fits.py [--devices cuda,cpu] [--procs 1,4,8,14]
[--epochs 3] [--output PATH]``; ``--quick``: CPU, one and two processes, one epoch of 1,024
rows (a smoke run).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from importlib.metadata import version

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _report import publish  # noqa: E402  (benchmarks/_report.py; scripts run from this folder)

RESULTS = os.path.join(HERE, "results", "concurrent_fits.md")
ROWS, FEATURES, HIDDEN, BATCH = 8192, 8, 50, 32
QUICK_ROWS = 1024  # --quick: 32 steps a fit, every path of the full run


def one_fit(device: str, epochs: int, rows: int = ROWS) -> float:
    """Seconds of one seeded fit of the kin8nm-shaped model on ``device`` (after a warm-up);
    ``rows``: fewer than kin8nm's for a smoke run."""
    import torch

    import bnn_pyro as bp

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    X = torch.randn(rows, FEATURES, generator=g)
    y = X.sum(-1) + 0.1 * torch.randn(rows, generator=g)
    X, y = X.to(device), y.to(device)
    bnn = bp.VariationalBNN(bp.nn.mlp(FEATURES, [HIDDEN], 1), bp.Gaussian(scale="learned"))
    bnn = bnn.to(device)
    warm = 4 * BATCH
    bnn.fit(X[:warm], y[:warm], epochs=3, batch_size=BATCH, seed=0, progress=False)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    began = time.perf_counter()
    bnn.fit(X, y, epochs=epochs, batch_size=BATCH, seed=0, progress=False)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - began


def group(device: str, procs: int, epochs: int, rows: int = ROWS) -> tuple[float, list[float]]:
    """``(wall seconds, each process's fit seconds)`` of ``procs`` processes started at once."""
    command = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        device,
        "--epochs",
        str(epochs),
        "--rows",
        str(rows),
    ]
    began = time.perf_counter()
    children = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for _ in range(procs)
    ]
    outputs = [child.communicate()[0] for child in children]
    wall = time.perf_counter() - began
    if any(child.returncode != 0 for child in children):
        raise RuntimeError(
            f"a fit on {device} failed (exit codes {[c.returncode for c in children]})"
        )
    return wall, [float(out.strip().splitlines()[-1]) for out in outputs]


def _device_name(device: str) -> str:
    """``CPU``, or torch's name of a CUDA device. The parent process trains nothing: it imports
    torch (seconds) only to ask about a CUDA device, and reads torch's version from its
    installed metadata (the same string as ``torch.__version__``)."""
    if not device.startswith("cuda"):
        return "CPU"
    import torch

    return torch.cuda.get_device_name(torch.device(device))


def report(devices: list[str], procs: list[int], epochs: int, rows: int = ROWS) -> str:
    """The markdown table: one row per device and process count."""
    steps = epochs * -(-rows // BATCH)
    names = [_device_name(d) for d in devices]
    lines = [
        f"torch {version('torch')}, {', '.join(sorted(set(names)))}, {os.cpu_count()} cores; "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; command: python "
        f"benchmarks/concurrent_fits.py --devices {','.join(devices)} "
        f"--procs {','.join(map(str, procs))} --epochs {epochs}",
        "",
        f"Each process: one fit of VariationalBNN(mlp({FEATURES}, [{HIDDEN}], 1)), {rows:,} rows, "
        f"batch {BATCH}, {steps} steps ({epochs} epoch{'s' * (epochs > 1)}), one CPU thread.",
        "",
        "| device | processes | wall of the group | one fit: mean | one fit: largest "
        "| throughput over one process |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for device in devices:
        alone = None
        for n in procs:
            wall, fits = group(device, n, epochs, rows)
            mean = statistics.fmean(fits)
            alone = mean if alone is None else alone
            lines.append(
                f"| {device} | {n} | {wall:.2f} s | {mean:.2f} s | {max(fits):.2f} s "
                f"| {n * alone / mean:.1f}× |"
            )
    return "\n".join(lines) + "\n"


def _numbers(text: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise SystemExit(f"--{what} takes comma-separated whole numbers, got {text!r}") from None
    if not values or min(values) < 1:
        raise SystemExit(f"--{what} needs numbers of at least 1, got {text!r}")
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--devices", default="cuda,cpu", help="comma-separated (default: %(default)s)"
    )
    parser.add_argument("--procs", default="1,4,8,14", help="process counts (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs per fit (default: 3)")
    parser.add_argument(
        "--quick", action="store_true", help="CPU, 1 and 2 processes, 1 epoch of 1,024 rows"
    )
    parser.add_argument("--output", default=None, help=f"write the table (e.g. {RESULTS})")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, default=ROWS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.epochs < 1:
        parser.error("--epochs must be at least 1")
    if args.child is not None:
        print(f"{one_fit(args.child, args.epochs, args.rows):.4f}")
        return
    devices = ["cpu"] if args.quick else [d for d in args.devices.split(",") if d]
    procs = [1, 2] if args.quick else _numbers(args.procs, "procs")
    if procs[0] != 1:  # the throughput column is over the first row's one process
        parser.error(f"--procs must start with 1 (the baseline of the throughput), got {procs}")
    epochs, rows = (1, QUICK_ROWS) if args.quick else (args.epochs, ROWS)
    if any(d.startswith("cuda") for d in devices):
        import torch

        if not torch.cuda.is_available():
            parser.error("--devices names cuda, but torch sees no CUDA device here")
    publish(report(devices, procs, epochs, rows), args.output)


if __name__ == "__main__":
    main()
