"""Shared fixtures: small regression and classification problems (one torch thread for the
whole session comes from the root conftest.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

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


#: benchmarks/, for the fixtures that load its scripts
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def ood():
    """benchmarks/ood.py as a module (it imports ``_report``, ``ood_data`` and ``ood_report``
    from its own folder; its dataclasses need it in ``sys.modules`` while it loads)."""
    spec = importlib.util.spec_from_file_location("ood_benchmark", BENCHMARKS / "ood.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(BENCHMARKS))
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    yield module
    for name in (spec.name, "ood_data", "ood_report"):
        sys.modules.pop(name, None)
