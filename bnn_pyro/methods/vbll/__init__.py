"""Variational Bayesian last layers: ``VBLL``, and its last layer, ``VBLLHead``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bnn_pyro._lazy import lazy_face

if TYPE_CHECKING:  # the names below, for type checkers and editors; imported on first use
    from bnn_pyro.methods.vbll.head import VBLLHead
    from bnn_pyro.methods.vbll.vbll import VBLL

__all__ = [
    "VBLL",
    "VBLLHead",
]

__getattr__, __dir__ = lazy_face(__name__, __file__)
