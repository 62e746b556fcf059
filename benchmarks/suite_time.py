"""How long the test suite takes: ``make test`` and ``make test-quick``, timed as a user runs them.

Each suite runs in a fresh process, ``python -m pytest -q -n auto`` (every core, as ``make test``
runs it) for the whole suite and the same on ``make test-quick``'s paths, with the interpreter
this script runs under. Printed: the wall time, the core count, the tests that passed and were
skipped, and the machine's processor. The README quotes the table (``update_readme.py``), so
"how long is ``make test``" has a measured answer next to the command.

Run it from a fresh clone after ``make test`` has built the virtual environment, on an otherwise
idle machine: ``.venv/bin/python benchmarks/suite_time.py [--only quick] [--output PATH]``; a
full run writes ``benchmarks/results/suite_time.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import time
from datetime import datetime, timezone

from _report import publish  # benchmarks/_report.py (scripts run from this folder)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
#: The suites: (what a user types, the Makefile target whose pytest paths are timed).
SUITES = (("make test", "test"), ("make test-quick", "test-quick"))
_COUNT = re.compile(r"(\d+) (passed|skipped|failed|errors?)")


def makefile_paths(target: str, makefile: str = os.path.join(ROOT, "Makefile")) -> tuple[str, ...]:
    """What a Makefile target hands to pytest after ``-n $(TEST_WORKERS)``: its options (the
    workers' ``--dist`` mode) and its paths (none: the whole suite).

    Example:
        >>> makefile_paths("test-quick")[:3]
        ('bnn_pyro', 'tests/elbos', 'tests/guides')
        >>> makefile_paths("test")
        ('--dist', 'loadfile')
    """
    with open(makefile, encoding="utf-8") as handle:
        text = handle.read()
    body = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", text, flags=re.M)
    if body is None:
        raise ValueError(f"the Makefile has no target {target!r}")
    line = next(ln for ln in body.group(1).splitlines() if "pytest" in ln)
    return tuple(line.split("$(TEST_WORKERS)", 1)[1].split())


def counts(output: str) -> dict[str, int]:
    """pytest's closing summary as numbers.

    Example:
        >>> counts("= 4092 passed, 106 skipped, 68 warnings in 341.2s =")
        {'passed': 4092, 'skipped': 106}
    """
    last = [ln for ln in output.strip().splitlines() if _COUNT.search(ln)][-1:]
    found = {kind.rstrip("s") if kind.startswith("error") else kind: int(n)
             for n, kind in _COUNT.findall(last[0] if last else "")}  # fmt: skip
    return found


def run_suite(paths: tuple[str, ...]) -> tuple[float, dict[str, int], int]:
    """Run pytest on every core over ``paths`` (the whole suite when empty): wall seconds,
    the summary's counts, the exit status."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "auto", "-p", "no:cacheprovider", *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    return time.perf_counter() - start, counts(done.stdout), done.returncode


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["quick", "full"], help="time one suite only")
    parser.add_argument("--output", help="also write the report here")
    args = parser.parse_args(argv)
    rows = []
    for name, target in SUITES:
        if args.only and (args.only == "quick") != (target == "test-quick"):
            continue
        seconds, found, status = run_suite(makefile_paths(target))
        if status != 0:
            raise SystemExit(f"{name} failed (exit {status}): {found}; time it on a green suite")
        rows.append((name, seconds, found))
    cores = os.cpu_count()
    lines = [
        "# How long the test suite takes",
        "",
        f"Measured {datetime.now(timezone.utc):%Y-%m-%d} by `python benchmarks/suite_time.py`, "
        f"on {cores} cores ({platform.processor() or platform.machine()}), "
        f"Python {platform.python_version()}, every core busy with the suite (`-n auto`).",
        "",
        "| command | wall time | passed | skipped |",
        "|---|---|---|---|",
    ]
    for name, seconds, found in rows:
        minutes = f"{seconds / 60:.1f} min"
        lines.append(
            f"| `{name}` | {minutes} | {found.get('passed', 0):,} | {found.get('skipped', 0):,} |"
        )
    publish("\n".join(lines) + "\n", args.output)


if __name__ == "__main__":
    main()
