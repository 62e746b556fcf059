"""The UCI protocol: normalised data, scores in original units, mean ± standard error, seeds.

Hernández-Lobato & Adams (2015); Gal & Ghahramani (2016): inputs and targets are normalised on
the training rows (:func:`benchmarks.uci.data.load_uci_split` holds the statistics), models train
and predict in normalised units, and the predictive is scored in the original units of ``y``
(``y_scale`` of :mod:`bnn_pyro.metrics`). Results are averaged over the splits with the standard
error ``std / sqrt(n)``.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from benchmarks.uci.data import UCISplit
from bnn_pyro.metrics import gaussian_log_likelihood, rmse
from bnn_pyro.metrics._validation import check_samples, check_scales, check_target

__all__ = [
    "FINAL_CHECK_ROWS",
    "FINAL_FLAG_RATIO",
    "LARGE_DATASET_ROWS",
    "Predictor",
    "RegressionData",
    "central_coverage",
    "hidden_units",
    "inside_central_interval",
    "mean_stderr",
    "prepare",
    "score",
    "seed_for",
]

#: A final fit whose in-sample RMSE is more than this many times the search's validation RMSE of
#: the same configuration is flagged (:func:`benchmarks.uci.runner.final_check`). A final fit
#: sees 25% more rows than its search run and is scored on rows it trained on, so its in-sample
#: error is at most about the search's out-of-sample one; five times it is no fluctuation.
FINAL_FLAG_RATIO = 5.0

#: The training rows (evenly spaced) whose RMSE a final fit's check reads: a sampling method's
#: predictive over every training row, at the test's sample count, cost as much as its whole
#: final fit on a set of kin8nm's size, and an RMSE from a thousand rows is within a few percent
#: of the whole set's, far inside the flag's factor.
FINAL_CHECK_ROWS = 1000

#: ``1 / sqrt(2)``: ``Phi(z) = erfc(-z / sqrt 2) / 2``.
_SQRT_HALF = math.sqrt(0.5)

#: Data sets with more training rows than this get 100 hidden units (protein-sized data).
LARGE_DATASET_ROWS = 10_000

#: ``x (N, D) -> (locs (S, N, 1), scales broadcastable to locs)``, in normalised units.
Predictor = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True, eq=False)
class RegressionData:
    """One train/evaluation pair in normalised units, as the methods see it.

    Attributes:
        x: ``(N, D)`` normalised training inputs.
        y: ``(N, 1)`` normalised training targets.
        x_eval: ``(M, D)`` normalised inputs to score (validation or test rows).
        y_eval: ``(M, 1)`` normalised targets to score.
        y_std: the target standard deviation of the training rows (original units per
            normalised unit); scores in original units use it.
        hidden: hidden-layer width of the protocol for this data set.
    """

    x: torch.Tensor
    y: torch.Tensor
    x_eval: torch.Tensor
    y_eval: torch.Tensor
    y_std: float
    hidden: int


def hidden_units(n_rows: int) -> int:
    """Hidden-layer width of the protocol: 50 ReLU units, 100 for protein-sized data.

    Args:
        n_rows: number of training rows.

    Returns:
        100 if ``n_rows > 10000``, else 50.

    Example:
        >>> hidden_units(455), hidden_units(41_157)
        (50, 100)
    """
    if isinstance(n_rows, bool) or not isinstance(n_rows, int) or n_rows < 1:
        raise ValueError(f"n_rows must be a positive int, got {n_rows!r}")
    return 100 if n_rows > LARGE_DATASET_ROWS else 50


def prepare(split: UCISplit, device: str | torch.device = "cpu") -> RegressionData:
    """Normalise a split with its training statistics: train on ``X_train``, score ``X_test``;
    the rows on ``device`` (the methods' models follow their rows there).

    Pass a :func:`benchmarks.uci.data.validation_split` to get the validation pair (its
    ``X_test`` is the last 20% of the training rows; the real test rows are not in it).

    Args:
        split: a :class:`benchmarks.uci.data.UCISplit`.

    Returns:
        :class:`RegressionData` with ``x (N, D)``, ``y (N, 1)``, ``x_eval (M, D)``,
        ``y_eval (M, 1)``.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from benchmarks.uci import load_uci_split, write_uci_folder
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     folder = write_uci_folder(Path(tmp) / "toy", torch.randn(30, 2), torch.randn(30))
        ...     data = prepare(load_uci_split(folder, 0))
        >>> data.x.shape, data.y_eval.shape, data.hidden
        (torch.Size([27, 2]), torch.Size([3, 1]), 50)
        >>> round(float(data.y.std(unbiased=False)), 4)
        1.0
    """
    if not isinstance(split, UCISplit):
        raise TypeError(f"split must be a UCISplit, got {type(split).__name__}")
    return RegressionData(
        x=split.normalize_x(split.X_train).to(device),
        y=split.normalize_y(split.y_train).to(device),
        x_eval=split.normalize_x(split.X_test).to(device),
        y_eval=split.normalize_y(split.y_test).to(device),
        y_std=float(split.y_std),
        hidden=hidden_units(int(split.X_train.shape[0])),
    )


def inside_central_interval(
    locs: torch.Tensor, scales: torch.Tensor | float, y: torch.Tensor, level: float = 0.95
) -> torch.Tensor:
    """Whether each target lies in the Gaussian mixture's central interval of ``level``,
    ``[Q(a), Q(1 - a)]`` with ``a = (1 - level) / 2`` (ends included), without its quantiles.

    The mixture's CDF ``F(y) = 1/S sum_s Phi((y - locs[s]) / scales[s])`` is continuous and
    strictly increasing, so ``y`` is inside exactly when ``a <= F(y) <= 1 - a``: one CDF
    evaluation per point instead of a quantile search. ``F`` is first evaluated in the inputs'
    precision (at least float32) as ``erfc(-z / sqrt 2) / 2``, whose error is a few float32
    roundings (under ``1e-6``); only the points whose ``F`` lies within a slack of ``1e-4`` (plus
    ``S`` float epsilons for the sum) of ``a`` or ``1 - a`` are decided again by ``F`` in
    float64 (:func:`bnn_pyro.metrics.gaussian_mixture_cdf`'s formula). Every decision is
    therefore that of the float64 CDF.

    Args:
        locs: ``(S, N)`` or ``(S, N, O)`` per-sample predictive means.
        scales: positive noise standard deviations, a float or broadcastable to ``locs``.
        y: ``(N,)`` or ``(N, O)`` targets.
        level: the interval's nominal coverage, in ``(0, 1)``.

    Returns:
        A bool tensor of ``y``'s shape.

    Example:
        >>> locs = torch.tensor([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]])  # N(+-1, 0.5^2), halves
        >>> inside_central_interval(locs, 0.5, torch.tensor([0.0, 1.7, 2.0])).tolist()  # Q = 1.82
        [True, True, False]
    """
    locs = check_samples(locs, "locs")
    scales = check_scales(scales, locs)
    y = check_target(y, locs.shape[1:])
    return _inside(locs, scales, y, level)


def _inside(
    locs: torch.Tensor, scales: torch.Tensor, y: torch.Tensor, level: float
) -> torch.Tensor:
    """:func:`inside_central_interval` on inputs already checked (``scales`` a tensor)."""
    if not (isinstance(level, float) and 0.0 < level < 1.0):
        raise ValueError(f"level must be a float in (0, 1), got {level!r}")
    tail = (1.0 - level) / 2
    work = torch.promote_types(torch.promote_types(locs.dtype, y.dtype), torch.float32)
    z = (y.to(work) - locs.to(work)) / scales.to(work)
    cdf = torch.erfc(z * -_SQRT_HALF).mean(0) / 2  # erfc is vectorized where ndtr is not
    inside = (cdf >= tail) & (cdf <= 1.0 - tail)
    slack = 1e-4 + locs.shape[0] * torch.finfo(work).eps
    near = ((cdf - tail).abs() <= slack) | ((cdf - (1.0 - tail)).abs() <= slack)
    if bool(near.any()):
        scales = scales.expand_as(locs)
        z = (y[near].double() - locs[:, near].double()) / scales[:, near].double()
        exact = torch.special.ndtr(z).mean(0)
        inside[near] = (exact >= tail) & (exact <= 1.0 - tail)
    return inside


def central_coverage(
    locs: torch.Tensor, scales: torch.Tensor | float, y: torch.Tensor, level: float = 0.95
) -> float:
    """The share of targets inside the mixture's central interval of ``level``
    (:func:`inside_central_interval`), all points and outputs pooled.

    Example:
        >>> central_coverage(torch.zeros(1, 2, 1), 1.0, torch.tensor([[0.0], [2.0]]))
        0.5
    """
    return float(inside_central_interval(locs, scales, y, level).double().mean())


def score(
    locs: torch.Tensor,
    scales: torch.Tensor | float,
    y: torch.Tensor,
    y_std: float,
    *,
    coverage: bool = True,
) -> dict[str, float]:
    """Test log-likelihood and RMSE in original units of a normalised Gaussian-mixture
    predictive, and the share of targets inside its central 95% interval (between the mixture's
    own 2.5% and 97.5% quantiles, :func:`central_coverage`: found from its CDF at the targets).

    Args:
        locs: ``(S, N, 1)`` per-sample predictive means (normalised units).
        scales: noise standard deviations broadcastable to ``locs`` (normalised units).
        y: ``(N, 1)`` normalised targets.
        y_std: the target standard deviation the data were normalised with.
        coverage: also score ``coverage_95`` (a search, which reads only the first two, leaves
            it out).

    Returns:
        ``{"test_ll": mean log-likelihood per point, "rmse": RMSE of the predictive mean,
        "coverage_95": share of targets in the 95% interval}``, the first two in original
        units.

    Example:
        >>> out = score(torch.zeros(1, 2, 1), 1.0, torch.tensor([[0.0], [2.0]]), y_std=2.0)
        >>> round(out["test_ll"], 4), out["rmse"], out["coverage_95"]  # 2.0 is beyond 1.96
        (-2.6121, 2.8284271247461903, 0.5)
    """
    if not isinstance(locs, torch.Tensor) or locs.dim() != 3:
        shape = tuple(locs.shape) if isinstance(locs, torch.Tensor) else type(locs).__name__
        raise ValueError(f"locs must be a (S, N, O) tensor, got {shape}")
    scores = {
        "test_ll": float(gaussian_log_likelihood(locs, scales, y, y_scale=y_std)),
        "rmse": rmse(locs.mean(0), y, y_scale=y_std),
    }
    if coverage:  # the inputs were checked by the log-likelihood
        scales = torch.as_tensor(scales, dtype=locs.dtype, device=locs.device)
        scores["coverage_95"] = float(_inside(locs, scales, y, 0.95).double().mean())
    return scores


def mean_stderr(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error over splits: ``std / sqrt(n)`` with the population std.

    ``ddof=0`` as in the reference code (``np.std``), and as the data README states.

    Args:
        values: one score per split.

    Returns:
        ``(mean, stderr)``; the standard error of a single split is 0.

    Raises:
        ValueError: if ``values`` is empty or holds a non-finite number.

    Example:
        >>> mean_stderr([1.0, 2.0, 3.0, 4.0])  # std 1.118..., / sqrt(4)
        (2.5, 0.5590169943749475)
    """
    array = np.asarray(list(values), dtype=np.float64)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"values must be a non-empty sequence of floats, got {values!r}")
    if not np.isfinite(array).all():
        raise ValueError(f"values must be finite, got {array.tolist()}")
    return float(array.mean()), float(array.std() / math.sqrt(array.size))


def seed_for(*parts: object) -> int:
    """A deterministic seed in ``[0, 2**31)`` from the parts' text (CRC-32, not ``hash()``).

    Python's string hashing changes between processes; this does not, so every process and
    every re-run trains with the same seed for the same (data set, split, method, config).

    Example:
        >>> seed_for("bostonHousing", 0, "vi") == seed_for("bostonHousing", 0, "vi")
        True
        >>> seed_for("bostonHousing", 0, "vi") != seed_for("bostonHousing", 1, "vi")
        True
    """
    text = "\x1f".join(repr(part) for part in parts)
    return zlib.crc32(text.encode("utf-8")) & 0x7FFFFFFF
