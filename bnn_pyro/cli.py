"""The ``bnn-pyro`` command.

Usage::

    bnn-pyro demo [--out DIR] [--epochs N] [--seed S] [--quiet]
    bnn-pyro fit --data FILE.csv --target COL [--task regression|classification]
                 [--method vi|lrt|dropout|ensemble|swag|laplace] [--epochs N] [--hidden 50,50]
                 --out DIR
    bnn-pyro predict --model DIR/model.pt --data FILE.csv [--out preds.csv]
    bnn-pyro benchmark uci ...

A user error (a bad file, a missing column, a non-numeric column, a bad setting) prints one
line on stderr and exits with code 2; bad arguments exit with argparse's usage message and 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from bnn_pyro.cli_io import CLIError

__all__ = ["main", "build_parser"]

_METHODS = ("vi", "lrt", "dropout", "ensemble", "swag", "laplace")
_SUITES = ("uci",)


def _demo(args: argparse.Namespace) -> int:
    from bnn_pyro.demo import format_result, run_demo

    result = run_demo(args.out, epochs=args.epochs, seed=args.seed, progress=not args.quiet)
    print(format_result(result))
    return 0


def _fit(args: argparse.Namespace) -> int:
    from bnn_pyro.cli_fit import run_fit

    return run_fit(args)


def _predict(args: argparse.Namespace) -> int:
    from bnn_pyro.cli_predict import run_predict

    return run_predict(args)


def _benchmark(args: argparse.Namespace) -> int:
    try:
        from bnn_pyro.uci_benchmark.cli import main as uci_main
    except ModuleNotFoundError as err:
        if err.name not in ("bnn_pyro.uci_benchmark", "bnn_pyro.uci_benchmark.cli"):
            raise
        raise CLIError(
            "the UCI benchmark (bnn_pyro.uci_benchmark.cli) is not part of this bnn_pyro "
            "installation"
        ) from None
    return int(uci_main(args.args) or 0)


def _hidden(text: str) -> tuple[int, ...]:
    from bnn_pyro.cli_fit import parse_hidden

    return parse_hidden(text)


def _add_fit(sub: argparse._SubParsersAction) -> None:
    fit = sub.add_parser(
        "fit",
        help="train a BNN on a CSV file; write model.pt, metrics.json and a calibration plot",
        description="Train a BNN on the columns of a CSV file (header line required) and write "
        "DIR/model.pt, DIR/metrics.json and DIR/calibration.png (regression) or "
        "DIR/reliability.png (classification). Inputs (and regression targets) are "
        "standardised inside the model.",
    )
    fit.add_argument("--data", required=True, help="CSV file with a header line")
    fit.add_argument("--target", required=True, help="name of the column to predict")
    fit.add_argument(
        "--task",
        choices=("regression", "classification"),
        help="default: regression for a numeric target, classification for text labels",
    )
    fit.add_argument("--method", choices=_METHODS, default="vi", help="default: vi")
    fit.add_argument("--epochs", type=int, default=200, help="passes over the data (200)")
    fit.add_argument(
        "--hidden", type=_hidden, default=(50,), help="hidden layer widths, e.g. 50,50 (50)"
    )
    fit.add_argument(
        "--features",
        type=lambda s: [c.strip() for c in s.split(",")],
        help="comma-separated input columns (default: all but the target)",
    )
    fit.add_argument("--batch-size", type=int, default=128, help="minibatch size (128)")
    fit.add_argument("--lr", type=float, default=1e-2, help="learning rate (0.01)")
    fit.add_argument(
        "--num-samples", type=int, default=100, help="Monte Carlo samples per prediction (100)"
    )
    fit.add_argument("--prior-scale", type=float, default=1.0, help="prior std of weights (1)")
    fit.add_argument(
        "--val-fraction",
        type=float,
        default=0.2,
        help="share of rows held out for validation metrics; 0 = none (0.2)",
    )
    fit.add_argument("--seed", type=int, default=0, help="random seed (0)")
    fit.add_argument("--out", required=True, help="output folder (created if missing)")
    fit.add_argument("--quiet", action="store_true", help="no progress bar")
    fit.set_defaults(func=_fit)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``bnn-pyro`` (subcommands register themselves here)."""
    parser = argparse.ArgumentParser(
        prog="bnn-pyro", description="Bayesian neural networks on Pyro."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo", help="train a BNN on a 1-D toy regression with a gap; print metrics, write a PNG"
    )
    demo.add_argument("--out", default="demo_output", help="output folder (default: demo_output)")
    demo.add_argument("--epochs", type=int, default=5000, help="training steps (default: 5000)")
    demo.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    demo.add_argument("--quiet", action="store_true", help="no progress bar")
    demo.set_defaults(func=_demo)
    _add_fit(sub)
    predict = sub.add_parser(
        "predict",
        help="predict with a model.pt: mean and std (or class probabilities) per row, as CSV",
        description="Read the feature columns the model was trained on from a CSV file and "
        "write one row per input: mean,std for regression (std: the total predictive std, "
        "noise included); prediction,p_<class>... for classification.",
    )
    predict.add_argument("--model", required=True, help="model.pt written by bnn-pyro fit")
    predict.add_argument("--data", required=True, help="CSV file with the feature columns")
    predict.add_argument("--out", help="output CSV file (default: stdout)")
    predict.set_defaults(func=_predict)
    bench = sub.add_parser(
        "benchmark",
        help="run a benchmark suite: bnn-pyro benchmark uci --help",
        description="Run a benchmark suite; the arguments after the suite name go to it "
        "(bnn-pyro benchmark uci --help lists them).",
    )
    bench.add_argument("suite", choices=_SUITES, help="the suite: uci")
    bench.add_argument("args", nargs=argparse.REMAINDER, help="arguments of the suite")
    bench.set_defaults(func=_benchmark)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``bnn-pyro`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit code.

    Example:
        >>> main(["predict", "--model", "missing.pt", "--data", "x.csv"])
        2
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except (CLIError, ValueError, TypeError, OSError) as err:
        message = " ".join(str(err).split()) or type(err).__name__
        print(f"bnn-pyro {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"bnn-pyro {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
