"""bnn_pyro: Bayesian neural networks on Pyro.

Example:
    >>> import bnn_pyro as bp
    >>> bnn = bp.VariationalBNN(bp.nn.mlp(13, [50], 1), bp.likelihoods.Gaussian(scale="learned"))
    >>> swag = bp.make("swag", bp.nn.mlp(13, [50], 1), bp.Gaussian(scale="learned"))
    >>> list(bp.METHODS)[:3]
    ['vi', 'lrt', 'bb_alpha']
"""

from __future__ import annotations

from importlib import metadata as _metadata
from typing import TYPE_CHECKING

from bnn_pyro._lazy import lazy_face
from bnn_pyro.exceptions import (
    CheckpointError,
    HotChainWarning,
    NotFittedError,
    PosteriorCollapseWarning,
    TrainingDivergedError,
    TrainingInstabilityWarning,
)
from bnn_pyro.threads import get_threads, set_threads, threads

# Where every name bnn_pyro.<name> gives lives is written once, here (``__all__`` below lists
# the public ones, checked against these at import): imported on first use (``_lazy``), so that
# ``import bnn_pyro`` (and ``bnn-pyro --help``) imports neither torch nor Pyro
if TYPE_CHECKING:
    import pyro.distributions as dist  # bp.dist: the module

    from bnn_pyro import (
        calibration,
        datasets,
        estimators,
        guides,
        likelihoods,
        losses,
        methods,
        metrics,
        nn,
        plots,
        poutine,
        priors,
        training,
    )
    from bnn_pyro.base import BaseBayesianMethod, PredictOutput
    from bnn_pyro.distributions import HiddenLayer
    from bnn_pyro.estimators import BNNClassifier, BNNRegressor, TabularBNN
    from bnn_pyro.guides import MeanFieldNormalGuide
    from bnn_pyro.learned_prior import LearnedNormalPrior
    from bnn_pyro.likelihoods import Bernoulli, Categorical, Gaussian, HeteroscedasticGaussian
    from bnn_pyro.methods import (
        DKL,
        SGMCMC,
        SNGP,
        SWAG,
        VBLL,
        DeepEnsemble,
        LaplaceApproximation,
        MCDropout,
        VariationalBayesNN,
    )
    from bnn_pyro.methods.vi.hidden_layer import HiddenLayerBNN
    from bnn_pyro.methods.vi.lightning import BNNLightningModule
    from bnn_pyro.methods.vi.model import VariationalBNN
    from bnn_pyro.poutine import LocalReparameterization
    from bnn_pyro.priors import (
        HierarchicalNormalPrior,
        HorseshoePrior,
        IIDPrior,
        LayerwiseNormalPrior,
        ScaleMixturePrior,
    )
    from bnn_pyro.registry import METHODS, load, make, register_method
    from bnn_pyro.stacking import fit_stacked
    from bnn_pyro.training import EarlyStopping, History, linear_annealing

try:  # one source: pyproject.toml, through the installed distribution's metadata
    __version__ = _metadata.version("bnn_pyro")
except _metadata.PackageNotFoundError:  # a source tree on sys.path, never installed
    __version__ = "0+unknown"


# not in __all__ (optional dependencies): estimators, BNNClassifier, BNNRegressor, TabularBNN
# (scikit-learn), BNNLightningModule (Lightning)
__all__ = [
    "METHODS",
    "PredictOutput",
    "SGMCMC",
    "SWAG",
    "BaseBayesianMethod",
    "DeepEnsemble",
    "LaplaceApproximation",
    "MCDropout",
    "VBLL",
    "SNGP",
    "DKL",
    "VariationalBayesNN",
    "Bernoulli",
    "Categorical",
    "CheckpointError",
    "EarlyStopping",
    "Gaussian",
    "HeteroscedasticGaussian",
    "HiddenLayer",
    "HiddenLayerBNN",
    "HierarchicalNormalPrior",
    "History",
    "HorseshoePrior",
    "IIDPrior",
    "LayerwiseNormalPrior",
    "LearnedNormalPrior",
    "LocalReparameterization",
    "MeanFieldNormalGuide",
    "NotFittedError",
    "HotChainWarning",
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

__getattr__, __dir__ = lazy_face(__name__, __file__)
