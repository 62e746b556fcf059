"""How ``bnn-pyro`` reports errors: one line on stderr, exit code 2, the option named.

* Bad arguments (an unknown ``--method``, ``--lr abc``, a missing ``--data``): argparse's error,
  printed by :class:`OneLineParser` in one line (no usage block) and ``SystemExit(2)``.
* User and library errors while a subcommand runs (:data:`USER_ERRORS`: a
  :class:`~bnn_pyro.exceptions.CLIError`, ``ValueError``, ``TypeError``, ``OSError``, a
  diverged fit, a corrupt checkpoint): :func:`bnn_pyro.cli.main` prints
  ``bnn-pyro CMD: error: <message>`` in one line and returns 2. :func:`naming` prefixes the
  message with the option it comes from (``--data: ...``), so every message says which option
  to change.
* Anything else is a bug: the traceback is shown (exit code 1). ``--debug`` shows the traceback
  of user errors too.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

from bnn_pyro import exceptions
from bnn_pyro.exceptions import CLIError

__all__ = ["USER_ERRORS", "OneLineParser", "naming", "one_line"]

#: What :func:`bnn_pyro.cli.main` reports in one line with exit code 2 (``FloatingPointError``
#: covers :class:`~bnn_pyro.exceptions.TrainingDivergedError`; ``NotFittedError`` is a
#: ``ValueError``; ``CheckpointError`` where the library defines it).
USER_ERRORS: tuple[type[BaseException], ...] = (
    CLIError,
    ValueError,
    TypeError,
    OSError,
    FloatingPointError,
    *((exceptions.CheckpointError,) if hasattr(exceptions, "CheckpointError") else ()),
)


def one_line(err: BaseException) -> str:
    """The message of ``err`` on one line (whitespace runs collapsed; its type if empty).

    Example:
        >>> one_line(ValueError("lr must be > 0,\\n  got -1"))
        'lr must be > 0, got -1'
        >>> one_line(KeyError())
        'KeyError'
    """
    return " ".join(str(err).split()) or type(err).__name__


@contextmanager
def naming(option: str) -> Iterator[None]:
    """Re-raise a :data:`USER_ERRORS` error raised inside as a :class:`CLIError` whose message
    starts with ``option`` (unless it names it already), so the user knows what to change.

    Args:
        option: the option the work inside reads, e.g. ``"--data"``.

    Example:
        >>> with naming("--data"):
        ...     raise CLIError("d.csv: no such file")
        Traceback (most recent call last):
          ...
        bnn_pyro.exceptions.CLIError: --data: d.csv: no such file
    """
    try:
        yield
    except USER_ERRORS as err:
        message = one_line(err)
        if option not in message.split(":")[0].split():
            message = f"{option}: {message}"
        raise CLIError(message) from err


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line on stderr and exit code 2.

    argparse prints the usage block and then the error; the usage block hides the one line
    that matters, so this prints ``PROG: error: MESSAGE (see PROG --help)`` only. Subparsers
    made by ``add_subparsers`` are of the same class.

    Example:
        >>> import contextlib, io
        >>> parser = OneLineParser(prog="bnn-pyro")
        >>> _ = parser.add_argument("--lr", type=float)
        >>> err = io.StringIO()
        >>> with contextlib.redirect_stderr(err):
        ...     try:
        ...         parser.parse_args(["--lr", "abc"])
        ...     except SystemExit as stop:
        ...         print(stop.code)
        2
        >>> err.getvalue()
        "bnn-pyro: error: argument --lr: invalid float value: 'abc' (see bnn-pyro --help)\\n"
    """

    def error(self, message: str) -> NoReturn:
        """Print ``message`` in one line on stderr and exit with code 2.

        Example:
            >>> import contextlib, io
            >>> with contextlib.redirect_stderr(io.StringIO()) as err:
            ...     try:
            ...         OneLineParser(prog="p").error("bad")
            ...     except SystemExit as stop:
            ...         print(stop.code, err.getvalue().strip())
            2 p: error: bad (see p --help)
        """
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)\n")
