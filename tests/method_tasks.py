"""Which tasks a registered method takes: every one regression, those whose spec says so
classification (a regression-only method refuses a classifier; ``test_contract`` checks it)."""

from __future__ import annotations

import bnn_pyro as bp


def takes(name: str, task: str) -> bool:
    """Does the method registered as ``name`` take ``task`` (``"regression"`` or
    ``"classification"``, or an estimator class of either)?"""
    if not isinstance(task, str):
        task = "classification" if task.__name__.endswith("Classifier") else "regression"
    return task == "regression" or bp.registry.method_spec(name).classifies
