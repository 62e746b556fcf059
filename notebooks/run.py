"""Execute the notebooks from their jupytext sources and write the paired ``.ipynb`` files.

Each notebook's cells live in ``notebooks/NAME.py`` (jupytext percent format: the file to edit
and review); ``NAME.ipynb`` is its executed copy, committed with its outputs::

    .venv/bin/python notebooks/run.py              # all, full size: rewrites the .ipynb files
    .venv/bin/python notebooks/run.py 01 03        # only these (name prefixes)
    .venv/bin/python notebooks/run.py --fast       # fast mode, a check: writes nothing

The fast mode sets ``BNN_PYRO_NOTEBOOK_FAST=1`` (few epochs, few samples: the numbers are
meaningless, the code paths are the same), as ``tests/test_notebooks.py`` does. Notebook 04
reads ``BNN_PYRO_UCI_RESULTS`` (default ``benchmarks/results/uci/uci.json``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import jupytext
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
NAMES = sorted(p.stem for p in HERE.glob("[0-9][0-9]_*.py"))
FAST_ENV = "BNN_PYRO_NOTEBOOK_FAST"


def run(name: str, fast: bool, timeout: int = 600) -> float:
    """Execute ``NAME.py`` (cwd: this folder); unless ``fast``, write ``NAME.ipynb``. Seconds."""
    nb = jupytext.read(HERE / f"{name}.py")
    for i, cell in enumerate(nb.cells):
        cell.id = f"{name[:2]}-{i:02d}"  # stable ids: no diff noise between runs
    env = os.environ.copy()  # the kernel inherits the environment, with the fast switch set
    env.pop(FAST_ENV, None)
    if fast:
        env[FAST_ENV] = "1"
    start = time.perf_counter()
    resources = {"metadata": {"path": str(HERE)}}
    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources=resources).execute(env=env)
    seconds = time.perf_counter() - start
    if not fast:
        jupytext.write(nb, HERE / f"{name}.ipynb")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="notebook name prefixes (default: all)")
    parser.add_argument("--fast", action="store_true", help=f"{FAST_ENV}=1; write nothing")
    args = parser.parse_args(argv)
    names = [n for n in NAMES if not args.names or any(n.startswith(p) for p in args.names)]
    if not names:
        parser.error(f"no notebook matches {args.names}; choose from {NAMES}")
    for name in names:
        seconds = run(name, fast=args.fast)
        print(f"{name}: {seconds:.1f} s ({'fast' if args.fast else 'full'})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
