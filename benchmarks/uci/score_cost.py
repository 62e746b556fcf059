"""What :func:`benchmarks.uci.protocol.score` costs beside the test log-likelihood alone.

The harness scores every checkpoint of every split; its test log-likelihood is one pass over the
``S x N`` mixture components. Its 95% coverage was once found from the mixture's 2.5% and 97.5%
quantiles by a 64-step bisection (64 CDF evaluations per point); it is now read from the CDF at
the targets (:func:`benchmarks.uci.protocol.inside_central_interval`). This script times, in one
process and on the same predictive:

* the test log-likelihood alone (``gaussian_log_likelihood`` in original units);
* ``score`` (log-likelihood, RMSE and coverage);
* ``score(..., coverage=False)`` (what a search's checkpoint pays);
* the bisection-based coverage of before (``gaussian_mixture_quantile`` and ``picp``),

and prints each as a ratio of the first::

    python -m benchmarks.uci.score_cost            # S = 100 samples, N = 2,400 rows
    python -m benchmarks.uci.score_cost --samples 200 --rows 10000 --repeats 9

The predictive is a calibrated-looking one in normalised units: per-row means spread by an
epistemic sd of 0.3 around the truth, a noise sd of 0.5 per sample (homoscedastic, ``(S, 1, 1)``,
as the VI rows' learned noise), targets drawn from about that mixture, float32 as the methods
predict. The contenders run interleaved, round after round (the bisection in a third of the
rounds only), after one warm-up each; the table gives each one's fastest and median round. The
fastest is the steadiest figure on a machine shared with other work (the median moves with
the load), and only ratios printed by one run compare.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.uci.protocol import score  # noqa: E402
from bnn_pyro.metrics import (  # noqa: E402
    gaussian_log_likelihood,
    gaussian_mixture_quantile,
    picp,
)

__all__ = ["main", "predictive", "timings"]

Y_STD = 7.5  #: the target's sd in original units (any value: it only shifts the LL)


def predictive(
    samples: int, rows: int, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``locs (S, N, 1)``, ``scales (S, 1, 1)`` and ``y (N, 1)`` in normalised units, float32.

    Example:
        >>> locs, scales, y = predictive(4, 10)
        >>> tuple(locs.shape), tuple(scales.shape), tuple(y.shape)
        ((4, 10, 1), (4, 1, 1), (10, 1))
    """
    g = torch.Generator().manual_seed(seed)
    truth = torch.randn(rows, 1, generator=g)
    locs = truth + 0.3 * torch.randn(samples, rows, 1, generator=g)
    scales = 0.5 * (1 + 0.1 * torch.randn(samples, 1, 1, generator=g)).abs()
    y = truth + (0.3**2 + 0.5**2) ** 0.5 * torch.randn(rows, 1, generator=g)
    return locs, scales, y


def _seconds(fn: Callable[[], object]) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def timings(samples: int, rows: int, repeats: int) -> dict[str, list[float]]:
    """Seconds of each round of each contender (module docstring) on one predictive."""
    locs, scales, y = predictive(samples, rows)

    def bisection() -> float:
        lower, upper = gaussian_mixture_quantile(locs, scales, [0.025, 0.975])
        return picp(lower, upper, y)

    contenders = {
        "test_ll": lambda: gaussian_log_likelihood(locs, scales, y, y_scale=Y_STD),
        "score": lambda: score(locs, scales, y, Y_STD),
        "score(coverage=False)": lambda: score(locs, scales, y, Y_STD, coverage=False),
        "bisection coverage (before)": bisection,
    }
    for fn in contenders.values():
        fn()  # warm-up
    rounds: dict[str, list[float]] = {name: [] for name in contenders}
    slow = max(1, repeats // 3)  # the bisection costs ~100x the rest: fewer of its rounds
    for k in range(repeats):
        for name, fn in contenders.items():
            if name.startswith("bisection") and k >= slow:
                continue
            rounds[name].append(_seconds(fn))
    return rounds


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100, help="S (default 100)")
    parser.add_argument("--rows", type=int, default=2400, help="N (default 2400)")
    parser.add_argument("--repeats", type=int, default=30, help="timed rounds (default 30)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: as is)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    rounds = timings(args.samples, args.rows, args.repeats)
    fastest = {name: min(values) for name, values in rounds.items()}
    median = {name: statistics.median(values) for name, values in rounds.items()}
    print(
        f"S = {args.samples}, N = {args.rows}, {torch.get_num_threads()} threads, "
        f"{args.repeats} rounds\n"
    )
    print("| computation | fastest ms | x test_ll | median ms | x test_ll |")
    print("|---|---:|---:|---:|---:|")
    for name in rounds:
        print(
            f"| {name} | {1e3 * fastest[name]:.2f} | {fastest[name] / fastest['test_ll']:.2f} "
            f"| {1e3 * median[name]:.2f} | {median[name] / median['test_ll']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
