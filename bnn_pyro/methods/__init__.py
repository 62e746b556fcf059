"""Classic uncertainty methods behind one ``predict`` interface."""

from bnn_pyro.base import BaseBayesianMethod, summarize_samples, to_probabilities
from bnn_pyro.methods.ensemble import DeepEnsemble
from bnn_pyro.methods.laplace import LaplaceApproximation
from bnn_pyro.methods.mc_dropout import MCDropout
from bnn_pyro.methods.swag import SWAG
from bnn_pyro.methods.variational import VariationalBayesNN
from bnn_pyro.nn.gaussian_linear import GaussianLinear

__all__ = [
    "BaseBayesianMethod",
    "DeepEnsemble",
    "GaussianLinear",
    "LaplaceApproximation",
    "MCDropout",
    "SWAG",
    "VariationalBayesNN",
    "summarize_samples",
    "to_probabilities",
]
