"""The ``bnn-pyro`` command: one module per subcommand, each adding its parser.

Usage::

    bnn-pyro demo [--out DIR] [--epochs N] [--seed S] [--quiet]
    bnn-pyro fit --data FILE.csv --target COL [--task regression|classification]
                 [--method NAME] [--epochs N] [--hidden 50,50] --out DIR
    bnn-pyro predict --model DIR/model.pt --data FILE.csv [--out preds.csv]

* :mod:`~bnn_pyro.cli.demo`: the README's main job (a toy regression with a gap).
* :mod:`~bnn_pyro.cli.fit` / :mod:`~bnn_pyro.cli.predict`: a BNN on a CSV file, and its
  predictions; :mod:`~bnn_pyro.cli.io`: their CSV reading and writing. ``--method`` takes a
  :data:`bnn_pyro.METHODS` name that the estimators train
  (:func:`~bnn_pyro.cli.fit.method_choices`; ``bnn-pyro fit --help`` lists them).

A user error (a bad file, a missing column, a non-numeric column, a bad setting) raises
:class:`~bnn_pyro.exceptions.CLIError`; :func:`main` prints it in one line on stderr and exits
with code 2; bad arguments exit with argparse's usage message and 2.

(The UCI benchmark is not a subcommand: it lives in the repository, not in the installed
package; run ``python -m benchmarks.uci`` from the repository root.)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from bnn_pyro.cli import demo, fit, predict
from bnn_pyro.exceptions import CLIError

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``bnn-pyro``; each subcommand module adds its own parser.

    Returns:
        The parser; ``parse_args(...).func(args)`` runs the chosen subcommand.

    Example:
        >>> args = build_parser().parse_args(["fit", "--data", "d.csv", "--target", "y",
        ...                                   "--out", "run", "--hidden", "64,32"])
        >>> args.command, args.method, args.hidden
        ('fit', 'vi', (64, 32))
    """
    parser = argparse.ArgumentParser(
        prog="bnn-pyro", description="Bayesian neural networks on Pyro."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (demo, fit, predict):
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``bnn-pyro`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit code.

    Args:
        argv: the command-line arguments, without the program name.

    Returns:
        The subcommand's exit code: 0 on success, 2 on a user error (printed in one line on
        stderr), 130 on Ctrl-C. Bad arguments exit with code 2 (argparse).

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
