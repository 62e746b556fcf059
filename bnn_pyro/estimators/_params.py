"""Checks of the estimator hyperparameters: one clear error per argument, raised before any work."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from bnn_pyro import registry
from bnn_pyro._checks import check_choice, check_float, check_int
from bnn_pyro.nn.mlp import ACTIVATIONS

#: The values of ``method``: the names in the method registry (:data:`bnn_pyro.METHODS`) when
#: the estimators are imported (a method registered later is taken too). Every built-in method
#: takes the estimators' MLP: variational inference (weight or local reparameterization,
#: ``"hidden_layer"``'s HiddenLayer sites, the pure-torch ``"vbnn"``), MC dropout, deep
#: ensembles, SWAG and the Laplace approximation; each method's options come from its
#: :class:`~bnn_pyro.spec.MethodSpec`.
METHODS = tuple(registry.METHODS)
TASKS = ("regression", "classification")


def hidden_sizes(value: Any) -> tuple[int, ...]:
    """``(50,)``, ``[50, 50]`` or ``50`` as a tuple of positive ints (``()``: no hidden layer).

    Example:
        >>> hidden_sizes([64, 32]), hidden_sizes(50)
        ((64, 32), (50,))
    """
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = (value,)
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)):
        raise TypeError(
            f"hidden_sizes must be a tuple of ints such as (50,) or (50, 50), got "
            f"{type(value).__name__} ({value!r})"
        )
    return tuple(check_int(f"hidden_sizes[{i}]", h) for i, h in enumerate(value))


def check_hyperparameters(**params: Any) -> dict[str, Any]:
    """Validate and normalise the hyperparameters of :class:`~bnn_pyro.estimators.TabularBNN`.

    Returns:
        The same keys with normalised values (``hidden_sizes`` a tuple, numbers as Python
        ``int``/``float``, ``batch_size`` an int or ``None``).

    Raises:
        TypeError, ValueError: naming the first bad argument, its expected and received value.

    Example:
        >>> p = dict(task="regression", method="vi", hidden_sizes=[8], activation="tanh",
        ...          epochs=5, batch_size=None, lr=0.01, num_samples=10, prior_scale=1,
        ...          noise="learned", standardize=True, dropout_rate=0.1, ensemble_size=5)
        >>> check_hyperparameters(**p)["hidden_sizes"]
        (8,)
        >>> check_hyperparameters(**dict(p, epochs=0))
        Traceback (most recent call last):
          ...
        ValueError: epochs must be an int >= 1, got 0
    """
    p = dict(params)
    p["task"] = check_choice("task", p["task"], TASKS)
    p["method"] = check_choice("method", p["method"], tuple(registry.METHODS))
    if p["task"] == "classification" and not registry.method_spec(p["method"]).classifies:
        takes = [n for n in registry.METHODS if registry.method_spec(n).classifies]
        raise ValueError(
            f"method={p['method']!r} is a regression method; a classifier takes one of "
            f"{', '.join(takes)}"
        )
    p["hidden_sizes"] = hidden_sizes(p["hidden_sizes"])
    if not isinstance(p["activation"], str) or p["activation"] not in ACTIVATIONS:
        raise ValueError(
            f"activation must be one of {sorted(ACTIVATIONS)}, got {p['activation']!r}"
        )
    p["epochs"] = check_int("epochs", p["epochs"])
    if p["batch_size"] is not None:
        p["batch_size"] = check_int("batch_size", p["batch_size"])
    if p["lr"] is None:
        if not registry.method_spec(p["method"]).measured_step:
            measured = [n for n in registry.METHODS if registry.method_spec(n).measured_step]
            raise ValueError(
                f"lr=None (a step measured on the posterior) is for {', '.join(measured)}; "
                f"method={p['method']!r} needs an lr > 0"
            )
    else:
        p["lr"] = check_float("lr", p["lr"], minimum=0.0, strict=True)
    p["num_samples"] = check_int("num_samples", p["num_samples"])
    p["prior_scale"] = check_float("prior_scale", p["prior_scale"], minimum=0.0, strict=True)
    if p["noise"] != "learned":
        if isinstance(p["noise"], str):
            raise ValueError(f"noise must be 'learned' or a float > 0, got {p['noise']!r}")
        p["noise"] = check_float("noise", p["noise"], minimum=0.0, strict=True)
    if not isinstance(p["standardize"], (bool, np.bool_)):
        raise TypeError(f"standardize must be a bool, got {type(p['standardize']).__name__}")
    p["standardize"] = bool(p["standardize"])
    p["dropout_rate"] = check_float(
        "dropout_rate", p["dropout_rate"], minimum=0.0, strict=True, maximum=1.0
    )
    p["ensemble_size"] = check_int("ensemble_size", p["ensemble_size"])
    if registry.method_spec(p["method"]).dropout_net and not p["hidden_sizes"]:
        raise ValueError(
            f"method={p['method']!r} needs at least one hidden layer, got hidden_sizes=()"
        )
    return p
