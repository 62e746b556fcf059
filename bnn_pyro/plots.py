"""Matplotlib figures: predictive bands, reliability diagram, regression calibration.

Every function draws on ``ax`` (a new figure when ``None``) and returns that ``Axes``; the figure
is ``ax.figure``. Nothing here calls ``plt.show()``. Artists carry ``gid``\\ s and labels
(``"predictive_mean"``, ``"band_1sigma"``, ...) so code and tests can find the data they show.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from bnn_pyro.metrics import expected_calibration_error, regression_calibration, reliability_curve

if TYPE_CHECKING:  # matplotlib is imported where a figure is drawn (about a second)
    from matplotlib.axes import Axes

__all__ = [
    "plot_predictive_1d",
    "get_axes",
    "plot_regression_calibration",
    "plot_reliability_diagram",
]


def get_axes(ax: object = None) -> Axes:
    """``ax``, or the axes of a new figure when ``None`` (every plot here takes ``ax=``).

    Raises:
        TypeError: ``ax`` is neither a matplotlib ``Axes`` nor ``None``.

    Example:
        >>> ax = get_axes()
        >>> get_axes(ax) is ax
        True
        >>> import matplotlib.pyplot as plt; plt.close(ax.figure)
    """
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots()
        return ax
    from matplotlib.axes import Axes  # here: importing matplotlib costs about a second

    if not isinstance(ax, Axes):
        raise TypeError(f"ax must be a matplotlib Axes or None, got {type(ax).__name__}")
    return ax


def _column(value: object, name: str, n: int | None = None) -> np.ndarray:
    """``(N,)`` or ``(N, 1)`` tensor/array as a float64 ``(N,)`` array."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().double().numpy()
    elif not isinstance(value, np.ndarray):
        raise TypeError(f"{name} must be a torch.Tensor or numpy array, got {type(value).__name__}")
    if not (value.ndim == 1 or (value.ndim == 2 and value.shape[1] == 1)):
        raise ValueError(f"{name} must have shape (N,) or (N, 1), got {value.shape}")
    value = value.reshape(-1).astype(np.float64)
    if n is not None and value.shape[0] != n:
        raise ValueError(f"{name} must have {n} entries to match x, got {value.shape[0]}")
    if not np.isfinite(value).all():
        raise ValueError(f"{name} must be finite")
    return value


def plot_predictive_1d(
    x: torch.Tensor,
    mean: torch.Tensor,
    std: torch.Tensor,
    x_train: torch.Tensor | None = None,
    y_train: torch.Tensor | None = None,
    ax: Axes | None = None,
    title: str | None = None,
    noise_std: torch.Tensor | float | None = None,
    legend: bool = True,
) -> Axes:
    """Predictive mean with ±1σ and ±2σ bands over a 1-D input, and the training points.

    Without ``noise_std`` the bands show ``std`` as given (e.g. the epistemic ``sqrt(variance)``
    of ``predict``). With ``noise_std`` they show the total predictive std
    ``sqrt(std^2 + noise_std^2)``, where new observations are expected, and the epistemic
    ``mean ± 2 std`` is drawn as dashed lines.

    Args:
        x: ``(N,)`` or ``(N, 1)`` inputs (any order; sorted for drawing).
        mean: ``(N,)`` or ``(N, 1)`` predictive mean.
        std: ``(N,)`` or ``(N, 1)`` predictive standard deviation, ``>= 0``.
        x_train: optional ``(M,)`` or ``(M, 1)`` training inputs, drawn as points.
        y_train: ``(M,)`` or ``(M, 1)`` training targets; needed with ``x_train``.
        ax: axes to draw on; a new figure when ``None``.
        title: optional axes title.
        noise_std: optional observation noise std, a float or ``(N,)``/``(N, 1)``.
        legend: draw the legend (switch it off for small multiples).

    Returns:
        The ``Axes``. Its artists: line ``"predictive_mean"``, bands ``"band_1sigma"`` and
        ``"band_2sigma"``, points ``"train"``, dashed ``"epistemic_2sigma_lower"``/``"_upper"``.

    Raises:
        TypeError: if an input is not a tensor/array or ``ax`` not an ``Axes``.
        ValueError: on mismatched lengths, negative std, or only one of ``x_train``/``y_train``.

    Example:
        >>> x = torch.linspace(-3, 3, 50)
        >>> ax = plot_predictive_1d(x, torch.sin(x), 0.1 + x.abs() / 10, title="toy")
        >>> ax.get_title(), len(ax.lines)
        ('toy', 1)
        >>> import matplotlib.pyplot as plt; plt.close(ax.figure)
    """
    xs = _column(x, "x")
    n = xs.shape[0]
    mu, sd = _column(mean, "mean", n), _column(std, "std", n)
    if (sd < 0).any():
        raise ValueError("std must be >= 0 (a standard deviation, not a variance or log)")
    if (x_train is None) != (y_train is None):
        raise ValueError("pass both x_train and y_train, or neither")
    if x_train is not None:
        xt = _column(x_train, "x_train")
        yt = _column(y_train, "y_train", xt.shape[0])
    if noise_std is not None:
        if isinstance(noise_std, (float, int)) and not isinstance(noise_std, bool):
            noise = np.full(n, float(noise_std))
        else:
            noise = _column(noise_std, "noise_std", n)
        if not np.isfinite(noise).all() or (noise < 0).any():
            raise ValueError("noise_std must be finite and >= 0")
    ax = get_axes(ax)

    order = np.argsort(xs, kind="stable")
    xs, mu, sd = xs[order], mu[order], sd[order]
    total = sd if noise_std is None else np.sqrt(sd**2 + noise[order] ** 2)
    suffix = "" if noise_std is None else " (total)"
    for k, alpha in ((2, 0.2), (1, 0.35)):
        band = ax.fill_between(
            xs,
            mu - k * total,
            mu + k * total,
            color="C0",
            alpha=alpha,
            lw=0,
            label=f"±{k}σ{suffix}",
        )
        band.set_gid(f"band_{k}sigma")
    if noise_std is not None:
        for side, sign in (("lower", -1), ("upper", 1)):
            (line,) = ax.plot(xs, mu + sign * 2 * sd, "--", color="C0", lw=1)
            line.set_gid(f"epistemic_2sigma_{side}")
            if side == "lower":
                line.set_label("±2σ (epistemic)")
    (line,) = ax.plot(xs, mu, color="C0", lw=2, label="predictive mean")
    line.set_gid("predictive_mean")
    if x_train is not None:
        points = ax.scatter(xt, yt, s=12, color="k", zorder=3, label="training data")
        points.set_gid("train")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    if title is not None:
        ax.set_title(title)
    if legend:
        ax.legend(loc="best", fontsize="small")
    return ax


def plot_reliability_diagram(
    probs: torch.Tensor, labels: torch.Tensor, n_bins: int = 15, ax: Axes | None = None
) -> Axes:
    """Reliability diagram: accuracy per confidence bin against the diagonal, with the ECE.

    Bars stand on the non-empty bins of :func:`bnn_pyro.metrics.reliability_curve` (left edge
    at ``b / n_bins``, width ``1 / n_bins``, height the bin's accuracy); the dots mark each
    bin's mean confidence, so a dot above its bar is over-confidence.

    Args:
        probs: ``(N, C)`` predictive probabilities.
        labels: ``(N,)`` integer labels.
        n_bins: number of equal-width confidence bins.
        ax: axes to draw on; a new figure when ``None``.

    Returns:
        The ``Axes``: a bar container labelled ``"accuracy"``, a line ``"confidence"`` (dots)
        and a line ``"diagonal"``; the title reports the ECE.

    Raises:
        TypeError, ValueError: as :func:`bnn_pyro.metrics.reliability_curve`.

    Example:
        >>> probs = torch.tensor([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
        >>> ax = plot_reliability_diagram(probs, torch.tensor([0, 1, 1]), n_bins=5)
        >>> ax.get_title()
        'Reliability diagram (ECE = 0.3333)'
        >>> import matplotlib.pyplot as plt; plt.close(ax.figure)
    """
    with torch.no_grad():  # probabilities that require grad are fine to plot
        curve = reliability_curve(probs, labels, n_bins=n_bins)
        ece = expected_calibration_error(probs, labels, n_bins=n_bins)
    ax = get_axes(ax)
    filled = (curve.counts > 0).numpy()
    lefts = np.arange(n_bins)[filled] / n_bins
    ax.bar(
        lefts,
        curve.accuracies.numpy()[filled],
        width=1.0 / n_bins,
        align="edge",
        edgecolor="k",
        color="C0",
        label="accuracy",
    )
    (dots,) = ax.plot(
        lefts + 0.5 / n_bins, curve.confidences.numpy()[filled], "o", color="C3", label="confidence"
    )
    dots.set_gid("confidence")
    return _calibration_frame(
        ax, "confidence", "accuracy", f"Reliability diagram (ECE = {ece:.4f})"
    )


def plot_regression_calibration(
    locs: torch.Tensor,
    scales: torch.Tensor | float,
    y: torch.Tensor,
    ax: Axes | None = None,
    levels: torch.Tensor | None = None,
) -> Axes:
    """Observed coverage of the central predictive intervals against their nominal level.

    Args:
        locs: ``(S, N)`` or ``(S, N, O)`` per-sample predictive means.
        scales: positive noise stds, a float or broadcastable to ``locs``.
        y: ``(N)`` or ``(N, O)`` targets.
        ax: axes to draw on; a new figure when ``None``.
        levels: ``(L,)`` nominal levels; default ``0.05, ..., 0.95``.

    Returns:
        The ``Axes``: line ``"coverage"`` (x = levels, y = observed coverage) and line
        ``"diagonal"``; the title reports the calibration error.

    Raises:
        TypeError, ValueError: as :func:`bnn_pyro.metrics.regression_calibration`.

    Example:
        >>> y = torch.randn(200, generator=torch.Generator().manual_seed(0))
        >>> ax = plot_regression_calibration(torch.zeros(1, 200), 1.0, y)
        >>> len(ax.lines[0].get_xdata())
        19
        >>> import matplotlib.pyplot as plt; plt.close(ax.figure)
    """
    with torch.no_grad():
        result = regression_calibration(locs, scales, y, levels)
    ax = get_axes(ax)
    (line,) = ax.plot(
        result.levels.double().numpy(), result.coverage.double().numpy(), "o-", label="model"
    )
    line.set_gid("coverage")
    return _calibration_frame(
        ax,
        "nominal level",
        "observed coverage",
        f"Interval calibration (error = {result.error:.4f})",
    )


def _calibration_frame(ax: Axes, xlabel: str, ylabel: str, title: str) -> Axes:
    """The unit square of a calibration plot: the diagonal (gid ``"diagonal"``), labels, title."""
    (diag,) = ax.plot([0, 1], [0, 1], "--", color="gray", label="perfect calibration")
    diag.set_gid("diagonal")
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel=xlabel, ylabel=ylabel)
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize="small")
    return ax
