"""Tabular BNNs: scikit-learn estimators and the engine under them and under ``bnn-pyro fit``.

:class:`BNNRegressor` and :class:`BNNClassifier` need scikit-learn (imported on first use);
:class:`TabularBNN` does not.

Example:
    >>> from bnn_pyro.estimators import BNNRegressor
    >>> import numpy as np
    >>> X = np.linspace(-2, 2, 50)[:, None]; y = np.sin(X[:, 0])
    >>> reg = BNNRegressor(hidden_sizes=(16,), epochs=30, num_samples=10, random_state=0)
    >>> mean, std = reg.fit(X, y).predict(X, return_std=True)
    >>> mean.shape, std.shape
    ((50,), (50,))
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from bnn_pyro.estimators._params import METHODS
from bnn_pyro.estimators.tabular import TabularBNN

if TYPE_CHECKING:
    from bnn_pyro.estimators.sklearn_api import BNNClassifier, BNNRegressor

__all__ = ["BNNClassifier", "BNNRegressor", "METHODS", "TabularBNN"]


def __getattr__(name: str) -> object:
    if name in ("BNNRegressor", "BNNClassifier"):
        try:
            module = importlib.import_module("bnn_pyro.estimators.sklearn_api")
        except ModuleNotFoundError as err:
            if err.name != "sklearn":
                raise
            raise ImportError(
                f"{name} needs scikit-learn: pip install scikit-learn (or bnn_pyro[dev])"
            ) from None
        return getattr(module, name)
    raise AttributeError(f"module 'bnn_pyro.estimators' has no attribute {name!r}")
