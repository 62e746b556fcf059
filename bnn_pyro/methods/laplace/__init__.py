"""The Laplace approximation: ``LaplaceApproximation``, its curvature and its Gaussian posterior."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bnn_pyro._lazy import lazy_face

if TYPE_CHECKING:  # the names below, for type checkers and editors; imported on first use
    from bnn_pyro.methods.laplace.laplace import LaplaceApproximation

__all__ = [
    "LaplaceApproximation",
]

__getattr__, __dir__ = lazy_face(__name__, __file__)
