"""The VariationalBNN rows: mean-field VI (``vi``) and its local-reparameterization variant.

Setup: one hidden ReLU layer, an ``IIDPrior(Normal(0, prior_scale))`` on every weight and bias,
a learned homoscedastic noise (``Gaussian(scale="learned")``, itself given a ``LogNormal``
posterior) with a ``LogNormal(log noise_median, 1)`` prior on the normalised scale, the exact
mean-field guide started at the net's initial weights with posterior std ``init_scale``,
Adam at a constant learning rate, minibatches of 32, KL weight 1 (the ELBO, no tempering).
A constant learning rate makes the first ``k`` epochs of a long run identical to a run of
``k`` epochs with the same seed, so each configuration is trained once and scored at several
epoch counts.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping, Sequence
from typing import Any

import pyro.distributions as dist
import torch

from bnn_pyro.bnn import VariationalBNN
from bnn_pyro.likelihoods import Gaussian
from bnn_pyro.nn import mlp
from bnn_pyro.priors import IIDPrior
from bnn_pyro.uci_benchmark.method import Config, DatasetInfo, Report, checkpoint_epochs

__all__ = ["LRT_AVAILABLE", "lrt_train", "vi_checkpoints", "vi_grid", "vi_train"]

#: Whether this VariationalBNN has the ``local_reparameterization`` option.
LRT_AVAILABLE = "local_reparameterization" in inspect.signature(VariationalBNN).parameters

_CHECKPOINTS = 4


def vi_grid(info: DatasetInfo, quick: bool = False) -> list[Config]:
    """The VI grid: prior scale x learning rate, each scored at 4 epoch counts.

    About 12,000 optimisation steps per configuration (minibatches of 32), so larger data sets
    get fewer epochs; ``quick`` gives a few epochs for smoke tests.

    Example:
        >>> [c["prior_scale"] for c in vi_grid(DatasetInfo("toy", 455, 13))]
        [0.5, 1.0]
        >>> vi_grid(DatasetInfo("toy", 455, 13), quick=True)[0]["epochs"]
        4
    """
    steps_per_epoch = max(1, math.ceil(info.n_train * 0.8 / 32))
    epochs = 4 if quick else int(min(1000, max(200, round(12_000 / steps_per_epoch, -2))))
    return [
        {
            "epochs": epochs,
            "lr": 3e-3,
            "batch_size": 32,
            "prior_scale": prior_scale,
            "noise_median": 0.1,
            "init_scale": 0.01,
            "elbo": "trace",
        }
        for prior_scale in ((0.5, 1.0) if not quick else (1.0,))
    ]


def vi_checkpoints(config: Mapping[str, Any]) -> list[int]:
    """Epoch counts scored during the search: 4 evenly spaced up to ``config["epochs"]``.

    Example:
        >>> vi_checkpoints({"epochs": 800})
        [200, 400, 600, 800]
    """
    return checkpoint_epochs(int(config["epochs"]), _CHECKPOINTS)


def _train(
    config: Mapping[str, Any],
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    hidden: int,
    seed: int,
    checkpoints: Sequence[int],
    report: Report,
    num_samples: int,
    local: bool,
) -> None:
    likelihood = Gaussian(
        scale="learned", scale_prior=dist.LogNormal(math.log(config["noise_median"]), 1.0)
    )
    extra = {"local_reparameterization": True} if local else {}
    torch.manual_seed(seed)  # the net's initial weights (the guide's initial means)
    bnn = VariationalBNN(
        mlp(x.shape[1], [hidden], 1),
        likelihood,
        prior=IIDPrior(dist.Normal(0.0, float(config["prior_scale"]))),
        init_scale=float(config["init_scale"]),
        **extra,
    )
    wanted = set(checkpoints)

    def predictor(x_eval: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return bnn.predictive_gaussian(x_eval, num_samples=num_samples, seed=seed)

    def callback(model: VariationalBNN, epoch: int, history: Any) -> None:
        if epoch + 1 in wanted:
            report(epoch + 1, predictor)

    bnn.fit(
        x,
        y,
        epochs=max(checkpoints),
        batch_size=int(config["batch_size"]),
        lr=float(config["lr"]),
        elbo=str(config["elbo"]),
        progress=False,
        seed=seed,
        callbacks=[callback],
    )


def vi_train(
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
) -> None:
    """Train a mean-field :class:`~bnn_pyro.VariationalBNN` (see the module docstring).

    Args:
        config: ``epochs``, ``lr``, ``batch_size``, ``prior_scale``, ``noise_median`` (median
            of the noise prior, normalised units), ``init_scale``, ``elbo``.
        x: ``(N, D)`` normalised inputs; y: ``(N, 1)`` normalised targets.
        y_std: unused (the noise is learned in normalised units).
        hidden: hidden width.
        seed: seeds the initial weights and the SVI run.
        checkpoints: epoch counts at which ``report`` is called.
        report: ``report(epoch, predictor)``.
        num_samples: posterior samples per prediction.

    Example:
        >>> x, y = torch.randn(40, 3), torch.randn(40, 1)
        >>> config = vi_grid(DatasetInfo("toy", 40, 3), quick=True)[0]
        >>> seen = []
        >>> vi_train(config, x, y, y_std=1.0, hidden=8, seed=0, checkpoints=[2, 4],
        ...          report=lambda e, p: seen.append((e, p(x)[0].shape)), num_samples=5)
        >>> seen
        [(2, torch.Size([5, 40, 1])), (4, torch.Size([5, 40, 1]))]
    """
    _train(
        config,
        x,
        y,
        hidden=hidden,
        seed=seed,
        checkpoints=checkpoints,
        report=report,
        num_samples=num_samples,
        local=False,
    )


def lrt_train(
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
) -> None:
    """:func:`vi_train` with ``VariationalBNN(..., local_reparameterization=True)``.

    Raises:
        RuntimeError: if this VariationalBNN has no ``local_reparameterization`` option.
    """
    if not LRT_AVAILABLE:
        raise RuntimeError("VariationalBNN has no local_reparameterization option yet")
    _train(
        config,
        x,
        y,
        hidden=hidden,
        seed=seed,
        checkpoints=checkpoints,
        report=report,
        num_samples=num_samples,
        local=True,
    )
