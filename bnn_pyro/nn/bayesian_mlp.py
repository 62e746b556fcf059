"""``BayesianMLP``, a stack of Bayes-by-Backprop layers, and its builders ``bayesian_dense``
and ``build`` (the functional API).

``build(...)`` returns a :class:`BayesianMLP`: a stack of
:class:`~bnn_pyro.nn.gaussian_linear.GaussianLinear` layers (``W = mu + softplus(rho) * eps``)
with an activation between them. ``forward(x, sample=False)`` is the deterministic inference:
the mean weights, i.e. epsilon set to zero. ``kl_cost()`` is the summed KL to the
prior, ready for :func:`bnn_pyro.losses.elbo_loss`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn as nn

from bnn_pyro._checks import check_float, check_int
from bnn_pyro.nn.gaussian_linear import GaussianLinear
from bnn_pyro.nn.mlp import ACTIVATIONS

__all__ = ["BayesianMLP", "bayesian_dense", "build"]


def bayesian_dense(
    in_features: int, units: int, prior_sigma: float = 1.0, name: str = "bayesian_dense"
) -> GaussianLinear:
    """A Bayesian dense layer ``[batch, in_features] -> [batch, units]``.

    Args:
        in_features: input size.
        units: number of output units.
        prior_sigma: standard deviation of the zero-mean Gaussian weight prior (> 0).
        name: a label kept on the module as ``.name`` (Axon's parameter prefix).

    Returns:
        A :class:`GaussianLinear`; call it as ``layer(x, sample=True|False)``.

    Example:
        >>> layer = bayesian_dense(8, 4, name="hidden_0")
        >>> layer(torch.randn(2, 8)).shape, layer.name
        (torch.Size([2, 4]), 'hidden_0')
    """
    check_int("in_features", in_features)
    check_int("units", units)
    check_float("prior_sigma", prior_sigma, minimum=0.0, strict=True)
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str, got {name!r}")
    layer = GaussianLinear(in_features, units, prior_std=prior_sigma)
    layer.name = name
    return layer


class BayesianMLP(nn.Module):
    """A multilayer perceptron of :class:`GaussianLinear` layers.

    Args:
        input_size: input size ``D``.
        hidden_sizes: sizes of the hidden layers (may be empty).
        output_size: output size ``O``.
        activation: a name in :data:`bnn_pyro.nn.mlp.ACTIVATIONS` or a callable on tensors.
        prior_sigma: standard deviation of the weight prior (> 0).

    Shapes:
        ``x: (N, D)`` -> ``(N, O)``; with ``num_samples=S`` -> ``(S, N, O)``.

    Example:
        >>> net = BayesianMLP(3, [8], 2)
        >>> net(torch.randn(5, 3), num_samples=4).shape
        torch.Size([4, 5, 2])
    """

    def __init__(
        self,
        input_size: int,
        hidden_sizes: Sequence[int],
        output_size: int,
        activation: str | Callable[[torch.Tensor], torch.Tensor] = "relu",
        prior_sigma: float = 1.0,
    ) -> None:
        super().__init__()
        check_int("input_size", input_size)
        check_int("output_size", output_size)
        if isinstance(hidden_sizes, (str, bytes)) or not isinstance(hidden_sizes, Sequence):
            raise TypeError(
                f"hidden_sizes must be a sequence of ints, got {type(hidden_sizes).__name__}"
            )
        for i, size in enumerate(hidden_sizes):
            check_int(f"hidden_sizes[{i}]", size)
        if isinstance(activation, str):
            if activation not in ACTIVATIONS:
                raise ValueError(
                    f"activation must be one of {sorted(ACTIVATIONS)} or a callable, "
                    f"got {activation!r}"
                )
            self.activation = ACTIVATIONS[activation]()
        elif callable(activation):
            self.activation = activation
        else:
            raise TypeError(
                f"activation must be a str or a callable, got {type(activation).__name__}"
            )
        check_float("prior_sigma", prior_sigma, minimum=0.0, strict=True)
        sizes = [input_size, *hidden_sizes, output_size]
        self.layers = nn.ModuleList(
            bayesian_dense(i, o, prior_sigma, name=f"bayesian_dense_{k}")
            for k, (i, o) in enumerate(zip(sizes[:-1], sizes[1:], strict=True))
        )

    def forward(
        self, x: torch.Tensor, sample: bool = True, num_samples: int | None = None
    ) -> torch.Tensor:
        """Forward pass with sampled weights (``sample=True``) or the mean weights (False).

        Args:
            x: ``(N, D)`` inputs.
            sample: draw weights; False is deterministic inference with epsilon = 0.
            num_samples: if given, ``S`` weight draws at once, output ``(S, N, O)``.

        Returns:
            ``(N, O)`` or ``(S, N, O)``.
        """
        for i, layer in enumerate(self.layers):
            x = layer(x, sample=sample, num_samples=num_samples)
            if i < len(self.layers) - 1:
                x = self.activation(x)
        return x

    def kl_cost(self) -> torch.Tensor:
        """Summed KL between the weight posterior and the prior over all layers (scalar)."""
        return torch.stack([layer.kl_divergence() for layer in self.layers]).sum()


def build(
    input_size: int,
    hidden_sizes: Sequence[int] = (256, 128),
    *,
    output_size: int,
    activation: str | Callable[[torch.Tensor], torch.Tensor] = "relu",
    prior_sigma: float = 1.0,
) -> BayesianMLP:
    """Build a Bayesian neural network ``[batch, input_size] -> [batch, output_size]``.

    Args:
        input_size: input feature dimension.
        hidden_sizes: hidden layer sizes (default ``(256, 128)``).
        output_size: output dimension (keyword-only, required).
        activation: activation between layers (default ``"relu"``).
        prior_sigma: standard deviation of the weight prior (default 1.0).

    Returns:
        A :class:`BayesianMLP`; ``model(x)`` samples weights, ``model(x, sample=False)`` uses
        the means, ``model.kl_cost()`` is the KL term of the ELBO.

    Example:
        >>> from bnn_pyro.losses import elbo_loss
        >>> model = build(4, (16,), output_size=3)
        >>> x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
        >>> loss = elbo_loss(model(x), y, model.kl_cost(), beta=1 / 8, loss_fn="cross_entropy")
        >>> loss.dim(), model(x, sample=False).shape
        (0, torch.Size([8, 3]))
    """
    return BayesianMLP(input_size, hidden_sizes, output_size, activation, prior_sigma)
