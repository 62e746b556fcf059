"""The thread policy, measured: the README's ten lines on an idle and on a busy machine.

``bnn_pyro`` runs ``fit`` and ``predict`` on one intra-op thread unless told otherwise
(:mod:`bnn_pyro.threads`). This script times the README's first code block, as written, in a
fresh process per run:

* ``bnn_pyro's default``: the block as written (one thread inside ``fit``/``predict``);
* ``torch's default``: the same block after ``bp.set_threads(None)``, so torch uses its own
  thread count (one per core).

Each on an idle machine, on one with half its cores busy and on one with all of them busy: as
many other processes as busy cores, each running a one-thread matrix product loop (a notebook
beside other work, a shared CI runner). Printed: the median seconds of ``--repeats`` runs
(imports excluded) and the busy/idle ratios; the target is busy/idle ≤ 1.5 for the default.
With every core busy, one more thread gets at most ``cores / (cores + 1)`` of a core under fair
scheduling (2/3 on two cores): 1.5× is the floor there, before any contention for memory.

A wide net (784→400→400→10, one epoch of 20 minibatches of 128) is timed the same way, to show
what the one-thread default costs where threads could help.

Run: ``python benchmarks/threads.py [--repeats 3] [--output PATH]``; a full run writes
``benchmarks/results/threads.md`` (copied into the README by ``update_readme.py``). Run it on
an otherwise idle machine: its "idle" column assumes one.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timezone

import torch
from _report import publish  # benchmarks/_report.py (scripts run from this folder)

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(os.path.dirname(HERE), "README.md")
RESULTS = os.path.join(HERE, "results", "threads.md")
TARGET = 1.5
WIDE = """
import torch
import bnn_pyro as bp

X = torch.randn(2560, 784); y = torch.randint(0, 10, (2560,))
bnn = bp.VariationalBNN(bp.nn.mlp(784, [400, 400], 10), bp.Categorical())
bnn.fit(X, y, epochs=1, batch_size=128, progress=False)
"""
BURNER = (
    "import torch\ntorch.set_num_threads(1)\na = torch.randn(256, 256)\nwhile True:\n    a @ a\n"
)
POLICIES = {"bnn_pyro's default (1 thread)": "", "torch's default": "bp.set_threads(None)\n"}


def ten_lines() -> str:
    """The README's first Python block, as written."""
    with open(README, encoding="utf-8") as handle:
        return re.findall(r"```python\n(.*?)```", handle.read(), flags=re.S)[0]


def _timed(code: str, prefix: str) -> float:
    """Seconds of ``code`` (after ``prefix``) in a fresh process, imports excluded."""
    program = (
        "import time, torch, bnn_pyro as bp\n"
        "import warnings; warnings.simplefilter('ignore')\n"
        f"{prefix}start = time.perf_counter()\n"
        f"exec({code!r})\n"
        "print(time.perf_counter() - start)\n"
    )
    with tempfile.TemporaryDirectory() as folder:  # the block writes model.pt
        out = subprocess.run(
            [sys.executable, "-c", program], cwd=folder, capture_output=True, text=True,
            check=True, env={**os.environ, "PYTHONPATH": os.path.dirname(HERE)},
        )  # fmt: skip
    return float(out.stdout.strip().splitlines()[-1])


def _median(code: str, prefix: str, repeats: int, burners: int) -> float:
    """Median seconds of ``repeats`` runs while ``burners`` other processes keep cores busy."""
    started = [subprocess.Popen([sys.executable, "-c", BURNER]) for _ in range(burners)]
    try:
        return statistics.median(_timed(code, prefix) for _ in range(repeats))
    finally:
        for p in started:
            p.kill()
            p.wait()


def run(repeats: int) -> str:
    cores = os.cpu_count() or 1
    half = max(1, cores // 2)
    lines = [
        "# Threads: the README's ten lines on an idle and on a busy machine",
        "",
        f"Seconds (median of {repeats} fresh processes, imports excluded); busy: other processes "
        f"each running a one-thread matrix product loop, on {half} of the {cores} cores (half) "
        f"or on all {cores} (all).",
        "",
        "| workload | threads | idle | half busy | all busy | half / idle | all / idle |",
        "|---|---|---|---|---|---|---|",
    ]
    ratios = {}
    workloads = (("the README's ten lines", ten_lines()), ("784→400→400→10, 20 steps", WIDE))
    for workload, code in workloads:
        for policy, prefix in POLICIES.items():
            idle = _median(code, prefix, repeats, 0)
            some = _median(code, prefix, repeats, half)
            full = _median(code, prefix, repeats, cores)
            ratios[workload, policy] = (some / idle, full / idle)
            lines.append(
                f"| {workload} | {policy} | {idle:.2f} | {some:.2f} | {full:.2f} | "
                f"{some / idle:.2f}× | {full / idle:.2f}× |"
            )
    some, full = ratios["the README's ten lines", next(iter(POLICIES))]
    lines += [
        "",
        f"Target: the ten lines with bnn_pyro's default, busy / idle ≤ {TARGET}×: half busy "
        f"{some:.2f}× ({'met' if some <= TARGET else 'NOT met'}), all busy {full:.2f}× "
        f"({'met' if full <= TARGET else 'NOT met'}; fair scheduling alone gives one more "
        f"thread {cores}/{cores + 1} of a core there, a floor of {(cores + 1) / cores:.2f}×).",
        "",
        f"torch {torch.__version__}, {cores} cores; "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; command: python benchmarks/threads.py",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", default=RESULTS, help="where to write the table")
    args = parser.parse_args()
    publish(run(args.repeats), args.output)


if __name__ == "__main__":
    main()
