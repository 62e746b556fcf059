"""Shared fixtures: small regression and classification problems (one torch thread for the
whole session comes from the root conftest.py)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def regression_data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    X = torch.randn(64, 3, generator=g)
    y = X @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.1 * torch.randn(64, 1, generator=g)
    return X, y


@pytest.fixture
def classification_data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    X = torch.randn(60, 2, generator=g)
    y = (X[:, 0] > 0).long() + (X[:, 1] > 1).long()
    return X, y
