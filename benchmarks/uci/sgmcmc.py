"""The ``sghmc`` and ``csghmc`` rows: scale-adapted SGHMC and its cyclical variant on the
protocol's MLP, a learned Gaussian noise, the posterior predictive of the kept samples.

The grid (chosen on validation rows, as every row) is the step size ``lr`` (0.02 and 0.01;
the sampler's default 0.05 diverged on energy with the ``N(0, 1)`` prior: one chain of the 20
splits' search runs left the finite numbers) and the weight prior: the library's default
``N(0, 1)`` on every weight, or Neal's fan-in prior (``LayerwiseNormalPrior("radford")``: sd
``1/sqrt(fan in)``), under which a 50-unit layer's output keeps the scale of its inputs. Every
run takes about 10,000 steps of 32 rows (as the VI grid), a quarter of them burn-in, and keeps
up to 1,000 samples spread over the rest; temperature 1 (the posterior, nothing tempered). A
chain's samples exist only at the end of its run, so each configuration is scored once, at
its end.

The K splits of a data set run as K stacked chains (:func:`bnn_pyro.fit_stacked`, see
:mod:`bnn_pyro.methods.sgmcmc.stacked`), each as its own ``fit`` would run it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pyro.distributions as dist
import torch

from benchmarks.uci.baselines import prediction_seed
from benchmarks.uci.method import Config, DatasetInfo, Report
from bnn_pyro import fit_stacked, make
from bnn_pyro.likelihoods import Gaussian
from bnn_pyro.methods.sgmcmc import SGMCMC
from bnn_pyro.nn import mlp
from bnn_pyro.priors import IIDPrior, LayerwiseNormalPrior, Prior

__all__ = ["PRIORS", "sgmcmc_grid", "sgmcmc_model", "sgmcmc_train", "sgmcmc_train_stacked"]

_STEPS = 10_000  # minibatch steps per run, as the VI grid
_BATCH = 32

#: The grid's weight priors, by the name its configurations carry.
PRIORS = {
    "normal": lambda: IIDPrior(dist.Normal(0.0, 1.0)),
    "fan_in": lambda: LayerwiseNormalPrior("radford"),
}


def sgmcmc_grid(info: DatasetInfo, quick: bool = False) -> list[Config]:
    """``lr`` in {0.02, 0.01} × the prior in :data:`PRIORS`, about 10,000 steps of 32 rows.

    Example:
        >>> grid = sgmcmc_grid(DatasetInfo("toy", 455, 13))
        >>> len(grid), grid[0]
        (4, {'epochs': 800, 'lr': 0.02, 'batch_size': 32, 'prior': 'normal'})
        >>> sgmcmc_grid(DatasetInfo("toy", 455, 13), quick=True)[0]["epochs"]
        4
    """
    steps_per_epoch = max(1, math.ceil(info.n_train * 0.8 / _BATCH))
    epochs = 4 if quick else int(min(4000, max(40, round(_STEPS / steps_per_epoch, -2))))
    if quick:
        return [{"epochs": epochs, "lr": 0.05, "batch_size": _BATCH, "prior": "fan_in"}]
    return [
        {"epochs": epochs, "lr": lr, "batch_size": _BATCH, "prior": prior}
        for lr in (0.02, 0.01)
        for prior in PRIORS
    ]


def sgmcmc_model(
    config: Mapping[str, Any], method: str, inputs: int, hidden: int, seed: int, num_samples: int
) -> SGMCMC:
    """``make(method, mlp(inputs, [hidden], 1), Gaussian("learned"), prior=...)``, its initial
    weights drawn under ``seed``.

    Example:
        >>> m = sgmcmc_model({"prior": "fan_in"}, "csghmc", 3, 8, 0, 10)
        >>> m.schedule, type(m.prior).__name__
        ('cyclical', 'LayerwiseNormalPrior')
    """
    if config["prior"] not in PRIORS:
        raise ValueError(f"prior must be one of {list(PRIORS)}, got {config['prior']!r}")
    prior: Prior = PRIORS[config["prior"]]()
    torch.manual_seed(seed)  # the initial weights
    net = mlp(inputs, [hidden], 1)
    return make(method, net, Gaussian(scale="learned"), prior=prior, num_samples=num_samples)


def _report(model: SGMCMC, seed: int, epochs: int, report: Report) -> None:
    report(epochs, lambda rows: model.predictive_gaussian(rows, seed=prediction_seed(seed)))


def sgmcmc_train(
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
    """Run one chain of ``method`` (``"sghmc"`` or ``"csghmc"``) for the configuration's epochs
    and report its predictive once, at the end (``y_std``: unused, the noise is learned).

    Example:
        >>> x, y = torch.randn(40, 3), torch.randn(40, 1)
        >>> out = []
        >>> config = sgmcmc_grid(DatasetInfo("toy", 40, 3), quick=True)[0]
        >>> sgmcmc_train(config, x, y, y_std=1.0, hidden=8, seed=0, checkpoints=[4],
        ...              num_samples=5, method="sghmc",
        ...              report=lambda e, p: out.append((e, p(x)[0].shape)))
        >>> out
        [(4, torch.Size([5, 40, 1]))]
    """
    model = sgmcmc_model(config, method, x.shape[1], hidden, seed, num_samples).to(x.device)
    epochs = max(checkpoints)
    model.fit(x, y, epochs=epochs, batch_size=int(config["batch_size"]), lr=float(config["lr"]),
              progress=False, seed=seed)  # fmt: skip
    _report(model, seed, epochs, report)


def sgmcmc_train_stacked(
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
    """:func:`sgmcmc_train` on ``xs[k]``, ``ys[k]`` (``(K, N, D)``, ``(K, N, 1)``) with
    ``seeds[k]`` for every split k at once: K stacked chains, each its own run.

    Example:
        >>> config = sgmcmc_grid(DatasetInfo("toy", 40, 3), quick=True)[0]
        >>> seen = []
        >>> sgmcmc_train_stacked(config, torch.randn(2, 40, 3), torch.randn(2, 40, 1),
        ...     y_stds=[1.0, 2.0], hidden=8, seeds=[0, 1], checkpoints=[4], num_samples=5,
        ...     method="sghmc", reports=[lambda e, p, k=k: seen.append((k, e)) for k in range(2)])
        >>> seen
        [(0, 4), (1, 4)]
    """
    models = [
        sgmcmc_model(config, method, xs.shape[-1], hidden, seed, num_samples).to(xs.device)
        for seed in seeds
    ]
    epochs = max(checkpoints)
    fit_stacked(models, xs, ys, seeds=list(seeds), epochs=epochs,
                batch_size=int(config["batch_size"]), lr=float(config["lr"]),
                progress=False)  # fmt: skip
    for model, seed, report in zip(models, seeds, reports, strict=True):
        _report(model, seed, epochs, report)
