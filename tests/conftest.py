"""Shared fixtures: one torch thread per test (small nets are faster on one thread and
do not fight other processes for the cores), small regression and classification problems."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    # Tiny nets: one thread is faster and keeps the runs deterministic.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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
