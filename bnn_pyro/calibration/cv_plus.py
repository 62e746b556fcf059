"""CV+ intervals (Barber, Candès, Ramdas & Tibshirani 2021): K models, each trained without one
fold of the rows, and the out-of-fold residuals of every row.

Split conformal spends rows on calibration that the model never trains on; CV+ uses every row
for both. Row ``i`` of fold ``k(i)`` has the residual ``R_i = |y_i - μ_{-k(i)}(x_i)|`` of the
model trained without its fold. At a new ``x`` the interval runs from the
``⌊alpha (n + 1)⌋``-th smallest of ``μ_{-k(i)}(x) - R_i`` to the ``⌈(1 - alpha)(n + 1)⌉``-th
smallest of ``μ_{-k(i)}(x) + R_i`` over the ``n`` rows. For exchangeable rows it holds a new
``y`` with probability at least ``1 - 2 alpha`` (in practice close to ``1 - alpha``); with
``K = n`` it is the jackknife+.

The K models train as one stacked run where the method stacks and the folds are of equal size
(:func:`~bnn_pyro.fit_stacked`), one after the other otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from bnn_pyro._checks import as_tensor, check_float, check_int, check_seed
from bnn_pyro.calibration.conformal import fewest_rows
from bnn_pyro.calibration.moments import predictive_moments
from bnn_pyro.exceptions import NotFittedError
from bnn_pyro.stacking import fit_stacked, why_not_stacked

__all__ = ["CVPlus"]


class CVPlus:
    """CV+ (or, with ``folds=n``, jackknife+) intervals around a regression method.

    Args:
        make_method: called with no argument, returns a new unfitted regression method; the
            K calls should build one architecture (to train stacked).
        folds: ``K >= 2``.
        seed: shuffles the rows into folds and seeds fold k's fit with ``seed + k``; ``None``:
            contiguous folds in row order (as scikit-learn's ``KFold()``), each fit unseeded.
        predict_options: passed to each model's ``predict`` (``num_samples``, ``seed``).
        **fit_options: passed to each fit (``epochs``, ``batch_size``, ``lr``, ...).

    Attributes:
        methods: the K fitted models (``[]`` before :meth:`fit`).
        stacked: whether they trained as one stacked run.

    Example:
        >>> import bnn_pyro as bp, torch.nn as nn
        >>> g = torch.Generator().manual_seed(0)
        >>> X = torch.randn(240, 1, generator=g); y = 2 * X[:, 0] + torch.randn(240, generator=g)
        >>> def make():
        ...     return bp.MCDropout(nn.Sequential(nn.Linear(1, 8), nn.Dropout(0.1),
        ...                                       nn.Linear(8, 1)), likelihood="regression")
        >>> cv = CVPlus(make, folds=4, seed=0, epochs=30, progress=False).fit(X[:200], y[:200])
        >>> lower, upper = cv.predict_interval(X[200:], alpha=0.1)
        >>> cv.stacked, lower.shape
        (True, torch.Size([40, 1]))
    """

    def __init__(
        self,
        make_method: Callable[[], Any],
        folds: int = 5,
        seed: int | None = 0,
        predict_options: dict[str, Any] | None = None,
        **fit_options: Any,
    ) -> None:
        if not callable(make_method):
            raise TypeError(f"make_method must be callable, got {type(make_method).__name__}")
        self.make_method = make_method
        self.folds = check_int("folds", folds, minimum=2)
        self.seed = check_seed("seed", seed)
        self.predict_options = dict(predict_options or {})
        self.fit_options = fit_options
        self.methods: list[Any] = []
        self.stacked = False
        self._fold_of: torch.Tensor | None = None
        self._residuals: torch.Tensor | None = None

    def fit(self, X: Any, y: Any) -> CVPlus:
        """Train the K models, each without its fold, and keep every row's out-of-fold
        residual.

        Args:
            X: ``(n, D)`` inputs, ``n >= folds``.
            y: ``(n,)`` or ``(n, O)`` targets.

        Returns:
            ``self``.
        """
        X = as_tensor("X", X, min_dim=2)
        y = as_tensor("y", y)
        n = len(X)
        if len(y) != n:
            raise ValueError(f"X and y must have the same rows, got {n} and {len(y)}")
        if n < self.folds:
            raise ValueError(f"CV+ needs at least folds={self.folds} rows, got {n}")
        order = torch.arange(n)
        if self.seed is not None:
            order = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed))
        fold_of = torch.empty(n, dtype=torch.long)
        sizes = [n // self.folds + (k < n % self.folds) for k in range(self.folds)]
        start = 0
        for k, size in enumerate(sizes):  # contiguous blocks of the order, as KFold does
            fold_of[order[start : start + size]] = k
            start += size
        self.methods = [self.make_method() for _ in range(self.folds)]
        seeds = [None if self.seed is None else self.seed + k for k in range(self.folds)]
        self.stacked = (
            len(set(sizes)) == 1 and self.seed is not None and why_not_stacked(self.methods) is None
        )
        if self.stacked:
            train = [torch.nonzero(fold_of != k).squeeze(-1) for k in range(self.folds)]
            xs, ys = torch.stack([X[i] for i in train]), torch.stack([y[i] for i in train])
            fit_stacked(self.methods, xs, ys, seeds=seeds, **self.fit_options)
        else:
            for k, method in enumerate(self.methods):
                keep = fold_of != k
                method.fit(X[keep], y[keep], seed=seeds[k], **self.fit_options)
        residuals = None
        for k, method in enumerate(self.methods):
            rows = fold_of == k
            mean, _ = predictive_moments(method, X[rows], **self.predict_options)
            yk = y[rows].to(mean)
            r = (yk.unsqueeze(-1) if yk.dim() == 1 else yk) - mean
            if residuals is None:
                residuals = mean.new_empty(n, mean.shape[-1])
            residuals[rows] = r.abs()
        self._fold_of, self._residuals = fold_of, residuals
        return self

    def predict_interval(self, X: Any, alpha: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
        """The CV+ interval of level ``1 - alpha`` at each row of ``X``.

        Args:
            X: ``(N, D)`` inputs.
            alpha: the miss rate aimed at, in ``(0, 1)`` (the guarantee is ``2 alpha``).

        Returns:
            ``lower`` and ``upper``, each ``(N, O)``.

        Raises:
            ValueError: ``alpha`` outside ``(0, 1)``, or too few rows for it.
        """
        alpha = check_float("alpha", alpha, minimum=0.0, strict=True, maximum=1.0)
        if self._residuals is None or self._fold_of is None:
            raise NotFittedError("CVPlus is not fitted: call fit() first")
        n = len(self._residuals)

        def ranks(rows: int) -> tuple[int, int]:
            return math.floor(alpha * (rows + 1)), math.ceil((1 - alpha) * (rows + 1))

        def enough(rows: int) -> bool:
            low, high = ranks(rows)
            return low >= 1 and high <= rows

        low_rank, high_rank = ranks(n)
        if not enough(n):
            raise ValueError(
                f"{n} rows are too few for alpha={alpha}: CV+ needs at least "
                f"{fewest_rows(alpha, enough)} (or a larger alpha)"
            )
        means = torch.stack(
            [predictive_moments(m, X, **self.predict_options)[0] for m in self.methods]
        )  # (K, N, O)
        per_row = means[self._fold_of.to(means.device)]  # (n, N, O): each row's own model
        r = self._residuals.to(means)[:, None, :]
        lower = (per_row - r).sort(dim=0).values[low_rank - 1]
        upper = (per_row + r).sort(dim=0).values[high_rank - 1]
        return lower, upper
