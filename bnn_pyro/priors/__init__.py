"""Priors: which parameters of a net are Bayesian, and the distribution of each weight site.

``base.py`` holds :class:`Prior` (what every prior answers, and the registry that reloads a
saved one); one file per family: ``iid.py``, ``layerwise.py``, ``scale_mixture.py``, and the
priors with latent scales of their own, ``hierarchical.py`` and ``horseshoe.py``.
"""

from bnn_pyro.priors.base import DEFAULT_BAYESIAN_TYPES, Prior, prior_from_config
from bnn_pyro.priors.hierarchical import HierarchicalNormalPrior
from bnn_pyro.priors.horseshoe import HorseshoePrior
from bnn_pyro.priors.iid import IIDPrior
from bnn_pyro.priors.layerwise import LayerwiseNormalPrior
from bnn_pyro.priors.scale_mixture import ScaleMixturePrior
from bnn_pyro.weight_distributions import ScaleMixtureNormal, SharedNormal

__all__ = [
    "Prior",
    "IIDPrior",
    "LayerwiseNormalPrior",
    "ScaleMixturePrior",
    "HierarchicalNormalPrior",
    "HorseshoePrior",
    "ScaleMixtureNormal",
    "SharedNormal",
    "DEFAULT_BAYESIAN_TYPES",
    "prior_from_config",
]
