"""Every uncertainty method of the library, behind one contract (``fit``, ``predict``, ``save``,
``load``; see :class:`~bnn_pyro.base.BaseBayesianMethod`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bnn_pyro._lazy import lazy_face

if TYPE_CHECKING:  # the names below, for type checkers and editors; imported on first use
    from bnn_pyro.base import BaseBayesianMethod, summarize_samples, to_probabilities
    from bnn_pyro.methods.dkl.dkl import DKL
    from bnn_pyro.methods.ensemble.deep_ensemble import DeepEnsemble
    from bnn_pyro.methods.laplace.laplace import LaplaceApproximation
    from bnn_pyro.methods.mc_dropout.dropout import MCDropout
    from bnn_pyro.methods.sgmcmc.method import SGMCMC
    from bnn_pyro.methods.sngp.sngp import SNGP
    from bnn_pyro.methods.swag.swag import SWAG
    from bnn_pyro.methods.vbll.vbll import VBLL
    from bnn_pyro.methods.vi.bayes_nn import VariationalBayesNN
    from bnn_pyro.methods.vi.hidden_layer import HiddenLayerBNN
    from bnn_pyro.methods.vi.model import VariationalBNN
    from bnn_pyro.nn.gaussian_linear import GaussianLinear

__all__ = [  # in the order of bnn_pyro.METHODS, then the contract
    "VariationalBNN",
    "HiddenLayerBNN",
    "MCDropout",
    "DeepEnsemble",
    "SWAG",
    "LaplaceApproximation",
    "VBLL",
    "SNGP",
    "DKL",
    "VariationalBayesNN",
    "SGMCMC",
    "BaseBayesianMethod",
    "GaussianLinear",
    "summarize_samples",
    "to_probabilities",
]

__getattr__, __dir__ = lazy_face(__name__, __file__)
