"""Nets and layers: :func:`mlp`, and layers that accept weights with leading sample dims."""

from bnn_pyro.nn.layers import Conv2d, Linear, batched_conv2d, batched_linear
from bnn_pyro.nn.mlp import mlp

__all__ = ["Conv2d", "Linear", "batched_conv2d", "batched_linear", "mlp"]
