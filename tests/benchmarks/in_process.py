"""A benchmark script's ``main`` run in the test's process, as its command line would run it.

A fresh interpreter's start and imports (torch, Pyro) cost a few CPU-s a script on a 2-core
machine, more than most quick runs' own work; in this process the script leaves no trace in
the random generators the tests after it draw from.
"""

from __future__ import annotations

import contextlib
import io
import random
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch


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
