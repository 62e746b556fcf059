"""bnn_pyro: Bayesian neural networks on Pyro."""

from bnn_pyro import methods
from bnn_pyro.exceptions import NotFittedError

__version__ = "0.1.0"

__all__ = ["NotFittedError", "methods", "__version__"]
