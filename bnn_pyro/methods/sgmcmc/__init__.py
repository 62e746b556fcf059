"""Stochastic-gradient MCMC: ``SGMCMC`` (``sghmc``, ``sgld``, ``csghmc``) and its
``SampleCollector``."""

from bnn_pyro.methods.sgmcmc.collector import SampleCollector
from bnn_pyro.methods.sgmcmc.method import SGMCMC

__all__ = ["SGMCMC", "SampleCollector"]
