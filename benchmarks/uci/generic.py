"""A harness row for any library method that has no hand-tuned setup here.

A method that a folder of ``bnn_pyro/methods/`` declares (its :class:`bnn_pyro.spec.MethodSpec`)
runs in the harness by name (``--methods <name>``) with no edit here: a one-configuration grid
(Adam at 1e-3, batch 32, about 10,000 steps as the VI grid), the protocol's MLP with a learned
Gaussian noise (dropout layers where the spec asks for them), and the method's own Gaussian
predictive. It is a plain baseline, not a tuned one: the hand-written rows
(:mod:`benchmarks.uci.registry`) are what the published tables compare. A method that trains
stacked (:func:`bnn_pyro.stacking.trains_stacked`) trains a data set's splits as one
(:func:`generic_train_stacked`, which :mod:`benchmarks.uci.bundle` runs): each split's record
is its one-by-one record up to float rounding.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from benchmarks.uci.method import Config, DatasetInfo, MethodSpec, Report
from bnn_pyro.likelihoods import Gaussian
from bnn_pyro.nn import mlp
from bnn_pyro.registry import make, method_class, method_spec
from bnn_pyro.stacking import fit_stacked, trains_stacked

__all__ = [
    "generic_grid",
    "generic_model",
    "generic_spec",
    "generic_train",
    "generic_train_stacked",
]

_STEPS = 10_000  # as the VI grid: about this many minibatch steps per configuration
_DROPOUT = 0.05  # where the method needs dropout layers in the net


def generic_grid(info: DatasetInfo, quick: bool = False) -> list[Config]:
    """One configuration: Adam at 1e-3, batch 32, about 10,000 steps (40 to 2,000 epochs).

    Example:
        >>> generic_grid(DatasetInfo("toy", 455, 13))
        [{'epochs': 800, 'lr': 0.001, 'batch_size': 32}]
        >>> generic_grid(DatasetInfo("toy", 455, 13), quick=True)[0]["epochs"]
        2
    """
    batch = 32
    steps_per_epoch = max(1, math.ceil(info.n_train * 0.8 / batch))
    epochs = 2 if quick else int(min(2000, max(40, round(_STEPS / steps_per_epoch, -2))))
    return [{"epochs": epochs, "lr": 1e-3, "batch_size": batch}]


def generic_train(
    config: Mapping[str, Any],
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    y_std: float,
    hidden: int,
    seed: int,
    checkpoints: Sequence[int],
    report: Report,
    num_samples: int,
    method: str,
) -> None:
    """Train ``make(method, mlp, Gaussian("learned"))`` for the configuration's epochs and
    report its Gaussian predictive once, at the end.

    Example:
        >>> x, y = torch.randn(40, 3), torch.randn(40, 1)
        >>> out = []
        >>> generic_train({"epochs": 2, "lr": 1e-3, "batch_size": 16}, x, y, y_std=1.0,
        ...               hidden=8, seed=0, checkpoints=[2], num_samples=4, method="swag",
        ...               report=lambda e, p: out.append(p(x)[0].shape))
        >>> out
        [torch.Size([4, 40, 1])]
    """
    model = _model(method, x, hidden, seed, num_samples)
    epochs = max(checkpoints)
    model.fit(
        x,
        y,
        epochs=epochs,
        batch_size=int(config["batch_size"]),
        lr=float(config["lr"]),
        progress=False,
        seed=seed,
    )
    report(epochs, lambda rows: model.predictive_gaussian(rows, seed=seed))


def generic_model(method: str, features: int, hidden: int, seed: int, **options: Any) -> Any:
    """``make(method, mlp(features, [hidden], 1), Gaussian("learned"), **options)``, its initial
    weights drawn under ``seed``, the net with the protocol's dropout where the method needs one.

    Example:
        >>> generic_model("vbll", 3, 8, 0, prior_scale=0.1).prior_scale
        0.1
    """
    spec = method_spec(method)
    torch.manual_seed(seed)  # the initial weights
    net = mlp(features, [hidden], 1, dropout=_DROPOUT if spec.dropout_net else 0.0)
    return make(method, net, Gaussian(scale="learned"), **options)


def _model(method: str, x: torch.Tensor, hidden: int, seed: int, num_samples: int) -> Any:
    """:func:`generic_model` on ``x``'s device, with ``num_samples`` where the method takes it."""
    options = {} if method_spec(method).own_samples else {"num_samples": num_samples}
    return generic_model(method, x.shape[-1], hidden, seed, **options).to(x.device)


def generic_train_stacked(
    config: Mapping[str, Any],
    xs: torch.Tensor,
    ys: torch.Tensor,
    *,
    y_stds: Sequence[float],
    hidden: int,
    seeds: Sequence[int],
    checkpoints: Sequence[int],
    reports: Sequence[Report],
    num_samples: int,
    method: str,
) -> None:
    """:func:`generic_train` on ``xs[k]``, ``ys[k]`` with ``seeds[k]`` for every split k at once
    (:func:`bnn_pyro.fit_stacked`): member ``k`` is built and trained as its own run would be.

    Args:
        config: a :func:`generic_grid` configuration.
        xs: ``(K, N, D)``; ys: ``(K, N, 1)`` normalised rows of each split.
        y_stds, seeds, reports: one per split.
        hidden, checkpoints, num_samples, method: as :func:`generic_train`.

    Example:
        >>> seen = []
        >>> generic_train_stacked({"epochs": 2, "lr": 1e-3, "batch_size": 16},
        ...     torch.randn(2, 40, 3), torch.randn(2, 40, 1), y_stds=[1.0, 2.0], hidden=8,
        ...     seeds=[0, 1], checkpoints=[2], num_samples=4, method="vbll",
        ...     reports=[lambda e, p, k=k: seen.append((k, e, p(torch.randn(5, 3))[0].shape))
        ...              for k in range(2)])
        >>> seen  # VBLL's predictive is one Gaussian in closed form
        [(0, 2, torch.Size([1, 5, 1])), (1, 2, torch.Size([1, 5, 1]))]
    """
    models = [_model(method, xs, hidden, seed, num_samples) for seed in seeds]
    epochs = max(checkpoints)
    fit_stacked(
        models,
        xs,
        ys,
        seeds=list(seeds),
        epochs=epochs,
        batch_size=int(config["batch_size"]),
        lr=float(config["lr"]),
        progress=False,
    )
    for model, seed, report in zip(models, seeds, reports, strict=True):
        report(epochs, lambda rows, m=model, s=seed: m.predictive_gaussian(rows, seed=s))


def generic_spec(method: str) -> MethodSpec:
    """The harness row of library method ``method`` (see the module docstring).

    Example:
        >>> generic_spec("hidden_layer").label
        'hidden_layer (untuned)'
    """
    library = method_spec(method)
    return MethodSpec(
        name=method,
        label=f"{method} (untuned)",
        description=f"{library.summary}: Adam 1e-3, batch 32, learned noise, no search",
        grid=generic_grid,
        train=lambda *args, **kwargs: generic_train(*args, **kwargs, method=method),
        train_stacked=(
            (lambda *args, **kwargs: generic_train_stacked(*args, **kwargs, method=method))
            if trains_stacked(method_class(method))
            else None
        ),
        cost=10.0,
    )
