"""Peak memory of a large ``predict``: bounded by the result plus one block, the same every run.

Issue 13, bug 1: ``VariationalBNN(mlp(13, [50], 1)).predict(randn(1_000_000, 13),
num_samples=100)`` peaked at 2.4, 5.4 and 20.3 GB on identical runs. Each case here runs that
predict in ``--runs`` fresh child processes and reads each child's peak resident memory
(``/usr/bin/time -v``'s "Maximum resident set size" when present, else the child's own
``getrusage`` peak). Per case it prints:

* ``baseline``: the child's peak RSS after the imports, the model (a one-epoch fit on 64 rows)
  and the input tensor, just before ``predict`` (the median over the runs);
* ``result``: the bytes of what ``predict`` returned (mean and variance; with
  ``return_samples=True`` also the ``(S, N, O)`` samples);
* the peak RSS over the runs (min and max), ``max/min`` (target <= 1.2) and
  ``peak/(result+baseline)`` (the largest peak over the runs; target <= 2).

Run: ``python benchmarks/memory.py [--rows 1000000] [--runs 5] [--threads 1]``; the full run
writes ``benchmarks/results/memory.md`` (copied into the README by ``update_readme.py``). The
exit status is 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "memory.md")
TIME = shutil.which("time") if os.path.exists("/usr/bin/time") else None
CASES = ("VariationalBNN", "VariationalBNN+samples", "MCDropout", "DeepEnsemble")
MAX_SPREAD, MAX_PEAK_RATIO = 1.2, 2.0


def child(case: str, rows: int, samples: int, threads: int) -> dict[str, float]:
    """In this process: build the case's model and input, then ``predict``; the measurements."""
    import torch
    from torch import nn

    import bnn_pyro as bp
    from bnn_pyro.nn import mlp

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if case.startswith("VariationalBNN"):
        model = bp.VariationalBNN(mlp(13, [50], 1), likelihood=bp.Gaussian(scale=1.0))
        model.fit(torch.randn(64, 13), torch.randn(64), epochs=1, progress=False, seed=0)
        kwargs = {"num_samples": samples}
    elif case == "MCDropout":
        net = nn.Sequential(nn.Linear(13, 50), nn.ReLU(), nn.Dropout(0.1), nn.Linear(50, 1))
        model, kwargs = bp.MCDropout(net, num_samples=samples), {}
    elif case == "DeepEnsemble":
        model, kwargs = bp.DeepEnsemble(lambda: mlp(13, [50], 1), num_models=5), {}
    else:
        raise ValueError(f"case must be one of {CASES}, got {case!r}")
    x = torch.randn(rows, 13)
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    out = model.predict(x, return_samples=case.endswith("+samples"), seed=0, **kwargs)
    return {
        "baseline_kib": baseline,
        "result_bytes": sum(t.nbytes for t in out),
        "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }


def measure(case: str, rows: int, samples: int = 100, threads: int = 1) -> dict[str, float]:
    """One fresh child process: ``baseline``, ``result`` and ``peak`` in MiB."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", case, "--rows", str(rows)]
    cmd += ["--samples", str(samples), "--threads", str(threads)]
    if TIME is not None:
        cmd = [TIME, "-v", *cmd]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(HERE), *sys.path])}
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if run.returncode != 0:
        raise RuntimeError(f"the {case} child failed:\n{run.stderr[-3000:]}")
    got = json.loads(run.stdout.strip().splitlines()[-1])
    peak = got["peak_kib"]
    found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", run.stderr)
    if found:
        peak = int(found.group(1))
    return {
        "baseline": got["baseline_kib"] / 1024,
        "result": got["result_bytes"] / 2**20,
        "peak": peak / 1024,
    }


def summarize(case: str, runs: list[dict[str, float]]) -> tuple[str, bool]:
    """The case's table row and whether it meets both targets."""
    peaks = [r["peak"] for r in runs]
    baseline = statistics.median(r["baseline"] for r in runs)
    result = runs[0]["result"]
    spread = max(peaks) / min(peaks)
    ratio = max(peaks) / (result + baseline)
    ok = spread <= MAX_SPREAD and ratio <= MAX_PEAK_RATIO
    row = (
        f"| {case} | {len(runs)} | {baseline:.0f} | {result:.1f} | {min(peaks):.0f} | "
        f"{max(peaks):.0f} | {spread:.3f} | {ratio:.2f} | {'yes' if ok else 'NO'} |"
    )
    return row, ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--samples", type=int, default=100, help="S (DeepEnsemble: 5 members)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per child")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    parser.add_argument("--output", default=None, help="default: results/memory.md, full runs")
    parser.add_argument("--child", choices=CASES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.rows, args.samples, args.threads)))
        return 0
    output = args.output
    if output is None and args.rows == 1_000_000 and args.runs >= 5:
        output = RESULTS
    lines = [
        "# Peak memory of predict",
        "",
        f"`predict` on {args.rows:,} rows × 13 features, S = {args.samples} samples (a 5-member "
        f"DeepEnsemble: 5), a 13→50→1 net, {args.runs} fresh processes per case, "
        f"{args.threads} torch thread(s); peak RSS from "
        f"{'`/usr/bin/time -v`' if TIME else '`getrusage`'}. Baseline: the process just before "
        "`predict` (imports, model, input); result: what `predict` returns. Targets: max/min "
        f"≤ {MAX_SPREAD}, peak/(result + baseline) ≤ {MAX_PEAK_RATIO}. Measured "
        f"{datetime.now(timezone.utc):%Y-%m-%d}.",
        "",
        "| case | runs | baseline (MiB) | result (MiB) | peak min (MiB) | peak max (MiB) | "
        "max/min | peak/(result+baseline) | targets met |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    all_ok = True
    for case in args.cases:
        runs = [measure(case, args.rows, args.samples, args.threads) for _ in range(args.runs)]
        row, ok = summarize(case, runs)
        lines.append(row)
        all_ok &= ok
    sys.path.insert(0, HERE)
    from _report import publish  # benchmarks/_report.py

    publish("\n".join(lines) + "\n", output)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
