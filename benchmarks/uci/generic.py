"""A harness row for any library method that has no hand-tuned setup here.

A method that a folder of ``bnn_pyro/methods/`` declares (its :class:`bnn_pyro.spec.MethodSpec`)
runs in the harness by name (``--methods <name>``) with no edit here: a one-configuration grid
(Adam at 1e-3, batch 32, about 10,000 steps as the VI grid), the protocol's MLP with a learned
Gaussian noise (dropout layers where the spec asks for them), and the method's own Gaussian
predictive. It is a plain baseline, not a tuned one: the hand-written rows
(:mod:`benchmarks.uci.registry`) are what the published tables compare.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from benchmarks.uci.method import Config, DatasetInfo, MethodSpec, Report
from bnn_pyro.likelihoods import Gaussian
from bnn_pyro.nn import mlp
from bnn_pyro.registry import make, method_spec

__all__ = ["generic_grid", "generic_spec", "generic_train"]

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
    spec = method_spec(method)
    torch.manual_seed(seed)  # the initial weights
    net = mlp(x.shape[1], [hidden], 1, dropout=_DROPOUT if spec.dropout_net else 0.0)
    options = {} if spec.own_samples else {"num_samples": num_samples}
    model = make(method, net, Gaussian(scale="learned"), **options).to(x.device)
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
        cost=10.0,
    )
