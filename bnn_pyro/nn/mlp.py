"""A multilayer perceptron built from sample-dimension-aware layers."""

from __future__ import annotations

from collections.abc import Sequence

import torch.nn as nn

from bnn_pyro._checks import check_int
from bnn_pyro.nn.layers import Linear

__all__ = ["mlp", "mlp_architecture", "ACTIVATIONS"]

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
    check_int("in_features", in_features)
    check_int("out_features", out_features)
    if isinstance(hidden_sizes, (str, bytes)) or not isinstance(hidden_sizes, Sequence):
        raise TypeError(
            f"hidden_sizes must be a sequence of ints, got {type(hidden_sizes).__name__}"
        )
    hidden = [check_int(f"hidden_sizes[{i}]", h) for i, h in enumerate(hidden_sizes)]
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


def mlp_architecture(net: nn.Module) -> tuple[int, list[int], int, str]:
    """Read ``(in_features, hidden_sizes, out_features, activation)`` off an MLP.

    The net must be an ``nn.Sequential`` of ``nn.Linear`` layers (with bias), each hidden one
    followed by the same activation from :data:`ACTIVATIONS` (dropout modules are skipped), as
    :func:`mlp` builds. Methods that build their own layers (``HiddenLayerBNN``,
    ``VariationalBayesNN``) use it in ``make``.

    Raises:
        ValueError: a net of any other shape, naming the module that does not fit.

    Example:
        >>> mlp_architecture(mlp(13, [50, 20], 1, "tanh", dropout=0.1))
        (13, [50, 20], 1, 'tanh')
    """
    if not isinstance(net, nn.Sequential):
        raise ValueError(
            f"this method reads the widths of an MLP (an nn.Sequential of nn.Linear layers and "
            f"activations, e.g. bnn_pyro.nn.mlp(...)), got a {type(net).__name__}"
        )
    names = {cls: name for name, cls in ACTIVATIONS.items()}
    widths: list[int] = []
    activations: set[str] = set()
    expect_linear = True
    for i, module in enumerate(net):
        if isinstance(module, nn.Dropout):
            continue
        if isinstance(module, nn.Linear) and expect_linear and module.bias is not None:
            if widths and widths[-1] != module.in_features:
                raise ValueError(f"layer {i} takes {module.in_features} inputs, not {widths[-1]}")
            widths += [module.in_features] if not widths else []
            widths.append(module.out_features)
            expect_linear = False
        elif type(module) in names and not expect_linear:
            activations.add(names[type(module)])
            expect_linear = True
        else:
            raise ValueError(
                f"module {i} ({type(module).__name__}) does not fit an MLP of nn.Linear layers "
                f"(with bias) each followed by one activation from {sorted(ACTIVATIONS)}"
            )
    if not widths or expect_linear:
        raise ValueError("the net must end with an nn.Linear layer")
    if len(activations) > 1:
        raise ValueError(f"the hidden layers must share one activation, got {sorted(activations)}")
    return widths[0], widths[1:-1], widths[-1], activations.pop() if activations else "relu"
