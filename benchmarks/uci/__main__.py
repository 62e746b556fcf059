"""``python -m benchmarks.uci``: the UCI regression benchmark, from the repository root.

Usage::

    python -m benchmarks.uci --data benchmarks/uci/data --out benchmarks/results/uci --jobs 2
    python -m benchmarks.uci --data benchmarks/uci/data --datasets yacht --splits 0-1 --quick

See ``python -m benchmarks.uci --help``.
"""

import sys

from benchmarks.uci.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
