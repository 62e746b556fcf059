"""bnn_pyro: Bayesian neural networks on Pyro.

Example:
    >>> import bnn_pyro as bp
    >>> bnn = bp.VariationalBNN(bp.nn.mlp(13, [50], 1), bp.likelihoods.Gaussian(scale="learned"))
"""

import pyro.distributions as dist

from bnn_pyro import guides, likelihoods, methods, nn, priors, training
from bnn_pyro.bnn import VariationalBNN
from bnn_pyro.exceptions import NotFittedError, TrainingDivergedError
from bnn_pyro.guides import MeanFieldNormalGuide
from bnn_pyro.likelihoods import Bernoulli, Categorical, Gaussian, HeteroscedasticGaussian
from bnn_pyro.priors import IIDPrior, LayerwiseNormalPrior, ScaleMixturePrior
from bnn_pyro.training import EarlyStopping, History, linear_annealing

__version__ = "0.1.0"

__all__ = [
    "Bernoulli",
    "Categorical",
    "EarlyStopping",
    "Gaussian",
    "HeteroscedasticGaussian",
    "History",
    "IIDPrior",
    "LayerwiseNormalPrior",
    "MeanFieldNormalGuide",
    "NotFittedError",
    "ScaleMixturePrior",
    "TrainingDivergedError",
    "VariationalBNN",
    "__version__",
    "dist",
    "guides",
    "likelihoods",
    "linear_annealing",
    "methods",
    "nn",
    "priors",
    "training",
]
