"""Monte Carlo dropout: ``MCDropout``."""

from bnn_pyro.methods.mc_dropout.dropout import DROPOUT_TYPES, MCDropout

__all__ = [
    "DROPOUT_TYPES",
    "MCDropout",
]
