"""Deep kernel learning on Pyro: ``DKL``, a ``pyro.contrib.gp`` Gaussian process (exact or
sparse) on the features of a net; its GP's parts (``build_gp``, ``gp_objective``) and kernels
by name (``KERNELS``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bnn_pyro._lazy import lazy_face

if TYPE_CHECKING:  # the names below, for type checkers and editors; imported on first use
    from bnn_pyro.methods.dkl.dkl import DKL
    from bnn_pyro.methods.dkl.gp import KERNELS, build_gp, gp_objective

__all__ = [
    "DKL",
    "KERNELS",
    "build_gp",
    "gp_objective",
]

__getattr__, __dir__ = lazy_face(__name__, __file__)
