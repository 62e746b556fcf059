"""CSV in and out for the ``bnn-pyro`` command, with the standard library and numpy only.

Every problem with a file (missing, unreadable, empty, ragged rows, a missing column, a column
that is not numeric) raises :class:`~bnn_pyro.exceptions.CLIError` with a one-line message
naming the file, the column and the line; the command prints it and exits with code 2.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from bnn_pyro.cli.output import atomic_write_text
from bnn_pyro.exceptions import CLIError

__all__ = ["Table", "read_csv", "write_csv"]

_MISSING = {"", "na", "nan", "n/a", "null", "none", "?"}


@dataclass
class Table:
    """A CSV file as text cells.

    Attributes:
        path: the file it was read from.
        header: the column names ``(D,)``.
        rows: the data rows, each a list of ``len(header)`` cells.
        lines: the line number of each row in the file (for error messages).

    Example:
        >>> table = Table("f.csv", ["x", "y"], [["1", "a"], ["2", "b"]], [2, 3])
        >>> table.numbers(["x"]).tolist(), table.labels("y")
        ([[1.0], [2.0]], ['a', 'b'])
    """

    path: str
    header: list[str]
    rows: list[list[str]]
    lines: list[int]

    def index(self, column: str) -> int:
        """The position of ``column``; a :class:`CLIError` listing the columns if absent.

        Example:
            >>> Table("f.csv", ["a", "b"], [["1", "2"]], [2]).index("b")
            1
        """
        if column not in self.header:
            raise CLIError(f"{self.path}: no column {column!r} (columns: {', '.join(self.header)})")
        return self.header.index(column)

    def texts(self, column: str) -> list[str]:
        """The cells of ``column``, stripped.

        Example:
            >>> Table("f.csv", ["a"], [[" x "], ["y"]], [2, 3]).texts("a")
            ['x', 'y']
        """
        i = self.index(column)
        return [row[i].strip() for row in self.rows]

    def numbers(self, columns: Sequence[str]) -> np.ndarray:
        """The ``columns`` as a float64 array ``(N, len(columns))``.

        Raises:
            CLIError: a missing value or a cell that is not a finite number (naming the column,
                the line and the cell).

        Example:
            >>> t = Table("f.csv", ["a", "b"], [["1", "2.5"], ["3", "x"]], [2, 3])
            >>> t.numbers(["a"]).tolist()
            [[1.0], [3.0]]
            >>> t.numbers(["b"])
            Traceback (most recent call last):
              ...
            bnn_pyro.exceptions.CLIError: f.csv: column 'b' is not numeric (line 3: 'x')
        """
        out = np.empty((len(self.rows), len(columns)))
        for j, column in enumerate(columns):
            for r, cell in enumerate(self.texts(column)):
                out[r, j] = self._number(column, cell, self.lines[r])
        return out

    def labels(self, column: str) -> list[str]:
        """The cells of ``column`` as class labels (text); a :class:`CLIError` if one is missing.

        Example:
            >>> Table("f.csv", ["y"], [["cat"], ["NA"]], [2, 3]).labels("y")  # doctest: +ELLIPSIS
            Traceback (most recent call last):
              ...
            bnn_pyro.exceptions.CLIError: f.csv: column 'y' has a missing value on line 3; ...
        """
        cells = self.texts(column)
        for cell, line in zip(cells, self.lines, strict=True):
            self._check_present(column, cell, line)
        return cells

    def _check_present(self, column: str, cell: str, line: int) -> None:
        if cell.lower() in _MISSING:
            raise CLIError(
                f"{self.path}: column {column!r} has a missing value on line {line}; "
                "fill or drop the row first"
            )

    def _number(self, column: str, cell: str, line: int) -> float:
        self._check_present(column, cell, line)
        try:
            value = float(cell)
        except ValueError:
            raise CLIError(
                f"{self.path}: column {column!r} is not numeric (line {line}: {cell!r})"
            ) from None
        if not math.isfinite(value):
            raise CLIError(f"{self.path}: column {column!r} is not finite (line {line}: {cell!r})")
        return value


def read_csv(path: str) -> Table:
    """Read a comma-separated file with a header line.

    Args:
        path: the file.

    Returns:
        The :class:`Table` (blank lines skipped).

    Raises:
        CLIError: the file is missing, unreadable, not UTF-8 text, empty, has no data rows,
            duplicate or empty column names, or a row with the wrong number of cells.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "d.csv")
        >>> with open(path, "w") as f:
        ...     _ = f.write("x, label\\n1.5,cat\\n\\n2,dog\\n")
        >>> table = read_csv(path)
        >>> table.header, table.texts("label"), table.lines
        (['x', 'label'], ['cat', 'dog'], [2, 4])
        >>> import shutil; shutil.rmtree(os.path.dirname(path))
    """
    if not os.path.exists(path):
        raise CLIError(f"{path}: no such file")
    if os.path.isdir(path):
        raise CLIError(f"{path}: is a folder, not a CSV file")
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            text = handle.read()
    except UnicodeDecodeError:
        raise CLIError(f"{path}: not a UTF-8 text file (is it a CSV file?)") from None
    except OSError as err:
        raise CLIError(f"{path}: cannot read ({err.strerror or err})") from None
    if "\x00" in text:
        raise CLIError(f"{path}: not a text file (is it a CSV file?)")
    reader = csv.reader(io.StringIO(text))
    header: list[str] | None = None
    rows: list[list[str]] = []
    lines: list[int] = []
    try:
        for record in reader:
            if not record or all(not cell.strip() for cell in record):
                continue
            if header is None:
                header = [name.strip() for name in record]
                _check_header(path, header)
                continue
            if len(record) != len(header):
                raise CLIError(
                    f"{path}: line {reader.line_num} has {len(record)} cell(s), the header "
                    f"has {len(header)}"
                )
            rows.append(record)
            lines.append(reader.line_num)
    except csv.Error as err:
        raise CLIError(f"{path}: not a valid CSV file (line {reader.line_num}: {err})") from None
    if header is None:
        raise CLIError(f"{path}: the file is empty")
    if not rows:
        raise CLIError(f"{path}: no data rows below the header")
    return Table(path, header, rows, lines)


def _check_header(path: str, header: list[str]) -> None:
    if any(not name for name in header):
        raise CLIError(f"{path}: the header has an empty column name")
    seen: set[str] = set()
    for name in header:
        if name in seen:
            raise CLIError(f"{path}: the header names column {name!r} twice")
        seen.add(name)


def write_csv(path: str | None, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Write ``rows`` under ``header`` to ``path`` (stdout for ``None``); floats with 10 digits.

    The file is written whole or not at all (:func:`~bnn_pyro.cli.output.atomic_write_text`);
    a missing or read-only folder raises :class:`CLIError` naming ``--out``.

    Example:
        >>> write_csv(None, ["mean", "std"], [[1.0, 0.25]])
        mean,std
        1,0.25
    """

    def cell(value: object) -> object:
        return format(value, ".10g") if isinstance(value, (float, np.floating)) else value

    def write(handle: io.TextIOBase) -> None:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(header)
        writer.writerows([[cell(v) for v in row] for row in rows])

    if path is None:
        write(sys.stdout)
        return
    text = io.StringIO()
    write(text)
    atomic_write_text(path, text.getvalue())


def parse_with(
    add_parser: Callable[[argparse._SubParsersAction], argparse.ArgumentParser], argv: list[str]
) -> argparse.Namespace:
    """Parse ``argv`` with a ``bnn-pyro`` parser holding the one subcommand ``add_parser`` adds.

    Example:
        >>> from bnn_pyro.cli.predict import add_parser
        >>> parse_with(add_parser, ["predict", "--model", "m.pt", "--data", "d.csv"]).model
        'm.pt'
    """
    parser = argparse.ArgumentParser(prog="bnn-pyro")
    add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)
