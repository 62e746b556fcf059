"""SGHMC at its defaults on a small network's posterior, on the whole data set and on minibatches,
against the converged NUTS reference of notebook 01.

The problem is notebook 01's: 100 rows of a 1-D regression with a gap, standardised, the 1-50-1
tanh net under the fan-in prior, the known noise; the reference is the four-chain NUTS run that
``benchmarks/no_data_judge.py`` cached in ``benchmarks/results/no_data/demo.pt`` (its mean and sd
of ``f`` at 201 grid points). Each row fits ``bp.make("sghmc", ...)`` with only ``epochs`` and
``batch_size`` chosen and reads, through ``predictive_gaussian`` with 200 samples, the predicted
function's mean error (mean over the grid of ``|mean - NUTS mean| / NUTS sd``) and its spread
(mean over the grid of ``sd / NUTS sd``: 1 is NUTS's width), with the step the chain measured and
the fit's time (``lr``: the default, a fixed step on minibatches, or ``"measured"``). A BNN
posterior is multimodal and one chain sees part of it, so neither figure is
expected at 0 and 1; the rows compare the batch sizes at the same model and seeds.

Run: ``python benchmarks/sgmcmc_minibatch_net.py [--quick] [--seeds 2]``. No time is asserted.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import torch

import bnn_pyro as bp
from bnn_pyro.datasets import toy_regression_1d

REFERENCE = Path(__file__).resolve().parent / "results" / "no_data" / "demo.pt"
NOISE, GAP = 0.1, (-1.0, 1.0)
#: (batch_size, epochs, lr): the notebook's full-batch run, and minibatches of 32 (4 steps an
#: epoch) at a third of its epochs, about the same number of steps, at the default fixed step and
#: with the measured one.
RUNS = [(None, 6000, None), (32, 2000, None), (32, 2000, "measured")]
SAMPLES = 200


def run(batch_size: int | None, epochs: int, seed: int, lr: str | None = None) -> dict[str, float]:
    """One chain: its mean error and spread against NUTS, its measured step and fit seconds.

    Example:
        >>> row = run(None, 40, 0)
        >>> sorted(row)
        ['error', 'seconds', 'spread', 'step']
    """
    ref = torch.load(REFERENCE, weights_only=True)
    X, y = toy_regression_1d(n=100, gap=GAP, noise_std=NOISE, seed=0)
    xm, xs, ym, ys = float(X.mean()), float(X.std()), float(y.mean()), float(y.std())
    torch.manual_seed(seed)
    net = bp.nn.mlp(1, [50], 1, activation="tanh")
    prior = bp.LayerwiseNormalPrior("radford")
    m = bp.make("sghmc", net, bp.Gaussian(scale=NOISE / ys), prior=prior)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a short --quick chain warns that it has not settled
        m.fit((X - xm) / xs, (y - ym) / ys, epochs=epochs, batch_size=batch_size, lr=lr,
              progress=False, seed=seed)  # fmt: skip
    seconds = time.perf_counter() - start
    locs, _ = m.predictive_gaussian((ref["grid"] - xm) / xs, num_samples=SAMPLES, seed=0)
    f = locs.squeeze(-1) * ys + ym  # (S, 201)
    mean, sd = ref["mean"].squeeze(), ref["sd"].squeeze()
    return {
        "error": float(((f.mean(0) - mean).abs() / sd).mean()),
        "spread": float((f.std(0) / sd).mean()),
        "step": float(m.step_size or float("nan")),
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few epochs: a smoke test only")
    parser.add_argument("--seeds", type=int, default=2, help="chains per batch size (>= 1)")
    args = parser.parse_args()
    if args.seeds < 1:
        parser.error(f"--seeds must be >= 1, got {args.seeds}")
    print("| batch_size | lr | epochs | seed | mean error (NUTS sd) | spread (x NUTS sd) | "
          "measured step | s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for batch_size, epochs, lr in RUNS:
        epochs = max(8, epochs // 200) if args.quick else epochs
        for seed in range(args.seeds):
            r = run(batch_size, epochs, seed, lr)
            shown = lr or ("measured" if batch_size is None else "default")
            print(
                f"| {batch_size or 'all'} | {shown} | {epochs} | {seed} | {r['error']:.2f} | "
                f"{r['spread']:.2f} | {r['step']:.4f} | {r['seconds']:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
