"""The Laplace approximation: ``LaplaceApproximation``, its curvature and its Gaussian posterior."""

from bnn_pyro.methods.laplace.laplace import LaplaceApproximation

__all__ = [
    "LaplaceApproximation",
]
