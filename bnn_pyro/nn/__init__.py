"""Nets and layers.

* :func:`mlp` and the layers that accept weights with leading sample dims (:class:`Linear`,
  :class:`Conv2d`), used by :class:`~bnn_pyro.VariationalBNN`.
* Torch-native Bayesian layers, trained without Pyro: the Bayes-by-Backprop layer
  :class:`MeanFieldLinear` (``kl_divergence()``), as :class:`GaussianLinear` (mu/rho) or
  :class:`BayesianLinear` (mean/log_std), and the functional API :func:`bayesian_dense` /
  :func:`build` (:class:`BayesianMLP`).
"""

from bnn_pyro.nn.bayesian_linear import BayesianLinear
from bnn_pyro.nn.bayesian_mlp import BayesianMLP, bayesian_dense, build
from bnn_pyro.nn.gaussian_linear import GaussianLinear
from bnn_pyro.nn.layers import Conv2d, Linear, batched_conv2d, batched_linear
from bnn_pyro.nn.mean_field_linear import MeanFieldLinear
from bnn_pyro.nn.mlp import mlp, mlp_architecture

__all__ = [
    "BayesianLinear",
    "BayesianMLP",
    "Conv2d",
    "GaussianLinear",
    "Linear",
    "MeanFieldLinear",
    "batched_conv2d",
    "batched_linear",
    "bayesian_dense",
    "build",
    "mlp",
    "mlp_architecture",
]
