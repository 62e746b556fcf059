"""Monte Carlo dropout: ``MCDropout``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bnn_pyro._lazy import lazy_face

if TYPE_CHECKING:  # the names below, for type checkers and editors; imported on first use
    from bnn_pyro.methods.mc_dropout.dropout import DROPOUT_TYPES, MCDropout

__all__ = [
    "DROPOUT_TYPES",
    "MCDropout",
]

__getattr__, __dir__ = lazy_face(__name__, __file__)
