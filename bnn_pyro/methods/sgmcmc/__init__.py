"""Stochastic-gradient MCMC: ``SGMCMC`` (``sghmc``, ``sgld``, ``csghmc``), its
``SampleCollector``, and convergence judged on predictions (``chain_diagnostics``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bnn_pyro._lazy import lazy_face

if TYPE_CHECKING:  # the names below, for type checkers and editors; imported on first use
    from bnn_pyro.methods.sgmcmc.collector import SampleCollector
    from bnn_pyro.methods.sgmcmc.diagnostics import (
        ChainDiagnostics,
        chain_diagnostics,
        prediction_diagnostics,
    )
    from bnn_pyro.methods.sgmcmc.method import SGMCMC

__all__ = [
    "SGMCMC",
    "ChainDiagnostics",
    "SampleCollector",
    "chain_diagnostics",
    "prediction_diagnostics",
]

__getattr__, __dir__ = lazy_face(__name__, __file__)
