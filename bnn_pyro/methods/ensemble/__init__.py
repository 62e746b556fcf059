"""Deep ensembles: ``DeepEnsemble``, and the K members trained as one stacked net."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bnn_pyro._lazy import lazy_face

if TYPE_CHECKING:  # the names below, for type checkers and editors; imported on first use
    from bnn_pyro.methods.ensemble.deep_ensemble import DeepEnsemble

__all__ = [
    "DeepEnsemble",
]

__getattr__, __dir__ = lazy_face(__name__, __file__)
