"""The UCI regression benchmark of issue 5 (a thin wrapper of ``bnn_pyro.uci_benchmark``).

Usage::

    python benchmarks/uci.py --data /work/shared/data/uci --out benchmarks/results/uci --jobs 2
    python benchmarks/uci.py --data /work/shared/data/uci --datasets yacht --splits 0-1 --quick

See ``python benchmarks/uci.py --help``.
"""

import sys

from bnn_pyro.uci_benchmark.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
