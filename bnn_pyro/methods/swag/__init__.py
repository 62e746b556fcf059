"""SWA-Gaussian: ``SWAG``."""

from bnn_pyro.methods.swag.swag import SWAG

__all__ = [
    "SWAG",
]
