"""Small nets shared by the method tests (``from tests.methods.methods_helpers import ...``)."""

import torch
import torch.nn as nn


def relu_mlp(d_in: int = 1, d_out: int = 1, hidden: int = 50, dropout: float = 0.0) -> nn.Module:
    """``d_in -> hidden -> hidden -> d_out`` ReLU MLP, with dropout after each hidden layer."""
    layers: list[nn.Module] = []
    for a, b in [(d_in, hidden), (hidden, hidden)]:
        layers += [nn.Linear(a, b), nn.ReLU()]
        if dropout:
            layers.append(nn.Dropout(dropout))
    layers.append(nn.Linear(hidden, d_out))
    return nn.Sequential(*layers)


def trained(method, *args, **kwargs):
    """``method.fit(*args, **kwargs)`` (which returns the History), then the method itself."""
    method.fit(*args, **kwargs)
    return method


def deterministic(vb):
    """A ``VariationalBayesNN`` with posterior std ~ 1e-30: the sampled net equals the mean
    net, the KL stays finite."""
    with torch.no_grad():
        for layer in vb.layers:
            layer.weight_rho.fill_(-70.0)
            layer.bias_rho.fill_(-70.0)
    return vb
