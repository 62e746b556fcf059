"""Spectral-normalised neural Gaussian process: ``SNGP``, its output layer
``RandomFeatureGP`` and the spectral bound on its hidden layers, ``SpectralBound``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bnn_pyro._lazy import lazy_face

if TYPE_CHECKING:  # the names below, for type checkers and editors; imported on first use
    from bnn_pyro.methods.sngp.head import RandomFeatureGP
    from bnn_pyro.methods.sngp.sngp import SNGP
    from bnn_pyro.methods.sngp.spectral import SpectralBound, bound_spectral_norms

__all__ = [
    "SNGP",
    "RandomFeatureGP",
    "SpectralBound",
    "bound_spectral_norms",
]

__getattr__, __dir__ = lazy_face(__name__, __file__)
