"""bnn_pyro: Bayesian neural networks on Pyro.

Example:
    >>> import bnn_pyro as bp
    >>> bnn = bp.VariationalBNN(bp.nn.mlp(13, [50], 1), bp.likelihoods.Gaussian(scale="learned"))
    >>> swag = bp.make("swag", bp.nn.mlp(13, [50], 1), bp.Gaussian(scale="learned"))
    >>> list(bp.METHODS)[:3]
    ['vi', 'lrt', 'bb_alpha']
"""

from importlib import metadata as _metadata

import pyro.distributions as dist

from bnn_pyro import (
    _moved,
    calibration,
    datasets,
    guides,
    likelihoods,
    losses,
    methods,
    metrics,
    nn,
    poutine,
    priors,
    training,
)
from bnn_pyro.base import BaseBayesianMethod, PredictOutput
from bnn_pyro.distributions import HiddenLayer
from bnn_pyro.exceptions import (
    CheckpointError,
    NotFittedError,
    PosteriorCollapseWarning,
    TrainingDivergedError,
    TrainingInstabilityWarning,
)
from bnn_pyro.guides import MeanFieldNormalGuide
from bnn_pyro.learned_prior import LearnedNormalPrior
from bnn_pyro.likelihoods import Bernoulli, Categorical, Gaussian, HeteroscedasticGaussian
from bnn_pyro.methods import (
    SGMCMC,
    SWAG,
    DeepEnsemble,
    LaplaceApproximation,
    MCDropout,
    VariationalBayesNN,
)
from bnn_pyro.methods.vi.hidden_layer import HiddenLayerBNN
from bnn_pyro.methods.vi.model import VariationalBNN
from bnn_pyro.poutine import LocalReparameterization
from bnn_pyro.priors import IIDPrior, LayerwiseNormalPrior, ScaleMixturePrior
from bnn_pyro.registry import METHODS, load, make, register_method
from bnn_pyro.stacking import fit_stacked
from bnn_pyro.threads import get_threads, set_threads, threads
from bnn_pyro.training import EarlyStopping, History, linear_annealing

_moved.install()  # the earlier module paths (bnn_pyro.bnn, ...) still import, with a warning

try:  # one source: pyproject.toml, through the installed distribution's metadata
    __version__ = _metadata.version("bnn_pyro")
except _metadata.PackageNotFoundError:  # a source tree on sys.path, never installed
    __version__ = "0+unknown"

__all__ = [
    "METHODS",
    "PredictOutput",
    "SGMCMC",
    "SWAG",
    "BaseBayesianMethod",
    "DeepEnsemble",
    "LaplaceApproximation",
    "MCDropout",
    "VariationalBayesNN",
    "Bernoulli",
    "Categorical",
    "CheckpointError",
    "EarlyStopping",
    "Gaussian",
    "HeteroscedasticGaussian",
    "HiddenLayer",
    "HiddenLayerBNN",
    "History",
    "IIDPrior",
    "LayerwiseNormalPrior",
    "LearnedNormalPrior",
    "LocalReparameterization",
    "MeanFieldNormalGuide",
    "NotFittedError",
    "PosteriorCollapseWarning",
    "TrainingInstabilityWarning",
    "ScaleMixturePrior",
    "TrainingDivergedError",
    "VariationalBNN",
    "__version__",
    "calibration",
    "datasets",
    "dist",
    "fit_stacked",
    "get_threads",
    "guides",
    "likelihoods",
    "linear_annealing",
    "load",
    "losses",
    "make",
    "methods",
    "metrics",
    "nn",
    "plots",
    "poutine",
    "priors",
    "register_method",
    "set_threads",
    "threads",
    "training",
]


def __getattr__(name: str) -> object:
    # matplotlib is imported only when plots are asked for
    if name == "plots":
        import importlib

        return importlib.import_module("bnn_pyro.plots")
    # scikit-learn is imported only when the estimators are asked for (not in __all__: it is
    # an optional dependency)
    if name in ("BNNRegressor", "BNNClassifier", "TabularBNN", "estimators"):
        import importlib

        module = importlib.import_module("bnn_pyro.estimators")
        return module if name == "estimators" else getattr(module, name)
    # Lightning is imported only when its module is asked for (an optional dependency too)
    if name == "BNNLightningModule":
        import importlib

        return importlib.import_module("bnn_pyro.methods.vi.lightning").BNNLightningModule
    raise AttributeError(f"module 'bnn_pyro' has no attribute {name!r}")
