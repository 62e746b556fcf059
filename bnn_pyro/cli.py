"""The ``bnn-pyro`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main", "build_parser"]


def _demo(args: argparse.Namespace) -> int:
    from bnn_pyro.demo import format_result, run_demo

    result = run_demo(args.out, epochs=args.epochs, seed=args.seed, progress=not args.quiet)
    print(format_result(result))
    return 0


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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``bnn-pyro`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
