"""Deep ensembles: ``DeepEnsemble``, and the K members trained as one stacked net."""

from bnn_pyro.methods.ensemble.deep_ensemble import DeepEnsemble

__all__ = [
    "DeepEnsemble",
]
