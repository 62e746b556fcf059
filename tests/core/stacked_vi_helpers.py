"""A layer shared by the stacked-VI tests (imported by name: tests/core is on sys.path)."""

import torch
import torch.nn as nn


class Gain(nn.Module):
    """Multiplies by one scalar parameter: under a prior that names its type, a Bayesian site
    of shape ``()`` in a layer the stacked net does not batch."""

    def __init__(self) -> None:
        super().__init__()
        self.g = nn.Parameter(torch.tensor(1.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.g * x
