"""``BayesianLinear``: the mean/log-std Bayes-by-Backprop linear layer."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from bnn_pyro.nn.mean_field_linear import MeanFieldLinear

__all__ = ["BayesianLinear"]


class BayesianLinear(MeanFieldLinear):
    """:class:`~bnn_pyro.nn.mean_field_linear.MeanFieldLinear` with each weight
    ``N(weight_mean, exp(weight_log_std)²)``.

    The forward pass draws one weight matrix with the reparameterization trick, ``weight = mean
    + exp(log_std) * eps``, so the output is differentiable in the mean and the log-std.
    :meth:`kl_divergence` is the closed-form KL to the prior ``N(0, prior_std²)``; train with
    ``task_loss + kl_divergence() / N`` (N the data set size, for a task loss that is a mean
    over the batch). The same layer as :class:`~bnn_pyro.nn.GaussianLinear` but for the
    parametrization of the standard deviation.

    Arguments and shapes as :class:`~bnn_pyro.nn.mean_field_linear.MeanFieldLinear`.

    Example:
        >>> layer = BayesianLinear(3, 2)
        >>> layer(torch.randn(5, 3)).shape
        torch.Size([5, 2])
        >>> layer.kl_divergence().dim()
        0
    """

    def init_parameters(self, weight: torch.Tensor, bias: torch.Tensor, init_std: float) -> None:
        log_std = math.log(init_std)
        self.weight_mean = nn.Parameter(weight)
        self.weight_log_std = nn.Parameter(torch.full_like(weight, log_std))
        self.bias_mean = nn.Parameter(bias)
        self.bias_log_std = nn.Parameter(torch.full_like(bias, log_std))

    def weight_posterior(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.weight_mean, self.weight_log_std.exp()

    def bias_posterior(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.bias_mean, self.bias_log_std.exp()
