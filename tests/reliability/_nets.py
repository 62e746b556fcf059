"""The tiny nets and data of the nets-and-shapes reliability tests."""

from __future__ import annotations

import torch
import torch.nn as nn

import bnn_pyro as bp

D = 3  # input width of every net here
LIK = bp.Gaussian(scale=0.1)


def mlp(dropout: float = 0.0) -> nn.Sequential:
    layers = [nn.Linear(D, 8), nn.ReLU()]
    if dropout:
        layers.append(nn.Dropout(dropout))
    return nn.Sequential(*layers, nn.Linear(8, 1))


def data(n: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, D, generator=g)
    return x, x.sum(-1)


_mlp, _data = mlp, data  # the names the tests use
