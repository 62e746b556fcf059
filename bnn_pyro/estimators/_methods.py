"""Every registry method behind the estimators, on standardised float64 tensors.

``build`` makes the (unfitted) method with :func:`bnn_pyro.make` from a seeded MLP and a
likelihood, and ``fit`` trains it. The rest is the one contract of every method: predictions
with ``predict(x, seed=...)`` / ``predictive_gaussian(x, seed=...)``, saving with the checkpoint
hooks. What differs between methods (their options, their ``fit`` options, their noise) each
method declares in its :class:`~bnn_pyro.spec.MethodSpec`. Everything is seeded: the same seed
gives the same numbers, and the caller's global RNG is left alone.
"""

from __future__ import annotations

from typing import Any

import torch

from bnn_pyro.base import BaseBayesianMethod
from bnn_pyro.likelihoods import Categorical, Gaussian, Likelihood
from bnn_pyro.nn.mlp import mlp
from bnn_pyro.registry import make, method_spec

DTYPE = torch.float64


def scalar_noise(method: str) -> bool:
    """Whether ``method``'s regression noise is its Gaussian likelihood's scale: one float for
    all the target columns (the others take a per-column ``noise_scale``).

    Example:
        >>> scalar_noise("vi"), scalar_noise("dropout")
        (True, False)
    """
    return method_spec(method).scalar_noise


def _likelihood(p: dict[str, Any], noise: float | torch.Tensor | None) -> Likelihood:
    if p["task"] == "classification":
        return Categorical()
    return Gaussian(scale=noise if isinstance(noise, float) else "learned")


def build(
    p: dict[str, Any], n_in: int, n_out: int, noise: float | torch.Tensor | None, seed: int
) -> BaseBayesianMethod:
    """The unfitted method for hyperparameters ``p``; ``n_out`` is O (regression) or C.

    ``noise`` is the fixed noise std in standardised units: a float, a per-column ``(O,)``
    tensor (not for :data:`SCALAR_NOISE`), or ``None`` (learned or estimated). ``seed`` fixes
    the initial weights.
    """
    method = p["method"]
    spec = method_spec(method)
    options = spec.options_for(p)
    if not spec.own_samples:  # an ensemble's samples are its members
        options["num_samples"] = p["num_samples"]
    if isinstance(noise, torch.Tensor):
        options["noise_scale"] = noise
    rate = p["dropout_rate"] if spec.dropout_net else 0.0
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = mlp(n_in, list(p["hidden_sizes"]), n_out, p["activation"], rate).to(DTYPE)
        module = make(method, net, _likelihood(p, noise), **options)
    return module.to(DTYPE)  # the methods that build their own layers make them in float32


def fit(
    module: BaseBayesianMethod,
    p: dict[str, Any],
    X: torch.Tensor,
    y: torch.Tensor,
    seed: int,
    progress: bool,
) -> None:
    """Train ``module`` on standardised ``X (N, D)`` and ``y`` (``(N, O)`` or labels ``(N,)``)."""
    n = X.shape[0]
    module.fit(
        X,
        y,
        epochs=p["epochs"],
        batch_size=min(p["batch_size"] or n, n),
        lr=p["lr"],
        progress=progress,
        seed=seed,
        **method_spec(p["method"]).fit_options_for(p, n),
    )
