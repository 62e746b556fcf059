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

from bnn_pyro._lazy import lazy_names
from bnn_pyro.exceptions import (
    CheckpointError,
    NotFittedError,
    PosteriorCollapseWarning,
    TrainingDivergedError,
    TrainingInstabilityWarning,
)
from bnn_pyro.threads import get_threads, set_threads, threads

if TYPE_CHECKING:  # what the names below are, for type checkers and editors
    import pyro.distributions as dist

    from bnn_pyro import (
        calibration,
        datasets,
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

#: The package's modules that ``bnn_pyro.<name>`` gives, imported on first use.
_MODULES = (
    "calibration",
    "datasets",
    "estimators",  # scikit-learn, an optional dependency: not in __all__
    "guides",
    "likelihoods",
    "losses",
    "methods",
    "metrics",
    "nn",
    "plots",  # matplotlib
    "poutine",
    "priors",
    "training",
)
#: Every other name ``bnn_pyro.<name>`` gives -> the module that holds it, imported on first
#: use: ``import bnn_pyro`` (and so ``bnn-pyro --help``) imports neither torch nor Pyro.
_NAMES = {
    "BaseBayesianMethod": "bnn_pyro.base",
    "PredictOutput": "bnn_pyro.base",
    "HiddenLayer": "bnn_pyro.distributions",
    "MeanFieldNormalGuide": "bnn_pyro.guides",
    "LearnedNormalPrior": "bnn_pyro.learned_prior",
    **dict.fromkeys(
        ("Bernoulli", "Categorical", "Gaussian", "HeteroscedasticGaussian"), "bnn_pyro.likelihoods"
    ),
    **dict.fromkeys(
        (
            "SGMCMC",
            "SWAG",
            "DeepEnsemble",
            "LaplaceApproximation",
            "MCDropout",
            "VariationalBayesNN",
        ),
        "bnn_pyro.methods",
    ),
    "HiddenLayerBNN": "bnn_pyro.methods.vi.hidden_layer",
    "VariationalBNN": "bnn_pyro.methods.vi.model",
    "LocalReparameterization": "bnn_pyro.poutine",
    **dict.fromkeys(
        (
            "HierarchicalNormalPrior",
            "HorseshoePrior",
            "IIDPrior",
            "LayerwiseNormalPrior",
            "ScaleMixturePrior",
        ),
        "bnn_pyro.priors",
    ),
    **dict.fromkeys(("METHODS", "load", "make", "register_method"), "bnn_pyro.registry"),
    "fit_stacked": "bnn_pyro.stacking",
    **dict.fromkeys(("EarlyStopping", "History", "linear_annealing"), "bnn_pyro.training"),
    # scikit-learn and Lightning: optional dependencies, not in __all__
    **dict.fromkeys(("BNNRegressor", "BNNClassifier", "TabularBNN"), "bnn_pyro.estimators"),
    "BNNLightningModule": "bnn_pyro.methods.vi.lightning",
}

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
    "HierarchicalNormalPrior",
    "History",
    "HorseshoePrior",
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


__getattr__, __dir__ = lazy_names(
    __name__,
    _NAMES,
    _MODULES,
    aliases={"dist": "pyro.distributions"},  # bp.dist: the module
)
