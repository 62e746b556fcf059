"""Stochastic-gradient MCMC: ``SGMCMC`` (``sghmc``, ``sgld``, ``csghmc``), its
``SampleCollector``, and convergence judged on predictions (``chain_diagnostics``)."""

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
