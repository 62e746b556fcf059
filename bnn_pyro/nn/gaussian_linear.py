"""``GaussianLinear``: the mean/rho (softplus) Bayes-by-Backprop linear layer."""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from bnn_pyro.nn.mean_field_linear import MeanFieldLinear, init_mean_field

__all__ = ["GaussianLinear", "init_mean_field"]


class GaussianLinear(MeanFieldLinear):
    """:class:`~bnn_pyro.nn.mean_field_linear.MeanFieldLinear` with weights
    ``W = mu + softplus(rho) * eps``.

    Parameters ``weight_mu``, ``weight_rho``, ``bias_mu``, ``bias_rho``; the standard deviation
    is ``softplus(rho)`` (``rho`` is sometimes called a log-variance; the formula is a softplus).

    Arguments and shapes as :class:`~bnn_pyro.nn.mean_field_linear.MeanFieldLinear`.

    Example:
        >>> layer = GaussianLinear(4, 3)
        >>> layer(torch.randn(10, 4)).shape
        torch.Size([10, 3])
        >>> layer(torch.randn(10, 4), num_samples=5).shape
        torch.Size([5, 10, 3])
        >>> bool(torch.equal(layer(torch.ones(2, 4), sample=False),
        ...                  layer(torch.ones(2, 4), sample=False)))
        True
    """

    def init_parameters(self, weight: torch.Tensor, bias: torch.Tensor, init_std: float) -> None:
        rho = math.log(math.expm1(init_std))  # inverse softplus
        self.weight_mu = nn.Parameter(weight)
        self.weight_rho = nn.Parameter(torch.full_like(weight, rho))
        self.bias_mu = nn.Parameter(bias)
        self.bias_rho = nn.Parameter(torch.full_like(bias, rho))

    def weight_posterior(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.weight_mu, F.softplus(self.weight_rho)

    def bias_posterior(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.bias_mu, F.softplus(self.bias_rho)
