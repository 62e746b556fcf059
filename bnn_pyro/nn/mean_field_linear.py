"""``MeanFieldLinear``: the Bayes-by-Backprop linear layer (Blundell et al. 2015).

A factorised Gaussian over the weight matrix and the bias, sampled with the reparameterization
trick, with the closed-form KL to a zero-mean Gaussian prior. One layer, two ways of keeping
the standard deviation positive, each a subclass that names its parameters:

* :class:`~bnn_pyro.nn.GaussianLinear`: ``weight_mu``, ``weight_rho``, std ``softplus(rho)``;
* :class:`~bnn_pyro.nn.BayesianLinear`: ``weight_mean``, ``weight_log_std``, std ``exp``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import torch
import torch.nn as nn
import torch.nn.functional as F

from bnn_pyro._checks import check_float, check_int
from bnn_pyro.losses import gaussian_kl

__all__ = ["MeanFieldLinear", "init_mean_field"]


def init_mean_field(
    layer: nn.Module,
    in_features: int,
    out_features: int,
    prior_std: float,
    init_std: float | None,
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Check a mean-field linear layer's settings, set them on ``layer`` and draw its means.

    The means start at ``nn.Linear``'s uniform init, ``U(-1/sqrt(in), 1/sqrt(in))`` (weight
    first, then bias); the default ``init_std`` is ``0.1 / sqrt(in)``.

    Returns:
        ``weight (out, in)``, ``bias (out,)`` and the checked ``init_std``.

    Example:
        >>> w, b, s = init_mean_field(nn.Module(), 4, 3, 1.0, None)
        >>> w.shape, b.shape, s
        (torch.Size([3, 4]), torch.Size([3]), 0.05)
    """
    check_int("in_features", in_features)
    check_int("out_features", out_features)
    layer.prior_std = check_float("prior_std", prior_std, minimum=0.0, strict=True)
    if init_std is None:
        init_std = 0.1 / math.sqrt(in_features)
    init_std = check_float("init_std", init_std, minimum=0.0, strict=True)
    layer.in_features, layer.out_features = in_features, out_features
    bound = 1.0 / math.sqrt(in_features)
    weight = torch.empty(out_features, in_features).uniform_(-bound, bound)
    return weight, torch.empty(out_features).uniform_(-bound, bound), init_std


class MeanFieldLinear(nn.Module, ABC):
    """Linear layer with Gaussian weights ``W = loc + std * eps`` (Bayes by Backprop).

    The initialisation is deliberate. With ``loc ~ N(0, prior_std²)`` and ``std = prior_std``
    (q equal to the prior), for a layer of width ``D`` the pre-activations would have a
    standard deviation of about ``sqrt(D) * prior_std * |x|``, which saturates or explodes wide
    nets. Here ``loc`` is initialised like ``nn.Linear`` (``U(-1/sqrt(D), 1/sqrt(D))``) and
    ``std = init_std``, by default ``0.1 / sqrt(D)``: the net starts as a well-scaled
    deterministic net with a little noise, and the KL term then pulls the scales towards the
    prior as far as the data allow. Train with ``task_loss + kl_divergence() / N`` (``N`` the
    data set size, for a task loss that is a mean over the batch).

    A subclass keeps the four parameters (:meth:`init_parameters`) and gives the Gaussian's
    ``(loc, std)`` of the weight and the bias (:meth:`weight_posterior`,
    :meth:`bias_posterior`).

    Args:
        in_features: input size ``D``.
        out_features: output size ``O``.
        prior_std: standard deviation of the zero-mean Gaussian prior (> 0).
        init_std: initial posterior standard deviation (> 0); default ``0.1 / sqrt(D)``.

    Shapes:
        ``x: (..., D)`` -> ``(..., O)``; with ``num_samples=S``: ``x: (N, D)`` or ``(S, N, D)``
        -> ``(S, N, O)``, one independent weight draw per leading index.

    Example:
        >>> from bnn_pyro.nn import BayesianLinear, GaussianLinear
        >>> layers = [GaussianLinear(4, 3, init_std=0.2), BayesianLinear(4, 3, init_std=0.2)]
        >>> [round(float(layer.weight_posterior()[1][0, 0].detach()), 4) for layer in layers]
        [0.2, 0.2]
        >>> [layer(torch.randn(6, 4), num_samples=2).shape for layer in layers]
        [torch.Size([2, 6, 3]), torch.Size([2, 6, 3])]
    """

    in_features: int
    out_features: int
    prior_std: float

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
        self.init_parameters(weight, bias, init_std)

    @abstractmethod
    def init_parameters(self, weight: torch.Tensor, bias: torch.Tensor, init_std: float) -> None:
        """Register the parameters: locs ``weight (O, D)``, ``bias (O,)``; every std
        ``init_std``."""

    @abstractmethod
    def weight_posterior(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The weight's ``(loc, std)``, each ``(O, D)``."""

    @abstractmethod
    def bias_posterior(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The bias's ``(loc, std)``, each ``(O,)``."""

    def forward(
        self, x: torch.Tensor, sample: bool = True, num_samples: int | None = None
    ) -> torch.Tensor:
        """Apply the layer.

        Args:
            x: ``(..., in_features)``; with ``num_samples=S``, ``(N, in)`` or ``(S, N, in)``.
            sample: draw weights (True) or use the means, ``eps = 0`` (False, deterministic).
            num_samples: if given, draw ``S`` independent weight sets at once and return
                ``(S, N, out_features)`` (vectorized Monte Carlo).

        Returns:
            ``(..., out_features)`` or ``(S, N, out_features)``.
        """
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() == 0 or x.shape[-1] != self.in_features:
            raise ValueError(f"x must have shape (..., {self.in_features}), got {tuple(x.shape)}")
        (weight, weight_std), (bias, bias_std) = self.weight_posterior(), self.bias_posterior()
        if num_samples is None:
            if sample:
                weight = weight + weight_std * torch.randn_like(weight)
                bias = bias + bias_std * torch.randn_like(bias)
            return F.linear(x, weight, bias)
        check_int("num_samples", num_samples)
        if not (x.dim() == 2 or (x.dim() == 3 and x.shape[0] == num_samples)):
            raise ValueError(
                f"x must have shape (N, {self.in_features}) or ({num_samples}, N, "
                f"{self.in_features}) when num_samples={num_samples}, got {tuple(x.shape)}"
            )
        shape_w = (num_samples, self.out_features, self.in_features)
        weight = weight.expand(shape_w)
        bias = bias.expand(num_samples, self.out_features)
        if sample:
            weight = weight + weight_std * torch.randn(
                shape_w, dtype=weight.dtype, device=weight.device
            )
            bias = bias + bias_std * torch.randn(bias.shape, dtype=bias.dtype, device=bias.device)
        # (N, D) or (S, N, D) @ (S, D, O) -> (S, N, O): matmul, never F.linear on 3-D weights.
        return torch.matmul(x, weight.transpose(-1, -2)) + bias.unsqueeze(-2)

    def kl_divergence(self) -> torch.Tensor:
        """KL(q(weight, bias) || N(0, prior_std²)) summed over all entries: a scalar tensor."""
        return gaussian_kl(*self.weight_posterior(), self.prior_std) + gaussian_kl(
            *self.bias_posterior(), self.prior_std
        )

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"prior_std={self.prior_std}"
        )
