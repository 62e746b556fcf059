"""SGHMC as the data grow: its samples against the exact posterior, and what the chain reads of it.

A Bayesian linear regression (3 inputs and a bias, prior N(0, 1) on each, noise sd 0.5, known)
of N = 1,000, 10,000 and 100,000 rows, whose posterior is Gaussian in closed form. Each row of
the table is one ``bp.make("sghmc", mlp(3, [], 1), Gaussian(scale=0.5))`` fitted three ways:
on minibatches of 128 at the default step (a fixed step: the minibatch gradient's noise is not
bounded), on the same minibatches with ``lr="measured"`` (a step bounded by the noise it
measures, with a control variate), and on the whole data set per step (the default, the step
measured on the posterior). The minibatch runs take about 8,000 steps (their epochs scaled to
N), the full-batch runs 2,000.

Per row: each weight's sampled variance over its exact one (the smallest and the largest of
the four), the largest error of the sampled mean in posterior sds, the chain's mean kinetic
temperature over its sampling steps (``last_run["kinetic_temperature"]``, 1 on an exact chain)
and whether the run warned ``HotChainWarning`` (from 2 on), the stability guard's trips, and the
time. The check: every run whose variance ratio reaches 2 warned, and none below 1.5 did.

Run: ``python benchmarks/sgmcmc_large_data.py [--quick]``; a full run writes
``benchmarks/results/sgmcmc_large_data.md``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import warnings
from datetime import datetime, timezone

import pyro
import torch
from _report import publish  # benchmarks/_report.py (scripts run from this folder)
from sgmcmc_peer_runs import NOISE, exact_posterior  # the peers' bench: the same regression

import bnn_pyro as bp
from bnn_pyro.exceptions import HotChainWarning, TrainingInstabilityWarning

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                       "sgmcmc_large_data.md")  # fmt: skip
SIZES, QUICK_SIZES = (1_000, 10_000, 100_000), (1_000, 4_000)
BATCH = 128
MINIBATCH_STEPS, FULL_STEPS = 8_000, 2_000
QUICK_MINIBATCH_STEPS, QUICK_FULL_STEPS = 800, 200
#: The three ways a row is fitted: label -> fit's options.
WAYS = {
    "minibatches of 128, default step": {"batch_size": BATCH},
    'minibatches of 128, lr="measured"': {"batch_size": BATCH, "lr": "measured"},
    "whole data set per step (the default)": {"batch_size": None},
}
WARNED, QUIET = 2.0, 1.5  #: the check: a variance ratio from WARNED on warns, below QUIET not


def regression(n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``n`` rows ``X (n, 3)``, ``y (n, 1)``, and the exact posterior of ``(w, b)``: its mean
    ``(4,)`` and covariance ``(4, 4)`` in float64.

    Example:
        >>> X, y, mean, cov = regression(500)
        >>> X.shape, y.shape, mean.shape, cov.shape
        (torch.Size([500, 3]), torch.Size([500, 1]), torch.Size([4]), torch.Size([4, 4]))
    """
    g = torch.Generator().manual_seed(0)
    X = torch.randn(n, 3, generator=g)
    y = X @ torch.tensor([[0.8], [-1.5], [0.25]]) + 0.7 + NOISE * torch.randn(n, 1, generator=g)
    return X, y, *exact_posterior(X, y)


def run_one(n: int, options: dict, minibatch_steps: int, full_steps: int) -> dict:
    """One fit of the row's model on ``n`` rows with ``options``; its figures (module docstring).

    Example:
        >>> row = run_one(300, {"batch_size": None}, 100, 100)
        >>> sorted(row)  # doctest: +NORMALIZE_WHITESPACE
        ['epochs', 'heat', 'hot', 'mean_error', 'ratio_max', 'ratio_min', 'seconds', 'steps',
         'trips']
    """
    X, y, mean, cov = regression(n)
    full = options["batch_size"] is None
    epochs = full_steps if full else math.ceil(minibatch_steps * BATCH / n)
    torch.manual_seed(0)
    pyro.set_rng_seed(0)
    model = bp.make("sghmc", bp.nn.mlp(3, [], 1), bp.Gaussian(scale=NOISE))
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(X, y, epochs=epochs, progress=False, seed=0, **options)
    seconds = time.perf_counter() - start
    samples = model.kept_samples.double()
    ratio = samples.var(0) / cov.diagonal()
    error = ((samples.mean(0) - mean) / cov.diagonal().sqrt()).abs().max()
    trips = [w for w in caught if w.category is TrainingInstabilityWarning
             and "turned unstable" in str(w.message)]  # fmt: skip
    return {
        "epochs": epochs,
        "steps": model.last_run["steps"],
        "ratio_min": float(ratio.min()),
        "ratio_max": float(ratio.max()),
        "mean_error": float(error),
        "heat": model.last_run["kinetic_temperature"],
        "hot": any(w.category is HotChainWarning for w in caught),
        "trips": len(trips),
        "seconds": seconds,
    }


def check(rows: list[tuple[int, str, dict]]) -> str:
    """The report's last line: whether every run whose variance ratio reaches :data:`WARNED`
    warned and none below :data:`QUIET` did.

    Example:
        >>> line = check([(1, "a", {"ratio_max": 3.0, "hot": True}),
        ...               (1, "b", {"ratio_max": 1.1, "hot": True})])
        >>> line.split(": ")[-1], "(1 of 1)" in line, "(1 of 1): missed" in line
        ('missed', True, True)
    """
    wide = [r for _, _, r in rows if r["ratio_max"] >= WARNED]
    narrow = [r for _, _, r in rows if r["ratio_max"] < QUIET]
    warned = sum(r["hot"] for r in wide)
    false = sum(r["hot"] for r in narrow)
    verdict = "met" if warned == len(wide) and false == 0 else "missed"
    return (
        f"HotChainWarning on every run whose variance reaches {WARNED:g}x the posterior's "
        f"({warned} of {len(wide)}) and on none below {QUIET:g}x ({false} of {len(narrow)}): "
        f"{verdict}"
    )


def report(sizes: tuple[int, ...], minibatch_steps: int, full_steps: int, argv: list[str]) -> str:
    """The markdown report of every size and way."""
    rows = [(n, way, run_one(n, options, minibatch_steps, full_steps))
            for n in sizes for way, options in WAYS.items()]  # fmt: skip
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = " ".join(["python benchmarks/sgmcmc_large_data.py", *argv])
    lines = [
        "# SGHMC as the data grow",
        "",
        f"torch {torch.__version__}, pyro {pyro.__version__}; 1 thread, one run each; {stamp}; "
        f"command: {command}",
        "",
        "Bayesian linear regression, 3 inputs and a bias, noise sd 0.5 (known), prior N(0, 1); "
        f"minibatch runs about {minibatch_steps:,} steps, full-batch runs {full_steps:,}. "
        "`variance / exact`: each weight's sampled variance over the exact posterior's (the "
        "smallest and the largest of the four); `mean error`: the largest, in posterior sds; "
        "`temperature`: the chain's mean kinetic temperature over its sampling steps (1 on an "
        "exact chain); `warned`: `HotChainWarning` (from 2 on); `trips`: the stability guard's.",
        "",
        "| rows | how | epochs | variance / exact | mean error (sd) | temperature | warned | "
        "trips | seconds |",
        "|---:|---|---:|---|---:|---:|---|---:|---:|",
    ]
    for n, way, r in rows:
        heat = "—" if r["heat"] is None else f"{r['heat']:.2f}"
        lines.append(
            f"| {n:,} | {way} | {r['epochs']:,} | {r['ratio_min']:.2f}–{r['ratio_max']:.2f} | "
            f"{r['mean_error']:.2f} | {heat} | {'yes' if r['hot'] else 'no'} | {r['trips']} | "
            f"{r['seconds']:.1f} |"
        )
    lines += ["", f"- {check(rows)}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print the report (``--quick``: two small sizes, few steps, nothing written); a full run
    writes it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="1,000 and 4,000 rows, a tenth of the steps, no file"
    )
    parser.add_argument("--output", default=RESULTS, help="markdown file of a full run")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.quick:
        text = report(QUICK_SIZES, QUICK_MINIBATCH_STEPS, QUICK_FULL_STEPS, argv)
    else:
        text = report(SIZES, MINIBATCH_STEPS, FULL_STEPS, argv)
    publish(text, None if args.quick else args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
