"""Variational inference: the Pyro models trained by SVI (``VariationalBNN``, ``HiddenLayerBNN``),
their base (``SVIModel``), the pure-torch ``VariationalBayesNN``, the SVI step, MAP initialisation,
the plain-torch fast loss, per-layer diagnostics and the stacked fit of K models."""

from bnn_pyro.methods.vi.bayes_nn import VariationalBayesNN
from bnn_pyro.methods.vi.hidden_layer import HiddenLayerBNN
from bnn_pyro.methods.vi.model import VariationalBNN
from bnn_pyro.methods.vi.predictive import SVIPredictive
from bnn_pyro.methods.vi.svi_model import SVIModel

__all__ = [
    "HiddenLayerBNN",
    "SVIModel",
    "SVIPredictive",
    "VariationalBNN",
    "VariationalBayesNN",
]
