"""``python -m bnn_pyro.cli``: the ``bnn-pyro`` command without the console script."""

import sys

from bnn_pyro.cli import main

if __name__ == "__main__":
    sys.exit(main())
