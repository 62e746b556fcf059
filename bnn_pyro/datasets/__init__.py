"""Data sets: embedded toy problems, deterministic from ``seed``.

:func:`toy_regression_1d`, :func:`toy_function`, :func:`two_moons`, :func:`load_digits_split`;
:data:`FUNCTION_PROBLEMS`, four 1-D problems with a known function and a gap or a tail.

(The UCI regression split-folder loader and the published UCI results live with the benchmark
harness in the repository, ``benchmarks/uci/``, not in the installed package.)
"""

from bnn_pyro.datasets import function_problems, toy
from bnn_pyro.datasets.function_problems import *  # noqa: F403 - its public names
from bnn_pyro.datasets.toy import *  # noqa: F403 - its public names

__all__ = [*toy.__all__, *function_problems.__all__]
