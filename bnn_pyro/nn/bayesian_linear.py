"""``BayesianLinear``: Bayes-by-Backprop linear layer with mean and log-std."""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from bnn_pyro.losses import gaussian_kl
from bnn_pyro.nn.gaussian_linear import init_mean_field

__all__ = ["BayesianLinear"]


class BayesianLinear(nn.Module):
    """Linear layer with a factorised Gaussian over its weights and bias (Blundell et al. 2015).

    Each weight is ``N(weight_mean, exp(weight_log_std)²)``; the forward pass draws one weight
    matrix with the reparameterization trick, ``weight = mean + exp(log_std) * eps``, so the
    output is differentiable in the mean and the log-std. :meth:`kl_divergence` is the closed-form
    KL to the prior ``N(0, prior_std²)``; train with ``task_loss + kl_divergence() / N`` (N the
    data set size, for a task loss that is a mean over the batch).

    Initialisation: means like ``nn.Linear`` (``U(-1/sqrt(in), 1/sqrt(in))``), log-stds at
    ``log(init_std)`` with ``init_std = 0.1 / sqrt(in_features)`` by default, so the weight
    noise starts small next to the mean and the pre-activation scale does not grow with width.

    Args:
        in_features: input size ``D``.
        out_features: output size ``O``.
        prior_std: standard deviation of the zero-mean Gaussian prior (> 0).
        init_std: initial posterior standard deviation (> 0); default ``0.1 / sqrt(D)``.

    Shapes:
        ``x: (..., D)`` -> ``(..., O)``.

    Example:
        >>> layer = BayesianLinear(3, 2)
        >>> layer(torch.randn(5, 3)).shape
        torch.Size([5, 2])
        >>> layer.kl_divergence().dim()
        0
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        prior_std: float = 1.0,
        init_std: float | None = None,
    ) -> None:
        super().__init__()
        weight, bias, init_std = init_mean_field(
            self, in_features, out_features, prior_std, init_std
        )
        log_std = math.log(init_std)
        self.weight_mean = nn.Parameter(weight)
        self.weight_log_std = nn.Parameter(torch.full_like(weight, log_std))
        self.bias_mean = nn.Parameter(bias)
        self.bias_log_std = nn.Parameter(torch.full_like(bias, log_std))

    def forward(self, x: torch.Tensor, sample: bool = True) -> torch.Tensor:
        """Apply the layer with one reparameterized weight draw (or the means).

        Args:
            x: ``(..., in_features)`` inputs.
            sample: draw the weights (True) or use the means, i.e. ``eps = 0`` (False).

        Returns:
            ``(..., out_features)``.
        """
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() == 0 or x.shape[-1] != self.in_features:
            raise ValueError(f"x must have shape (..., {self.in_features}), got {tuple(x.shape)}")
        weight, bias = self.weight_mean, self.bias_mean
        if sample:
            weight = weight + self.weight_log_std.exp() * torch.randn_like(weight)
            bias = bias + self.bias_log_std.exp() * torch.randn_like(bias)
        return F.linear(x, weight, bias)

    def kl_divergence(self) -> torch.Tensor:
        """KL(q(weight, bias) || N(0, prior_std²)) summed over all entries: a scalar tensor."""
        return gaussian_kl(
            self.weight_mean, self.weight_log_std.exp(), self.prior_std
        ) + gaussian_kl(self.bias_mean, self.bias_log_std.exp(), self.prior_std)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"prior_std={self.prior_std}"
        )
