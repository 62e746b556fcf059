"""Deep ensembles: ``DeepEnsemble``, and the K members trained as one stacked net."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bnn_pyro._lazy import lazy_names

if TYPE_CHECKING:  # the names below, for type checkers and editors; imported on first use
    from bnn_pyro.methods.ensemble.deep_ensemble import DeepEnsemble

__all__ = [
    "DeepEnsemble",
]

_NAMES = {
    "DeepEnsemble": "bnn_pyro.methods.ensemble.deep_ensemble",
}
__getattr__, __dir__ = lazy_names(__name__, _NAMES)
