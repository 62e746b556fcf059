"""A benchmark script (or its ``main``) run in the test's process, as its command line would run it.

A fresh interpreter's start and imports (torch, Pyro) cost a few CPU-s a script on a 2-core
machine, more than most quick runs' own work; in this process the script leaves no trace in
the random generators the tests after it draw from.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import runpy
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pyro
import torch

BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")


@contextlib.contextmanager
def generators_kept() -> Iterator[None]:
    """Python's, NumPy's and torch's random generators as they were before the block."""
    python, numpy = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng():
            yield
    finally:
        random.setstate(python)
        np.random.set_state(numpy)


def run_main(main: Callable[[list[str]], int | None], argv: Sequence[str]) -> str:
    """``main(argv)``, which must return 0, its generators kept: what it printed."""
    printed = io.StringIO()
    with generators_kept(), contextlib.redirect_stdout(printed):
        code = main(list(argv))
    assert code == 0, (code, printed.getvalue())
    return printed.getvalue()


def run_script(script: str, *args: str) -> str:
    """``python benchmarks/<script> *args`` in this process: what it printed. The script runs as
    ``__main__`` with its folder first on ``sys.path``; afterwards the sibling modules it imported
    from that folder are dropped, the random generators it seeded are put back as they were and
    Pyro's parameter store it filled is emptied."""
    path = os.path.join(BENCHMARKS, script)
    folder = os.path.dirname(os.path.abspath(path))
    before = set(sys.modules)
    argv = sys.argv
    sys.argv = [path, *args]
    sys.path.insert(0, folder)
    printed = io.StringIO()
    try:
        # (warnings: a fresh interpreter printed them to its stderr, which the tests never read)
        with generators_kept(), contextlib.redirect_stdout(printed), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                runpy.run_path(path, run_name="__main__")
            except SystemExit as stop:  # sys.exit(main()): the exit code, 0 when it ran through
                assert stop.code in (0, None), (stop.code, printed.getvalue())
    finally:
        sys.argv = argv
        sys.path.remove(folder)
        for name in set(sys.modules) - before:
            where = getattr(sys.modules[name], "__file__", None) or ""
            if where and "." not in name and os.path.dirname(os.path.abspath(where)) == folder:
                del sys.modules[name]
        pyro.clear_param_store()
    return printed.getvalue()
