"""Classic uncertainty methods behind one ``predict`` interface."""

from bnn_pyro.base import BaseBayesianMethod, summarize_samples, to_probabilities
from bnn_pyro.methods.ensemble.deep_ensemble import DeepEnsemble
from bnn_pyro.methods.laplace.laplace import LaplaceApproximation
from bnn_pyro.methods.mc_dropout.dropout import MCDropout
from bnn_pyro.methods.sgmcmc.method import SGMCMC
from bnn_pyro.methods.swag.swag import SWAG
from bnn_pyro.methods.vi.bayes_nn import VariationalBayesNN
from bnn_pyro.nn.gaussian_linear import GaussianLinear

__all__ = [
    "BaseBayesianMethod",
    "DeepEnsemble",
    "GaussianLinear",
    "LaplaceApproximation",
    "MCDropout",
    "SGMCMC",
    "SWAG",
    "VariationalBayesNN",
    "summarize_samples",
    "to_probabilities",
]
