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

Errors (:mod:`~bnn_pyro.cli.errors`): a user or library error (a bad file, a missing or
non-numeric column, a bad setting, a diverged fit, a corrupt model file) is printed in one line
on stderr, ``bnn-pyro CMD: error: <message>`` naming the option to change, with exit code 2;
bad arguments too (argparse's error, in one line, ``SystemExit(2)``). Anything else is a bug
and shows its traceback (exit code 1); ``--debug`` shows the traceback of user errors too.
Output is all or nothing (:mod:`~bnn_pyro.cli.output`): after a failure, or Ctrl-C, no
half-written file or folder stays.

(The UCI benchmark is not a subcommand: it lives in the repository, not in the installed
package; run ``python -m benchmarks.uci`` from the repository root.)
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence

from bnn_pyro import __version__
from bnn_pyro.cli import demo, fit, predict
from bnn_pyro.cli.errors import USER_ERRORS, OneLineParser, one_line

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
        >>> build_parser().parse_args(["--version"])
        Traceback (most recent call last):
          ...
        SystemExit: 0
    """
    parser = OneLineParser(prog="bnn-pyro", description="Bayesian neural networks on Pyro.")
    parser.add_argument("--version", action="version", version=f"bnn-pyro {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (demo, fit, predict):
        module.add_parser(sub).add_argument(
            "--debug", action="store_true", help="show the traceback of errors"
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``bnn-pyro`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit code.

    Args:
        argv: the command-line arguments, without the program name.

    Returns:
        The subcommand's exit code: 0 on success, 2 on a user error (printed in one line on
        stderr, naming the option), 130 on Ctrl-C. Bad arguments raise ``SystemExit(2)``
        after one line on stderr (argparse); ``--help`` raises ``SystemExit(0)``. Other
        exceptions are bugs and propagate with their traceback. Warnings raised while the
        subcommand runs are printed one line each after a success and dropped after an error
        (whose one line says what went wrong); ``--debug`` shows them as Python does. A reader
        of stdout that stops early (``bnn-pyro predict ... | head``) ends the command quietly,
        with code 0.

    Example:
        >>> main(["predict", "--model", "missing.pt", "--data", "x.csv"])
        2
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    debug = getattr(args, "debug", False)
    with warnings.catch_warnings(record=not debug) as caught:
        try:
            code = int(args.func(args))
        except BrokenPipeError:  # the reader of stdout went away (`bnn-pyro predict | head`)
            # what is left in Python's buffer would raise again at exit: send it nowhere
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        except USER_ERRORS as err:
            if debug:
                raise
            print(f"bnn-pyro {args.command}: error: {one_line(err)}", file=sys.stderr)
            return 2  # the warnings that led to the error (e.g. "NaN loss") are dropped
        except KeyboardInterrupt:
            print(f"bnn-pyro {args.command}: interrupted", file=sys.stderr)
            return 130
    for message in dict.fromkeys(one_line(w.message) for w in caught or ()):  # once each
        print(f"bnn-pyro {args.command}: warning: {message}", file=sys.stderr)
    return code
