"""Split conformal prediction intervals around any regression method (Vovk et al. 2005; Lei et
al. 2018).

Fit the method on training rows, then *calibrate* on other rows the method never saw: each
calibration row gets a nonconformity score, and the interval at a new ``x`` is every ``y``
whose score would be at most the ``⌈(n + 1)(1 - alpha)⌉``-th smallest of the ``n`` calibration
scores. If the calibration and test rows are exchangeable, the interval holds a new ``y`` with
probability at least ``1 - alpha`` (and at most ``1 - alpha + 1/(n + 1)`` when the scores have
no ties), whatever the model got wrong. Two scores, on the method's predictive mean ``μ`` and
total standard deviation ``σ`` (:func:`~bnn_pyro.calibration.predictive_moments`):

* ``"absolute"``: ``|y - μ|``: intervals ``μ ± q``, one width everywhere;
* ``"normalized"``: ``|y - μ| / σ``: intervals ``μ ± q σ``, wide where the model is unsure
  (MAPIE's ``StdConformityScore`` on a model's ``return_std``).

Each output column is calibrated on its own. With the absolute score the intervals are
MAPIE's (``SplitConformalRegressor``, ``AbsoluteConformityScore``) to float rounding; with the
normalised score MAPIE 1.6 was measured taking the next smaller score than the textbook's
``⌈(n + 1)(1 - alpha)⌉``-th (``tests/calibration/test_conformal.py`` runs both side by side).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from bnn_pyro._checks import check_choice, check_float, check_tensor
from bnn_pyro.calibration.moments import calibration_rows, check_method, predictive_moments
from bnn_pyro.calibration.saving import SavedWithMethod
from bnn_pyro.exceptions import NotFittedError

__all__ = ["SCORES", "SplitConformal", "conformal_quantile", "fewest_rows"]

#: The nonconformity scores of :class:`SplitConformal`.
SCORES = ("absolute", "normalized")


def fewest_rows(alpha: float, enough: Callable[[int], bool]) -> str:
    """How many calibration rows ``alpha`` needs, for a refusal's message: the fewest ``n``
    with ``enough(n)`` (the caller's own rank check, float rounding and all), searched up from
    just below ``(1 - alpha) / alpha``, where the ranks' real-number condition is met.

    Example:
        >>> fewest_rows(0.1, lambda n: math.ceil((n + 1) * 0.9) <= n)
        '9'
        >>> fewest_rows(1 / 3, lambda n: math.ceil((n + 1) * (2 / 3)) <= n)  # 2/(1/3) > 2
        '2'
        >>> fewest_rows(5e-324, lambda n: False)
        'more than 2**53'
    """
    guess = (1.0 - alpha) / alpha
    if not guess < 2.0**53:
        return "more than 2**53"
    n = max(1, math.ceil(guess) - 2)
    while not enough(n):  # the condition holds from about guess on: a step or two
        n += 1
    return str(n)


def conformal_quantile(scores: torch.Tensor, alpha: float) -> torch.Tensor:
    """The ``⌈(n + 1)(1 - alpha)⌉``-th smallest of ``n`` calibration scores, per column: the
    threshold that gives split conformal prediction its ``1 - alpha`` guarantee.

    Args:
        scores: ``(n, O)`` nonconformity scores of the calibration rows.
        alpha: the miss rate allowed, in ``(0, 1)``.

    Returns:
        ``(O,)``.

    Raises:
        ValueError: ``alpha`` outside ``(0, 1)``, ``scores`` not ``(n, O)``, or too few rows
            for ``alpha`` (``⌈(n + 1)(1 - alpha)⌉ > n``: the interval would be the whole line).
        TypeError: ``scores`` is not a floating tensor.

    Example:
        >>> conformal_quantile(torch.arange(1.0, 20.0).unsqueeze(-1), 0.1)  # ⌈20 × 0.9⌉ = 18th
        tensor([18.])
    """
    alpha = check_float("alpha", alpha, minimum=0.0, strict=True, maximum=1.0)
    scores = check_tensor("scores", scores)
    if scores.dim() != 2 or len(scores) == 0:
        raise ValueError(f"scores must have shape (n, O) with n >= 1, got {tuple(scores.shape)}")
    n = scores.shape[0]

    def rank(rows: int) -> int:
        return math.ceil((rows + 1) * (1.0 - alpha))

    if rank(n) > n:
        needed = fewest_rows(alpha, lambda rows: rank(rows) <= rows)
        raise ValueError(
            f"{n} calibration rows are too few for alpha={alpha}: a guaranteed interval needs "
            f"at least {needed} rows (or a larger alpha)"
        )
    return scores.sort(dim=0).values[rank(n) - 1]


class SplitConformal(SavedWithMethod):
    """Conformal intervals with a finite-sample coverage guarantee around a fitted method.

    Args:
        method: a fitted regression method (any with ``predictive_gaussian``: every method of
            this library fitted on regression data).
        score: ``"normalized"`` (``|y - μ| / σ``, the default) or ``"absolute"``
            (``|y - μ|``).
        **predict_options: passed to the method's ``predict`` on calibration and test rows
            (``num_samples``, ``seed``; give a ``seed`` for intervals that repeat).

    Attributes:
        scores: the ``(n, O)`` calibration scores (``None`` before :meth:`calibrate`).

    ``save(path)`` writes the calibration with its method, and :func:`bnn_pyro.load` rebuilds
    both.

    Example:
        >>> import bnn_pyro as bp, torch.nn as nn
        >>> g = torch.Generator().manual_seed(0)
        >>> X = torch.randn(400, 1, generator=g)
        >>> y = 2 * X[:, 0] + 0.3 * torch.randn(400, generator=g)
        >>> la = bp.LaplaceApproximation(nn.Linear(1, 1), "regression")
        >>> _ = la.fit(X[:200], y[:200], epochs=200, lr=0.05, progress=False)
        >>> conformal = SplitConformal(la, seed=0).calibrate(X[200:300], y[200:300])
        >>> lower, upper = conformal.predict_interval(X[300:], alpha=0.1)
        >>> lower.shape, 0.8 < bp.metrics.picp(lower, upper, y[300:, None]) <= 1.0
        (torch.Size([100, 1]), True)
    """

    def __init__(self, method: Any, score: str = "normalized", **predict_options: Any) -> None:
        self.method = check_method(method)
        self.score = check_choice("score", score, SCORES)
        self.predict_options = predict_options
        self.scores: torch.Tensor | None = None

    def calibrator_state(self) -> dict[str, Any]:
        """``{"score", "scores"}``: the score's name and the calibration scores."""
        return {"score": self.score, "scores": self.scores}

    def restore_calibrator_state(self, state: dict[str, Any]) -> None:
        """Put back the score's name and the calibration scores."""
        self.score = check_choice("score", state.get("score"), SCORES)
        self.scores = state.get("scores")

    def _moments(self, x: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return predictive_moments(self.method, x, **self.predict_options)

    def calibrate(self, X_cal: Any, y_cal: Any) -> SplitConformal:
        """Score the calibration rows, which the method must not have been fitted on.

        Args:
            X_cal: ``(n, D)`` inputs.
            y_cal: ``(n,)`` or ``(n, O)`` targets.

        Returns:
            ``self``.

        Raises:
            ValueError: ``y_cal``'s rows or columns do not match the method's predictions.
        """
        mean, sd, y = calibration_rows(self.method, X_cal, y_cal, **self.predict_options)
        residual = (y - mean).abs()
        self.scores = residual / sd if self.score == "normalized" else residual
        return self

    def quantile(self, alpha: float) -> torch.Tensor:
        """The conformal quantile ``q`` ``(O,)`` of the calibration scores
        (:func:`conformal_quantile`).

        Example:
            >>> c = SplitConformal.__new__(SplitConformal)
            >>> c.scores = torch.arange(1.0, 10.0).unsqueeze(-1)  # n = 9: scores 1..9
            >>> c.quantile(0.1)  # ⌈10 × 0.9⌉ = 9th smallest
            tensor([9.])
        """
        if self.scores is None:
            raise NotFittedError("SplitConformal is not calibrated: call calibrate() first")
        return conformal_quantile(self.scores, alpha)  # which checks alpha

    def predict_interval(self, X: Any, alpha: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
        """The conformal interval of level ``1 - alpha`` at each row of ``X``.

        Args:
            X: ``(N, D)`` inputs.
            alpha: the miss rate allowed, in ``(0, 1)``.

        Returns:
            ``lower`` and ``upper``, each ``(N, O)``.
        """
        q = self.quantile(alpha)
        mean, sd = self._moments(X)
        half = q.to(mean) * (sd if self.score == "normalized" else torch.ones_like(sd))
        return mean - half, mean + half
