"""A multilayer perceptron built from sample-dimension-aware layers."""

from __future__ import annotations

from collections.abc import Sequence

import torch.nn as nn

from bnn_pyro.nn.layers import Linear

__all__ = ["mlp", "ACTIVATIONS"]

#: Activation names accepted by :func:`mlp`.
ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
    "elu": nn.ELU,
    "leaky_relu": nn.LeakyReLU,
    "softplus": nn.Softplus,
}


def _check_size(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


def mlp(
    in_features: int,
    hidden_sizes: Sequence[int],
    out_features: int,
    activation: str | type[nn.Module] = "relu",
    dropout: float = 0.0,
) -> nn.Sequential:
    """A fully connected net ``in -> hidden... -> out`` with an activation after each hidden layer.

    Its linear layers are :class:`bnn_pyro.nn.Linear` (``nn.Linear`` that also takes weights with
    leading sample dimensions), so the whole net evaluates ``S`` weight samples in one pass.

    Args:
        in_features: input width ``D``.
        hidden_sizes: widths of the hidden layers; ``[]`` gives a single linear layer (linear or
            logistic regression).
        out_features: output width ``O``.
        activation: a name from :data:`ACTIVATIONS` or an ``nn.Module`` class.
        dropout: probability of an ``nn.Dropout`` after each hidden activation (0 = none), for
            MC dropout.

    Returns:
        ``nn.Sequential`` mapping ``(N, D)`` to ``(N, O)`` (and ``(*S, N, D)`` to ``(*S, N, O)``
        for sampled weights).

    Example:
        >>> net = mlp(13, [50], 1)
        >>> net
        Sequential(
          (0): Linear(in_features=13, out_features=50, bias=True)
          (1): ReLU()
          (2): Linear(in_features=50, out_features=1, bias=True)
        )
    """
    _check_size("in_features", in_features)
    _check_size("out_features", out_features)
    if isinstance(hidden_sizes, (str, bytes)) or not isinstance(hidden_sizes, Sequence):
        raise TypeError(
            f"hidden_sizes must be a sequence of ints, got {type(hidden_sizes).__name__}"
        )
    hidden = [_check_size(f"hidden_sizes[{i}]", h) for i, h in enumerate(hidden_sizes)]
    if isinstance(activation, str):
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        act_cls = ACTIVATIONS[activation]
    elif isinstance(activation, type) and issubclass(activation, nn.Module):
        act_cls = activation
    else:
        raise TypeError(f"activation must be a name or an nn.Module class, got {activation!r}")
    if not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be a float in [0, 1), got {dropout!r}")

    layers: list[nn.Module] = []
    width = in_features
    for h in hidden:
        layers += [Linear(width, h), act_cls()]
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        width = h
    layers.append(Linear(width, out_features))
    return nn.Sequential(*layers)
