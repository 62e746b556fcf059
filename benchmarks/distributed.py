"""Data-parallel training: samples per second on 1 and 2 processes, and a projection to K ranks.

``VariationalBNN(mlp(784, [400, 400], 10), Categorical())`` on synthetic MNIST-sized rows,
minibatches of 128 *per rank*, one torch thread per process, launched with
``python -m torch.distributed.run --standalone --nproc_per_node=K`` (gloo on this CPU machine)
for K = 1 and 2. Each run trains one warm-up epoch, then ``--epochs`` timed ones (the
``seconds`` of the history). Printed: samples per second for each K, their ratio (this machine
has 2 cores, so 2x is the ceiling), and the bytes all-reduced per step
(:func:`bnn_pyro.training.distributed.gradient_bytes`).

The projection is arithmetic on those measurements: a step on K ranks costs the measured
compute of 128 rows (it does not change with K) plus a ring all-reduce, which moves
``2 (K - 1) / K`` times the gradient bytes over each link and pays ``2 (K - 1)`` message
latencies (taken as 50 microseconds, a TCP round on a data-centre network). Throughput is
``K * 128 / step``; scaling stops paying where the all-reduce costs as much as the compute
(efficiency 50%).

Run: ``python benchmarks/distributed.py [--epochs 3] [--output PATH]``; a full run writes
``benchmarks/results/distributed.md`` (copied into the README by
``benchmarks/update_readme.py``). ``--child`` is the per-rank worker.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
RESULTS = os.path.join(ROOT, "benchmarks", "results", "distributed.md")
BATCH = 128  # per rank
STEPS = 20  # per rank per epoch
LATENCY = 50e-6  # seconds per message of the ring all-reduce
LINKS = {"10 Gb/s": 10e9 / 8, "100 Gb/s": 100e9 / 8}  # bytes per second
RANKS = (2, 4, 8, 16, 32, 64)


def child(epochs: int, out: str) -> None:
    """One rank: train, time, and (rank 0) write the figures."""
    import bnn_pyro as bp
    from bnn_pyro.training import distributed

    torch.set_num_threads(1)
    distributed.active()  # torchrun's environment: make the group before anything else
    k = distributed.world_size()
    g = torch.Generator().manual_seed(0)
    n = BATCH * STEPS * k
    X = torch.randn(n, 784, generator=g)
    y = torch.randint(0, 10, (n,), generator=g)
    torch.manual_seed(0)
    bnn = bp.VariationalBNN(bp.nn.mlp(784, [400, 400], 10), bp.Categorical())
    bnn.fit(X, y, epochs=1, batch_size=BATCH, progress=False, seed=0)  # warm-up
    history = bnn.fit(X, y, epochs=epochs, batch_size=BATCH, progress=False, seed=1)
    seconds = history["seconds"][-1]
    params = [p for p in bnn.parameters() if p.requires_grad]
    if distributed.rank() == 0:
        with open(out, "w", encoding="utf-8") as handle:
            json.dump(
                {
                    "ranks": k,
                    "samples_per_second": n * epochs / seconds,
                    "step_seconds": seconds / (epochs * STEPS),
                    "bytes_per_step": distributed.gradient_bytes(params),
                },
                handle,
            )


def launch(k: int, epochs: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        command += [f"--nproc_per_node={k}", os.path.abspath(__file__), "--child"]
        command += ["--epochs", str(epochs), "--out", out]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ROOT}
        subprocess.run(command, check=True, env=env, timeout=1800)
        with open(out, encoding="utf-8") as handle:
            return json.load(handle)


def projection(step_seconds: float, nbytes: int) -> list[str]:
    """Markdown rows: K, then throughput and efficiency per link speed."""
    rows = []
    for k in RANKS:
        cells = [str(k)]
        for bandwidth in LINKS.values():
            comm = 2 * (k - 1) / k * nbytes / bandwidth + 2 * (k - 1) * LATENCY
            step = step_seconds + comm
            cells.append(f"{k * BATCH / step:,.0f} samples/s ({step_seconds / step:.0%})")
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def _stops(step_seconds: float, nbytes: int) -> list[str]:
    """One sentence per link speed: the first K where the all-reduce costs more than the
    compute (efficiency below 50%), or that none up to the largest K does."""
    out = []
    for name, bandwidth in LINKS.items():
        stop = next(
            (
                k
                for k in RANKS
                if 2 * (k - 1) / k * nbytes / bandwidth + 2 * (k - 1) * LATENCY > step_seconds
            ),
            None,
        )
        out.append(
            f"At {name} scaling stops paying (efficiency below 50%) at K = {stop}."
            if stop
            else f"At {name} it holds above 50% up to K = {RANKS[-1]}."
        )
    return out


def report(one: dict, two: dict, epochs: int) -> str:
    ratio = two["samples_per_second"] / one["samples_per_second"]
    nbytes = one["bytes_per_step"]
    step = one["step_seconds"]
    lines = [
        "# Data-parallel training",
        "",
        f"`VariationalBNN`, 784→400→400→10, minibatches of {BATCH} per rank, one thread per "
        f"process, gloo; {epochs} timed epochs of {STEPS} steps per rank after a warm-up "
        "epoch (`python benchmarks/distributed.py`).",
        "",
        "| processes | samples / s | step (ms) |",
        "|---|---|---|",
        f"| 1 | {one['samples_per_second']:,.0f} | {1e3 * one['step_seconds']:.1f} |",
        f"| 2 | {two['samples_per_second']:,.0f} | {1e3 * two['step_seconds']:.1f} |",
        "",
        f"2 processes / 1: **{ratio:.2f}×** the samples per second (2 cores: 2× is the "
        f"ceiling). All-reduced per step: {nbytes / 1e6:.2f} MB (every gradient in float32, "
        "one buffer).",
        "",
        f"Projection (compute per step {1e3 * step:.1f} ms as measured on one process; ring "
        f"all-reduce of {nbytes / 1e6:.2f} MB, {1e6 * LATENCY:.0f} µs per message):",
        "",
        "| ranks | " + " | ".join(LINKS) + " |",
        "|---|" + "---|" * len(LINKS),
        *projection(step, nbytes),
        "",
        "Efficiency (in brackets) is compute / (compute + all-reduce). "
        + " ".join(_stops(step, nbytes))
        + " The ring's volume per link tends to twice the gradient bytes whatever K; its "
        "message latencies grow with K. A faster step (a GPU) moves the same arithmetic toward "
        "the all-reduce: overlapping gradient buckets with the backward pass (what "
        "`torch.nn.parallel.DistributedDataParallel` does) is then the next step.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--output", default=RESULTS, help="where to write the report")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.epochs, args.out)
        return
    from benchmarks._report import publish

    one, two = launch(1, args.epochs), launch(2, args.epochs)
    publish(report(one, two, args.epochs), args.output)


if __name__ == "__main__":
    main()
