"""The VariationalBNN rows: mean-field VI (``vi``), its local-reparameterization variant
(``lrt``) and the same VI on the black-box alpha energy (``bb_alpha``), built by
``bnn_pyro.make``.

``bb_alpha`` (:func:`bb_alpha_grid`: the ``vi`` grid with ``elbo="alpha"``, alpha 0.5, 10
particles) paired split by split against ``vi`` in the run of 2026-11-25 with the KL warm-up
(20 splits): boston +0.030 +- 0.018, concrete +0.019 +- 0.019, energy +0.169 +- 0.041, yacht
+0.255 +- 0.066 in test log-likelihood, at 1.9-2.5x ``vi``'s training time (its P particles per
step); in the run before the warm-up +0.098 +- 0.055, +0.012 +- 0.011, +0.101 +- 0.029, +0.150
+- 0.050.

Setup: one hidden ReLU layer; a ``LayerwiseNormalPrior("kaiming")`` (std ``sqrt(2 / fan_in)``
per layer, weights and biases: He et al.'s variance for ReLU units, which keeps a prior draw's
activations at the scale of its inputs); the exact mean-field guide started at the
net's initial weights with posterior std ``init_scale``; Adam at a constant learning rate
(:data:`LR`, below); KL
weight 1 (the ELBO, no tempering) after a linear warm-up from 0 over the first half of the
epochs (below); ``Trace_ELBO`` (Monte Carlo KL) unless the config says
``elbo="meanfield"`` or ``"alpha"`` (the black-box alpha energy). The environment variable
:data:`OVERRIDES_ENV` (a JSON object of configuration keys, e.g. ``{"kl_weight": 0.2}``) is laid
over every configuration of the grid: :mod:`benchmarks.uci.variants` runs the variations that
were tried that way (worker processes inherit it).

The observation noise is a hyper-parameter, as Gal's ``tau`` is for MC dropout: either learned
per input (``HeteroscedasticGaussian``: the net's second output, through a softplus, is the
noise std at that input, so the model has weights for it and the ELBO trains them with the rest)
or fixed at the precision ``noise_tau`` (original units, the folder's ``tau_values.txt`` grid;
``noise_tau`` ``None`` is the learned case). A learned noise, homoscedastic or not, absorbs the
posterior's own spread at the training inputs (``sigma^2 ~ residual^2 + epistemic variance``),
so the predictive counts that spread twice; a fixed, smaller noise chosen on validation rows
avoids it where the data are noisy (concrete). The learned noise was one homoscedastic
``Gaussian(scale="learned")`` until a 20-split comparison: per-input noise in its
place scored boston +0.046 +- 0.020 (paired over 20 splits), energy +0.09 +- 0.08, yacht
+0.09 +- 0.05, concrete -0.004 +- 0.009 (the fixed noise is chosen there either way), at the
same cost. The prior std was ``1 / sqrt(fan_in)`` (Neal's) until the next comparison: with
``sqrt(2 / fan_in)`` (one value, He's, not searched) the paired change over 20 splits was
concrete +0.043 +- 0.016, energy +0.02 +- 0.03, yacht +0.41 +- 0.07, boston +0.006 +- 0.037;
twice Neal's std scored concrete +0.035 +- 0.014, no better.

The predictive noise is chosen apart from the training noise: each checkpoint's
predictive is scored with the trained noise std times each of :data:`NOISE_FACTORS` (0.5-2,
the weight draws shared), and the validation rows choose the factor as they choose Gal's tau
for MC dropout. A learned noise that absorbed the posterior's spread is narrowed again (boston:
factors 0.5-0.7), a fixed one too small for the data is widened (concrete: 1.2-1.7). It costs
scoring only, no training.

The KL weight warms up linearly from 0 to 1 over the first half of each configuration's epochs
(:data:`KL_WARMUP`; ``fit(kl_weight=linear_annealing(E // 2))``), and only the checkpoints from
the warm-up's end on are scored (3 of the 4), so every candidate ends on the ELBO. Paired over
20 splits against the committed run without it (variant ``warmup0.5``): boston +0.145
+- 0.050, concrete +0.013 +- 0.014, energy -0.047 +- 0.046, yacht +0.076 +- 0.066, at no extra
training (on concrete splits 0-9 at a fixed 400 epochs and noise, before validation: a warm-up
over a quarter +0.023 +- 0.008, over half +0.042 +- 0.008). The validation rows then choose
the first scored checkpoint, the warm-up's end, in most splits (boston 17 of 20, concrete 15):
a posterior that trained under a KL weight below 1 until its last epochs, nearer a tempered one
than the ELBO's optimum (a KL weight of 0.2 throughout, a tempered model: boston +0.154, below).
The committed run with it (vi): boston -2.43 +- 0.04, concrete -3.08 +- 0.03, energy -1.14,
yacht -0.51; its training time relative to MC dropout's is unchanged (0.62 against 0.59).

The learning rate is 1e-3 (:data:`LR`); it was 3e-3 until a run on the naval propulsion set
(10,740 training rows, a target whose spread is 1.5% of its level, nearly noiseless): there the
search saw a good model on every split (validation RMSE 0.0003-0.0012) while half of the final
fits left their optimum at 3e-3 and never came back (test RMSE up to 1.0, the target's whole
range being 0.05). Twelve seeds of one split's final fit, stacked: 6 of 12 broke at 3e-3, 0 of 12
at 1e-3 (RMSE 0.0004-0.0011 at 400 epochs). The break reproduces without the naval file on
the collinear synthetic set of :mod:`benchmarks.uci.synthetic` (20 splits,
:mod:`benchmarks.uci.collinear_report`): at 3e-3 three finals reached test RMSE 0.055-0.29 (the
target's sd is 0.0147), at 1e-3 none went above 1.3e-4.

On the four data sets here, paired over 20 splits against the run at 3e-3, test log-likelihood:
vi boston +0.063 +- 0.018, concrete -0.003 +- 0.019, energy +0.091 +- 0.044, yacht -0.001 +-
0.062; lrt -0.021 +- 0.053, +0.004 +- 0.020, +0.036 +- 0.032, +0.032 +- 0.045; bb_alpha +0.018
+- 0.022, -0.006 +- 0.011, -0.082 +- 0.038, -0.027 +- 0.033.

A constant learning rate makes the first ``k`` epochs of a long run identical to a run of ``k``
epochs with the same seed, so each configuration is trained once and scored at several epoch
counts. ``lr_schedule``, ``init`` and ``kl_weight`` are configuration keys too (a decaying
schedule scores only the end of its run); the grid keeps the constant rate, the prior start and
the ELBO: on splits 0-4 of boston and concrete, a cosine schedule with a MAP start scored
-2.514/-3.115 against -2.523/-3.118 with the factor alone (within noise, at ~20% more training
and an unstacked MAP phase), and a validated KL weight (1, 0.3, 0.1) -2.572/-3.127. Over 20
splits, paired against the committed run, none of these moved boston or concrete by
more than a standard error either: three times the steps (:data:`_STEPS` 30,000) -0.020 +-
0.019 / -0.009 +- 0.014, a MAP start +0.054 +- 0.054 / -0.003 +- 0.014, 100 hidden units -0.024
/ -0.004, Blundell's scale mixture prior (concrete) +0.008 +- 0.018; a fixed KL weight of 0.2
(a tempered posterior, a different model) gave boston +0.156 +- 0.057 and concrete +0.023 +-
0.030, one of 0.05 +0.019 +- 0.080 and +0.027 +- 0.030. Against the committed run of
2026-11-25 (``python -m benchmarks.uci.variants NAME``, tables in
``benchmarks/results/uci/variants/``): KL weight 0.2 boston +0.154 +- 0.058 (-2.42), concrete
+0.011 +- 0.029, energy +0.019 +- 0.128, yacht +0.374 +- 0.099; the black-box alpha energy in
place of the ELBO (``elbo="alpha"``, 0.5, 10 particles) boston +0.043 +- 0.029, concrete +0.005
+- 0.015, energy +0.069 +- 0.058, yacht +0.143 +- 0.057, at 2.5x the training time; on concrete
KL weight 0.05 +0.013 +- 0.028, a MAP start -0.021 +- 0.012, twice the prior std -0.002 +-
0.013, a 10x smaller initial std -0.015 +- 0.015. Predictive noise factors down to 0.25 (0.5 is
chosen in every split of energy and yacht): boston -0.048 +- 0.041, concrete -0.017 +- 0.018,
energy +0.026 +- 0.043, yacht -0.122 +- 0.075 (``variants/factors0.25.md``): not adopted.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from benchmarks.uci.method import Config, DatasetInfo, Report, checkpoint_epochs
from bnn_pyro.elbos.alpha import DEFAULT_PARTICLES
from bnn_pyro.likelihoods import Gaussian, HeteroscedasticGaussian
from bnn_pyro.likelihoods.gaussian import GaussianLikelihood
from bnn_pyro.methods.vi.svi import KLWeightSpec
from bnn_pyro.nn import mlp
from bnn_pyro.priors import LayerwiseNormalPrior
from bnn_pyro.registry import make
from bnn_pyro.stacking import fit_stacked
from bnn_pyro.training.callbacks import linear_annealing

__all__ = [
    "bb_alpha_grid",
    "kl_weight_spec",
    "vi_checkpoints",
    "vi_grid",
    "vi_train",
    "vi_train_stacked",
]

_METHODS = ("vi", "lrt", "bb_alpha")  # the bnn_pyro.METHODS names trained here

_CHECKPOINTS = 4
_STEPS = 10_000  # optimisation steps per configuration in the search
#: Adam's learning rate (see the module docstring: 3e-3 broke half of the naval final fits).
LR = 1e-3
#: The learning rate over a run and the guide's start (see the module docstring).
SCHEDULE, INIT = "constant", None
#: The weight prior's std per layer: ``sqrt(2 / fan_in)`` (see the module docstring).
PRIOR = "kaiming"
KL_WEIGHTS = (1.0,)
#: The KL weight's linear warm-up from 0 to ``kl_weight``, as a fraction of each
#: configuration's epochs (0: none); the configuration holds it in epochs (``kl_warmup``), so
#: a final fit at a chosen checkpoint warms up as its search run did.
KL_WARMUP = 0.5
#: A JSON object of configuration keys laid over every grid configuration (see the docstring).
OVERRIDES_ENV = "BNN_PYRO_UCI_VI_OVERRIDES"
#: Multiples of the trained noise std tried in the predictive (chosen on validation rows).
NOISE_FACTORS = (0.5, 0.6, 0.7, 0.85, 1.0, 1.2, 1.4, 1.7, 2.0)
#: The configuration keys of the ``bb_alpha`` row (and of ``variants``' ``alpha``): the alpha
#: energy, its default alpha 0.5 and P.
ALPHA_KEYS = {"elbo": "alpha", "num_particles": DEFAULT_PARTICLES}


def _noise_taus(info: DatasetInfo) -> list[float | None]:
    """``None`` (learned per input) and the largest reference precision (the smallest noise)."""
    taus: list[float | None] = [None]
    if info.reference is not None and info.reference.tau_values:
        taus.append(max(info.reference.tau_values))
    return taus


def vi_grid(info: DatasetInfo, quick: bool = False) -> list[Config]:
    """The VI grid: the noise, learned per input or fixed at the folder's largest tau (smallest
    noise).

    Minibatches of 32 at a constant learning rate of :data:`LR`, about 10,000 steps per
    configuration (so smaller data sets get more epochs, 400 to 2,000), the KL weight warmed
    up over the first :data:`KL_WARMUP` of them (``kl_warmup``, epochs), each scored at the
    epoch counts of :func:`vi_checkpoints` and each of :data:`NOISE_FACTORS`; the :data:`PRIOR`
    prior. ``quick`` gives one configuration of a few epochs (factor 1) for smoke tests.

    Example:
        >>> from benchmarks.uci.data import UCIHyperparameters
        >>> ref = UCIHyperparameters(20, 50, 40, (0.005,), (0.1, 0.2))
        >>> grid = vi_grid(DatasetInfo("toy", 455, 13, ref))
        >>> [(c["noise_tau"], c["epochs"]) for c in grid]
        [(None, 800), (0.2, 800)]
        >>> vi_grid(DatasetInfo("toy", 455, 13), quick=True)[0]["epochs"]
        4
    """
    batch_size = 32
    if quick:
        taus, epochs = [None], 4
    else:
        taus = _noise_taus(info)
        steps_per_epoch = max(1, math.ceil(info.n_train * 0.8 / batch_size))
        epochs = int(min(2000, max(400, round(_STEPS / steps_per_epoch, -2))))
    overrides = json.loads(os.environ.get(OVERRIDES_ENV) or "{}")
    if not isinstance(overrides, dict):
        raise ValueError(f"{OVERRIDES_ENV} must hold a JSON object, got {overrides!r}")
    warmup = float(overrides.pop("kl_warmup_fraction", KL_WARMUP))
    return [
        {
            "epochs": epochs,
            "lr": LR,
            "batch_size": batch_size,
            "noise_tau": tau,
            "prior": PRIOR,
            "prior_gain": 1.0,
            "init_scale": 0.01,
            "elbo": "trace",
            "noise_factors": [1.0] if quick else list(NOISE_FACTORS),
            "lr_schedule": SCHEDULE,
            "init": INIT,
            "kl_weight": beta,
            # only where used: a configuration's keys seed its runs (runner.seed_for)
            **({"kl_warmup": round(warmup * epochs)} if warmup else {}),
            **overrides,
        }
        for tau in taus
        for beta in KL_WEIGHTS
    ]


def bb_alpha_grid(info: DatasetInfo, quick: bool = False) -> list[Config]:
    """:func:`vi_grid` on the black-box alpha energy: the ``bb_alpha`` row
    (``make("bb_alpha")``, alpha 0.5 and 10 particles, :mod:`bnn_pyro.elbos.alpha`); the same
    search otherwise, the same noise, factors and epochs.

    Example:
        >>> [(c["elbo"], c["num_particles"]) for c in bb_alpha_grid(DatasetInfo("t", 40, 3), True)]
        [('alpha', 10)]
    """
    return [{**c, **ALPHA_KEYS} for c in vi_grid(info, quick)]


def kl_weight_spec(config: Mapping[str, Any]) -> KLWeightSpec:
    """The configuration's ``kl_weight`` for ``fit``: the float, or with ``kl_warmup`` epochs
    a schedule rising linearly from 0 to it over those epochs.

    Example:
        >>> kl_weight_spec({"kl_weight": 0.5})
        0.5
        >>> schedule = kl_weight_spec({"kl_weight": 1.0, "kl_warmup": 4})
        >>> [schedule(e) for e in (0, 2, 4, 9)]
        [0.0, 0.5, 1.0, 1.0]
    """
    beta = float(config.get("kl_weight", 1.0))
    warmup = int(config.get("kl_warmup") or 0)
    if not warmup:
        return beta
    ramp = linear_annealing(warmup)
    return lambda epoch: beta * ramp(epoch)


def vi_checkpoints(config: Mapping[str, Any]) -> list[int]:
    """Epoch counts scored during the search: 4 evenly spaced up to ``config["epochs"]``, those
    inside a KL warm-up (``kl_warmup`` epochs, where the objective is not yet the ELBO) left out.

    Example:
        >>> vi_checkpoints({"epochs": 800})
        [200, 400, 600, 800]
        >>> vi_checkpoints({"epochs": 800, "kl_warmup": 400})
        [400, 600, 800]
    """
    if config.get("lr_schedule", "constant") != "constant":
        return [int(config["epochs"])]  # a decaying rate: only the end of the run is one
    warmup = int(config.get("kl_warmup") or 0)
    epochs = checkpoint_epochs(int(config["epochs"]), _CHECKPOINTS)
    return [e for e in epochs if e >= warmup] or [epochs[-1]]


def _build(
    config: Mapping[str, Any], method: str, features: int, hidden: int, y_std: float, seed: int
) -> Any:
    """The configuration's model, its initial weights drawn under ``seed``."""
    tau = config["noise_tau"]
    likelihood: GaussianLikelihood
    if tau is None:  # learned per input: a second output for the noise std
        likelihood = HeteroscedasticGaussian()
    else:
        likelihood = Gaussian(scale=1.0 / (math.sqrt(float(tau)) * y_std))
    torch.manual_seed(seed)  # the net's initial weights (the guide's initial means)
    return make(
        method,
        mlp(features, [hidden], likelihood.output_dim(1)),
        likelihood,
        prior=LayerwiseNormalPrior(
            str(config.get("prior", "radford")), gain=float(config["prior_gain"])
        ),
        init_scale=float(config["init_scale"]),
    )


def _report_noise_factors(
    config: Mapping[str, Any], report: Report, epoch: int, bnn: Any, seed: int, num_samples: int
) -> None:
    """Report ``bnn``'s predictive with its noise std times each of ``config["noise_factors"]``
    (or only the chosen ``config["noise_factor"]``), the weight samples drawn once."""
    cache: list[tuple[torch.Tensor, tuple[torch.Tensor, Any]]] = []

    def predictor_for(factor: float) -> Any:
        def predictor(x_eval: torch.Tensor) -> tuple[torch.Tensor, Any]:
            if not cache or cache[0][0] is not x_eval:  # the same draws for every factor
                cache[:] = [
                    (x_eval, bnn.predictive_gaussian(x_eval, num_samples=num_samples, seed=seed))
                ]
            locs, scales = cache[0][1]
            return locs, scales * factor

        return predictor

    chosen = config.get("noise_factor")
    factors = config.get("noise_factors") or [1.0]
    for factor in factors if chosen is None else [float(chosen)]:
        report(epoch, predictor_for(float(factor)), {"noise_factor": float(factor)})


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
    method: str = "vi",
) -> None:
    """Train a mean-field :class:`~bnn_pyro.VariationalBNN` (see the module docstring).

    Args:
        config: ``epochs``, ``lr``, ``batch_size``, ``noise_tau`` (``None``: noise learned per
            input; else a fixed noise precision in original units), ``prior`` (a
            :class:`~bnn_pyro.LayerwiseNormalPrior` method; ``"radford"`` if absent),
            ``prior_gain``, ``init_scale``, ``elbo`` (and ``num_particles``, default 1).
        x: ``(N, D)`` normalised inputs; y: ``(N, 1)`` normalised targets.
        y_std: target std of the training rows (turns ``noise_tau`` into a normalised std).
        hidden: hidden width.
        seed: seeds the initial weights and the SVI run.
        checkpoints: epoch counts at which ``report`` is called.
        report: ``report(epoch, predictor)``.
        num_samples: posterior samples per prediction.
        method: the :data:`bnn_pyro.METHODS` name, ``"vi"`` or ``"lrt"``
            (``VariationalBNN(local_reparameterization=True)``).

    Example:
        >>> x, y = torch.randn(40, 3), torch.randn(40, 1)
        >>> config = vi_grid(DatasetInfo("toy", 40, 3), quick=True)[0]
        >>> seen = []
        >>> vi_train(config, x, y, y_std=1.0, hidden=8, seed=0, checkpoints=[2, 4],
        ...          report=lambda e, p, o: seen.append((e, p(x)[0].shape)), num_samples=5)
        >>> seen
        [(2, torch.Size([5, 40, 1])), (4, torch.Size([5, 40, 1]))]
    """
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    bnn = _build(config, method, x.shape[1], hidden, y_std, seed).to(x.device)
    wanted = set(checkpoints)

    def callback(model: Any, epoch: int, history: Any) -> None:
        if epoch + 1 in wanted:
            _report_noise_factors(config, report, epoch + 1, bnn, seed, num_samples)

    bnn.fit(
        x,
        y,
        epochs=max(checkpoints),
        batch_size=int(config["batch_size"]),
        lr=float(config["lr"]),
        elbo=str(config["elbo"]),
        num_particles=int(config.get("num_particles", 1)),
        progress=False,
        seed=seed,
        callbacks=[callback],
        lr_schedule=config.get("lr_schedule", "constant"),
        init=config.get("init"),
        kl_weight=kl_weight_spec(config),
    )


def vi_train_stacked(
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
    method: str = "vi",
) -> None:
    """:func:`vi_train` for K splits at once (:func:`bnn_pyro.fit_stacked`): member ``k`` trains
    on ``xs[k]``, ``ys[k]`` with ``seeds[k]`` and reports to ``reports[k]``, ending where its own
    :func:`vi_train` ends (up to float rounding).

    Args:
        config: as :func:`vi_train` (``elbo`` ``"trace"``, ``"stl"``, ``"meanfield"`` or
            ``"alpha"``).
        xs: ``(K, N, D)``; ys: ``(K, N, 1)`` normalised rows of each split.
        y_stds, seeds, reports: one per split.
        hidden, checkpoints, num_samples, method: as :func:`vi_train`.

    Raises:
        ValueError: the configuration cannot be stacked (several particles of a one-particle
            objective: :func:`~bnn_pyro.fit_stacked` refuses it before any training).

    Example:
        >>> xs, ys = torch.randn(2, 40, 3), torch.randn(2, 40, 1)
        >>> config = vi_grid(DatasetInfo("toy", 40, 3), quick=True)[0]
        >>> seen = []
        >>> vi_train_stacked(config, xs, ys, y_stds=[1.0, 1.0], hidden=8, seeds=[0, 1],
        ...     checkpoints=[4], num_samples=5,
        ...     reports=[lambda e, p, o, k=k: seen.append((k, e)) for k in range(2)])
        >>> seen
        [(0, 4), (1, 4)]
    """
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    bnns = [
        _build(config, method, xs.shape[-1], hidden, y_std, seed).to(xs.device)
        for y_std, seed in zip(y_stds, seeds, strict=True)
    ]
    wanted = set(checkpoints)

    def callback(models: Any, epoch: int, history: Any) -> None:
        if epoch + 1 in wanted:
            for bnn, seed, report in zip(models, seeds, reports, strict=True):
                _report_noise_factors(config, report, epoch + 1, bnn, seed, num_samples)

    fit_stacked(
        bnns,
        xs,
        ys,
        seeds=list(seeds),
        epochs=max(checkpoints),
        batch_size=int(config["batch_size"]),
        lr=float(config["lr"]),
        progress=False,
        callbacks=[callback],
        lr_schedule=config.get("lr_schedule", "constant"),  # as vi_train
        init=config.get("init"),
        kl_weight=kl_weight_spec(config),
        elbo=str(config["elbo"]),
        num_particles=int(config.get("num_particles", 1)),
    )
