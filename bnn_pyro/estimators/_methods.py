"""Every registry method behind the estimators, on standardised float64 tensors.

``build`` makes the (unfitted) method with :func:`bnn_pyro.make` from a seeded MLP and a
likelihood, and ``fit`` trains it. The rest is the one contract of every method: predictions
with ``predict(x, seed=...)`` / ``predictive_gaussian(x, seed=...)``, saving with the checkpoint
hooks. Everything is seeded: the same seed gives the same numbers, and the caller's global RNG
is left alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyro.distributions as dist
import torch

from bnn_pyro.base import BaseBayesianMethod
from bnn_pyro.likelihoods import Categorical, Gaussian, Likelihood
from bnn_pyro.nn.mlp import mlp
from bnn_pyro.priors import IIDPrior
from bnn_pyro.registry import make

DTYPE = torch.float64

#: The methods whose regression noise is their Gaussian likelihood's scale: one float for all
#: the target columns (the others take a per-column ``noise_scale``).
SCALAR_NOISE = ("vi", "lrt", "bb_alpha", "hidden_layer")

_Options = Callable[[dict[str, Any]], dict[str, Any]]


def _normal_prior(p: dict[str, Any]) -> dict[str, Any]:
    return {"prior": IIDPrior(dist.Normal(0.0, p["prior_scale"]))}


#: Constructor options beyond ``num_samples``: the prior ``N(0, prior_scale²)`` where the method
#: has one, and the method's own settings (none for a method a user registered).
_OPTIONS: dict[str, _Options] = {
    "vi": _normal_prior,
    "lrt": _normal_prior,
    "bb_alpha": _normal_prior,
    "hidden_layer": lambda p: {"prior_scale": p["prior_scale"]},
    "vbnn": lambda p: {"prior_std": p["prior_scale"]},
    "dropout": lambda p: {"dropout_rate": p["dropout_rate"]},
    "ensemble": lambda p: {"num_models": p["ensemble_size"]},
    "laplace": lambda p: {
        "prior_precision": p["prior_scale"] ** -2,
        "hessian": "ggn",
        "predictive": "glm",
    },
}


def _meanfield(p: dict[str, Any], n: int) -> dict[str, Any]:
    return {"elbo": "meanfield"}  # the closed-form KL of the Normal prior


def _map(p: dict[str, Any], n: int) -> dict[str, Any]:
    # trained to a point estimate: the L2 penalty of the prior N(0, prior_scale²) on the mean loss
    return {"weight_decay": 1.0 / (p["prior_scale"] ** 2 * n)}


#: ``fit`` options beyond the shared ones, from the hyperparameters and the training set size.
_FIT: dict[str, Callable[[dict[str, Any], int], dict[str, Any]]] = {
    "vi": _meanfield,
    "lrt": _meanfield,
    "dropout": _map,
    "ensemble": _map,
    "swag": _map,
    "laplace": _map,
}


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
    options = _OPTIONS.get(method, lambda p: {})(p)
    if method != "ensemble":  # an ensemble's samples are its members
        options["num_samples"] = p["num_samples"]
    if isinstance(noise, torch.Tensor):
        options["noise_scale"] = noise
    rate = p["dropout_rate"] if method == "dropout" else 0.0
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
        **_FIT.get(p["method"], lambda p, n: {})(p, n),
    )
