"""The in-sample check: a fit that predicts its own training targets worse than their mean does.

A regression fit whose noise is learned per input (``HeteroscedasticGaussian``) can leave whole
regions of its training inputs behind and still score a good ELBO. The net moves those rows'
predictions far off and the noise it learns there grows to match, so each such row costs a few
nats. The rows that fit well earn more than that back, so the loss moves little and the
loss-based blow-up guard (:mod:`bnn_pyro.training.blowup`) does not see it. The fit never comes
back: the pull on the mean of a row 19 sds off under a noise of 10.5 sds is ``r / σ² ≈ 0.17``,
against about 50 for a row that fits (``r ≈ σ ≈ 0.02``).

Measured on a nearly noiseless regression with collinear inputs
(``benchmarks/uci/synthetic.py``): the two lowest of nine operating points, 22% of the rows, sat
19 target-sds off, with a learned noise of 10.5 sds there against 0.02 elsewhere. The ELBO ended
at -1,233 against the run's best of -4,006, less than half its progress given back, while the
predictive mean's RMSE was 5.2 target-sds.

The rule is the coefficient of determination on the training rows: ``R² = 1 - SSE / SST``, with
``SST`` the squared deviations of the targets from their own mean. ``R² < 0`` means the fit
predicts the targets it was trained on worse than the constant ``mean(y)`` does. No working
regression fit does that, whatever the noise level, so the warning has no threshold to tune. The
abandoned fit above had ``R² = -26``; the healthy fits beside it had ``R²`` above 0.98.

A stochastic-gradient sampler can leave the data another way: on a nearly noiseless regression
its noise shrinks, the potential's curvature grows as ``1 / σ²``, and a fixed step that was
stable at the start throws the chain far off while every value stays finite (plain SGLD at its
default step on a standardised version of the set above: predictive RMSE 220 target-sds, no
error). ``SGMCMC.fit`` runs the same check on its kept samples, with its own hint.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from bnn_pyro._rows import spread_rows
from bnn_pyro.exceptions import TrainingInstabilityWarning, warn_user

__all__ = [
    "IN_SAMPLE_DRAWS",
    "LEFT_BEHIND",
    "MAX_ROWS",
    "check_in_sample_fit",
    "check_predictive_in_sample",
    "in_sample_r2",
]

#: At most this many training rows (evenly spaced) are predicted: the check's cost stays a
#: fraction of one epoch's on any data set.
MAX_ROWS = 2000

#: Posterior draws behind the predictive mean that :func:`check_predictive_in_sample` scores.
IN_SAMPLE_DRAWS = 32

#: The warning's reading for a fit with a noise learned per input (the default ``hint``).
LEFT_BEHIND = (
    "With a noise learned per input this is usually a fit that left some of its rows behind "
    "(their noise grew to cover them), or one that has not trained yet; a smaller lr, a "
    "decaying lr_schedule or a noise shared by all inputs avoid the first."
)


def in_sample_r2(mean: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``R² = 1 - Σ (y - mean)² / Σ (y - ȳ)²`` per output column.

    Args:
        mean: ``(N, O)`` predictions of the targets.
        y: ``(N, O)`` targets, ``N >= 2``.

    Returns:
        ``(O,)`` float64; ``nan`` for a column whose targets are all equal.

    Example:
        >>> y = torch.tensor([[0.0], [1.0], [2.0]])
        >>> in_sample_r2(y, y).tolist(), in_sample_r2(torch.full_like(y, 1.0), y).tolist()
        ([1.0], [0.0])
        >>> in_sample_r2(torch.full_like(y, 5.0), y).tolist()  # worse than the mean: < 0
        [-24.0]
    """
    if mean.dim() != 2 or mean.shape != y.shape:
        raise ValueError(
            f"mean and y must both be (N, O), got {tuple(mean.shape)} and {tuple(y.shape)}"
        )
    if y.shape[0] < 2:
        raise ValueError(f"R² needs at least 2 rows, got {y.shape[0]}")
    y64 = y.detach().double()
    sse = (y64 - mean.detach().double()).pow(2).sum(0)
    sst = (y64 - y64.mean(0)).pow(2).sum(0)
    return torch.where(sst > 0, 1.0 - sse / sst.clamp(min=torch.finfo(y64.dtype).tiny), torch.nan)


def check_in_sample_fit(
    predict_mean: Callable[[torch.Tensor], torch.Tensor],
    X: torch.Tensor,
    y: torch.Tensor,
    what: str = "the fit",
    hint: str = LEFT_BEHIND,
) -> torch.Tensor:
    """Warn (:class:`~bnn_pyro.exceptions.TrainingInstabilityWarning`) when the fit's
    in-sample ``R²`` is below 0 on some output; returns the ``R²`` per output.

    Args:
        predict_mean: ``X (M, ...) -> (M, O)`` the fit's predictive mean.
        X: ``(N, ...)`` training inputs; at most :data:`MAX_ROWS` evenly spaced rows are used.
        y: ``(N, O)`` training targets, in the units ``predict_mean`` returns.
        what: how the warning names the fit (e.g. ``"member 3 of the stacked fit"``).
        hint: the warning's last sentences: what usually causes it and what helps.

    Returns:
        ``(O,)`` float64 ``R²`` of the rows used; ``nan`` for a fit on a single row, which has
        no spread to compare with (no warning).

    Example:
        >>> X = torch.linspace(0, 1, 50)[:, None]; y = 2 * X
        >>> check_in_sample_fit(lambda x: 2 * x, X, y).tolist()
        [1.0]
    """
    if X.shape[0] != y.shape[0] or y.dim() != 2:
        raise ValueError(
            f"X (N, ...) and y (N, O) must have the same rows, got {tuple(X.shape)} and "
            f"{tuple(y.shape)}"
        )
    if X.shape[0] < 2:
        return torch.full((y.shape[1],), torch.nan, dtype=torch.float64, device=y.device)
    rows = spread_rows(X.shape[0], MAX_ROWS, X.device)
    if rows is not None:
        X, y = X[rows], y[rows.to(y.device)]
    with torch.no_grad():
        r2 = in_sample_r2(predict_mean(X), y)
    bad = [i for i, v in enumerate(r2.tolist()) if v < 0]
    if bad:
        worst = min(r2[i].item() for i in bad)
        warn_user(
            f"{what} predicts its own training targets worse than their mean does: in-sample "
            f"R² {worst:.3g} (output{'s' if len(bad) > 1 else ''} {', '.join(map(str, bad))}). "
            + hint,
            TrainingInstabilityWarning,
        )
    return r2


def check_predictive_in_sample(
    model: Any, X: torch.Tensor, y: torch.Tensor, what: str = "the fit", hint: str = LEFT_BEHIND
) -> torch.Tensor:
    """:func:`check_in_sample_fit` of a fitted method's predictive mean: the mean of the
    ``locs`` of ``model.predictive_gaussian(x, num_samples=IN_SAMPLE_DRAWS, seed=0)`` (a fixed
    seed: the check draws nothing from the global RNG). VI, its stacked fit and SG-MCMC call it.

    Args:
        model: a fitted method with ``predictive_gaussian`` (``locs (S, M, O)`` first).
        X: ``(N, ...)`` and y: ``(N, O)``: its training rows, prepared as its ``fit`` prepares
            them.
        what, hint: as :func:`check_in_sample_fit`.

    Returns:
        ``(O,)`` in-sample ``R²`` (as :func:`check_in_sample_fit`).

    Raises:
        TypeError: ``model`` has no ``predictive_gaussian``.

    Example:
        >>> class Fixed:  # a "posterior" whose every draw predicts 2 x
        ...     def predictive_gaussian(self, x, num_samples, seed):
        ...         return (2 * x).expand(num_samples, *x.shape), None
        >>> X = torch.linspace(0, 1, 10)[:, None]
        >>> round(float(check_predictive_in_sample(Fixed(), X, 2 * X)), 6)  # float32 round-off
        1.0
    """
    if not callable(getattr(model, "predictive_gaussian", None)):
        raise TypeError(f"model must have a predictive_gaussian method, got {type(model).__name__}")
    return check_in_sample_fit(
        lambda x: model.predictive_gaussian(x, num_samples=IN_SAMPLE_DRAWS, seed=0)[0].mean(0),
        X,
        y,
        what,
        hint,
    )
