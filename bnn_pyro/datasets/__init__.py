"""Data sets: embedded toy problems, deterministic from ``seed``.

:func:`toy_regression_1d`, :func:`toy_function`, :func:`two_moons`, :func:`load_digits_split`.

(The UCI regression split-folder loader and the published UCI results live with the benchmark
harness in the repository, ``benchmarks/uci/``, not in the installed package.)
"""

from bnn_pyro.datasets.toy import *  # noqa: F403 - the package is its one module's public names
from bnn_pyro.datasets.toy import __all__ as __all__
