"""Effect handlers: local reparameterization and flipout for layers with Normal guide weights,
and the KL weight.

:class:`LocalReparameterization` is the handler; :mod:`bnn_pyro.poutine.estimators` holds the
maths it applies (also usable on its own). :class:`KLWeight` scales the latent sites (beta).
"""

from bnn_pyro.poutine.estimators import (
    flipout_conv2d,
    flipout_linear,
    local_reparam_conv2d,
    local_reparam_linear,
    preactivation_std,
)
from bnn_pyro.poutine.kl_weight import KLWeight
from bnn_pyro.poutine.local_reparameterization import ESTIMATORS, LocalReparameterization

__all__ = [
    "ESTIMATORS",
    "KLWeight",
    "LocalReparameterization",
    "flipout_conv2d",
    "flipout_linear",
    "local_reparam_conv2d",
    "local_reparam_linear",
    "preactivation_std",
]
