"""The six methods behind one small interface, on standardised float64 tensors.

``build`` makes the (unfitted) method object, ``fit`` trains it, ``gaussian`` returns the
regression predictive as a mixture ``locs (S, N, O)``, ``scales`` (broadcastable), and
``probabilities`` the class-probability samples ``(S, N, C)``. ``restore`` loads a
``state_dict`` into a freshly built object. Everything is seeded: the same seed gives the same
numbers, and the caller's global RNG is left alone.
"""

from __future__ import annotations

from typing import Any

import pyro.distributions as dist
import pyro.poutine as poutine
import torch
import torch.nn as nn

from bnn_pyro.bnn import VariationalBNN
from bnn_pyro.likelihoods import Categorical, Gaussian
from bnn_pyro.methods import SWAG, DeepEnsemble, LaplaceApproximation, MCDropout
from bnn_pyro.nn.mlp import mlp
from bnn_pyro.priors import IIDPrior

DTYPE = torch.float64
_VI = ("vi", "lrt")


def _net(p: dict[str, Any], n_in: int, n_out: int, dropout: float = 0.0) -> nn.Module:
    return mlp(n_in, list(p["hidden_sizes"]), n_out, p["activation"], dropout).to(DTYPE)


def _likelihood_name(p: dict[str, Any]) -> str:
    return "regression" if p["task"] == "regression" else "classification"


def build(
    p: dict[str, Any], n_in: int, n_out: int, noise: float | torch.Tensor | None, seed: int
) -> nn.Module:
    """The method object for hyperparameters ``p``; ``n_out`` is O (regression) or C.

    ``noise`` is the fixed noise std in standardised units (``None``: learned or estimated).
    ``seed`` fixes the initial weights.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        method = p["method"]
        if method in _VI:
            if p["task"] == "regression":
                likelihood = Gaussian(scale="learned" if noise is None else float(noise))
            else:
                likelihood = Categorical()
            prior = IIDPrior(dist.Normal(0.0, p["prior_scale"]))
            extra = {"local_reparameterization": True} if method == "lrt" else {}
            return VariationalBNN(_net(p, n_in, n_out), likelihood, prior=prior, **extra)
        task = _likelihood_name(p)
        if method == "dropout":
            rate = p["dropout_rate"]
            net = _net(p, n_in, n_out, rate)
            return MCDropout(net, p["num_samples"], rate, likelihood=task, noise_scale=noise)
        if method == "ensemble":
            return DeepEnsemble(
                lambda: _net(p, n_in, n_out), p["ensemble_size"], likelihood=task, noise_scale=noise
            )
        if method == "swag":
            return SWAG(_net(p, n_in, n_out), p["num_samples"], likelihood=task, noise_scale=noise)
        return LaplaceApproximation(
            _net(p, n_in, n_out),
            task,
            prior_precision=p["prior_scale"] ** -2,
            num_samples=p["num_samples"],
            hessian="ggn",
            predictive="glm",
            noise_scale=noise,
        )


def fit(
    module: nn.Module,
    p: dict[str, Any],
    X: torch.Tensor,
    y: torch.Tensor,
    seed: int,
    progress: bool,
) -> None:
    """Train ``module`` on standardised ``X (N, D)`` and ``y`` (``(N, O)`` or labels ``(N,)``)."""
    n = X.shape[0]
    batch_size = min(p["batch_size"] or n, n)
    if p["method"] in _VI:
        module.fit(
            X,
            y,
            epochs=p["epochs"],
            batch_size=batch_size,
            lr=p["lr"],
            elbo="meanfield",
            progress=progress,
            seed=seed,
        )
        return
    # MAP training: the L2 penalty of the prior N(0, prior_scale^2) on the mean loss
    module.fit(
        X,
        y,
        epochs=p["epochs"],
        batch_size=batch_size,
        lr=p["lr"],
        weight_decay=1.0 / (p["prior_scale"] ** 2 * n),
        progress=progress,
        seed=seed,
    )


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def gaussian(
    module: nn.Module, p: dict[str, Any], X: torch.Tensor, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Regression predictive mixture: ``locs (S, N, O)`` and noise ``scales`` (broadcastable)."""
    if p["method"] in _VI:
        return module.predictive_gaussian(X, num_samples=p["num_samples"], seed=seed)
    return module.predictive_gaussian(X, generator=_generator(seed))


def probabilities(module: nn.Module, p: dict[str, Any], X: torch.Tensor, seed: int) -> torch.Tensor:
    """Class-probability samples ``(S, N, C)``."""
    if p["method"] in _VI:
        return module.predict(X, return_samples=True, num_samples=p["num_samples"], seed=seed)[2]
    return module.predict(X, return_samples=True, generator=_generator(seed))[2]


def state(module: nn.Module) -> dict[str, Any]:
    """The tensors (and plain settings) that :func:`restore` needs, on the CPU."""
    return {
        k: v.detach().cpu() if isinstance(v, torch.Tensor) else v
        for k, v in module.state_dict().items()
    }


def restore(module: nn.Module, p: dict[str, Any], saved: dict[str, Any], n_train: int) -> None:
    """Load ``saved`` (from :func:`state`) into ``module``, freshly made by :func:`build`."""
    if p["method"] in _VI:
        n_in = module.net[0].in_features
        x = torch.zeros(1, n_in, dtype=DTYPE)
        with torch.no_grad():  # the guide creates its parameters on its first call
            trace = poutine.trace(module.model).get_trace(x)
            module.guide(x, trace.nodes[module.likelihood.name]["value"])
        module.input_shape = (n_in,)
        module.dataset_size = n_train
    module.load_state_dict(saved)
