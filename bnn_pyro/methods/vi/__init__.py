"""Variational inference: the Pyro models trained by SVI (``VariationalBNN``, ``HiddenLayerBNN``),
their base (``SVIModel``), the pure-torch ``VariationalBayesNN``, the SVI step, MAP initialisation,
the plain-torch fast loss, per-layer diagnostics and the stacked fit of K models."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bnn_pyro._lazy import lazy_face

if TYPE_CHECKING:  # the names below, for type checkers and editors; imported on first use
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

__getattr__, __dir__ = lazy_face(__name__, __file__)
