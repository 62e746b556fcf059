"""Fixtures shared by the benchmark tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


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
