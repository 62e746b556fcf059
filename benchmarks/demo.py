"""The table ``make demo`` prints, and its plot, written to ``benchmarks/results/`` for the README.

Runs :func:`bnn_pyro.cli.demo.run_demo` with its default settings (those of ``make demo``) on
one torch thread and writes

* ``benchmarks/results/demo.md``: the metrics table of :func:`bnn_pyro.cli.demo.format_table`
  (the printed report less its training time and the plot's path, which change from run to
  run) and a line naming the versions and settings;
* ``benchmarks/results/demo.png``: the demo's plot, with the converged NUTS reference's
  ``mean ± 2 sd`` of ``f`` on the same problem drawn over it (``results/no_data/demo.pt``,
  made by ``benchmarks/no_data_judge.py``) where that file is present.

The demo is seeded, so a run prints the same table every time; ``tests/cli/test_demo_cli.py``
runs it and compares the table with the committed ``demo.md``.

Run from the repository root: ``python benchmarks/demo.py [--output PATH]``, then
``python benchmarks/update_readme.py`` to copy the table into the README.
"""

from __future__ import annotations

import argparse
import inspect
import os
import shutil
import sys
import tempfile

import pyro
import torch

from bnn_pyro.cli.demo import DemoResult, format_table, run_demo

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "demo.md")
NUTS = os.path.join(os.path.dirname(RESULTS), "no_data", "demo.pt")


def report(result: DemoResult) -> str:
    """The contents of ``demo.md`` for a :func:`~bnn_pyro.cli.demo.run_demo` with its defaults.

    Example:
        >>> r = DemoResult(0.1, 0.5, 0.9, 0.8, -1.2, -3.0, 0.05, 0.4, 0.1, 9.8, "demo.png")
        >>> text = report(r)
        >>> text.startswith("# make demo") and "(x8.0 in the gap, x2.0 beyond)" in text
        True
        >>> "9.8" not in text
        True
    """
    defaults = inspect.signature(run_demo).parameters
    epochs, seed = defaults["epochs"].default, defaults["seed"].default
    return (
        "# make demo\n\n"
        "```\n"
        f"{format_table(result)}\n"
        "```\n\n"
        f"torch {torch.__version__}, pyro {pyro.__version__}, 1 thread; the defaults, seed {seed} "
        f"and {epochs} epochs: the same table on every run; command: python benchmarks/demo.py "
        "(it also writes the plot, demo.png)\n"
    )


def nuts_band() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """``(x, mean - 2 sd, mean + 2 sd)`` of the cached NUTS reference of the demo problem, or
    ``None`` where the cache is missing."""
    if not os.path.exists(NUTS):
        return None
    ref = torch.load(NUTS, weights_only=False)
    return ref["grid"][:, 0], ref["mean"] - 2 * ref["sd"], ref["mean"] + 2 * ref["sd"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=RESULTS, help="markdown file for the table")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # as the tests run it
    with tempfile.TemporaryDirectory() as tmp:
        result = run_demo(tmp, progress=False, reference=nuts_band())
        text = report(result)
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        shutil.copyfile(result.png, os.path.splitext(args.output)[0] + ".png")
    with open(args.output, "w", encoding="utf-8") as handle:
        handle.write(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
