"""Scores of classification predictions: NLL, accuracy, Brier score, ECE, reliability curve.

All take ``probs`` of shape ``(N, C)``: the predictive class probabilities, i.e. the ``mean``
of ``predict`` for a classifier (the average of the per-sample softmax outputs), and integer
``labels`` of shape ``(N,)``. For a binary model returning ``p = P(y = 1)`` pass
``torch.stack([1 - p, p], dim=-1)``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from bnn_pyro.metrics._validation import check_labels, check_n_bins, check_probs

__all__ = [
    "ReliabilityCurve",
    "accuracy",
    "brier_score",
    "expected_calibration_error",
    "nll",
    "reliability_curve",
]


def _checked(probs: object, labels: object) -> tuple[torch.Tensor, torch.Tensor]:
    probs = check_probs(probs, "probs", ndim=2)
    labels = check_labels(labels, probs.shape[0], probs.shape[1])
    return probs, labels


def nll(probs: torch.Tensor, labels: torch.Tensor, eps: float = 1e-12) -> float:
    """Mean negative log-likelihood (log loss, cross-entropy) of the true labels, in nats.

    Args:
        probs: ``(N, C)`` predictive probabilities.
        labels: ``(N,)`` integer labels in ``[0, C)``.
        eps: probabilities are clipped to at least ``eps`` so one confidently wrong point costs
            ``-log(eps)`` (27.6 nats by default) instead of making the mean infinite.

    Returns:
        ``-1/N sum_n log probs[n, labels[n]]`` as a float.

    Raises:
        TypeError: if ``probs`` is not a floating tensor or ``labels`` not an integer tensor.
        ValueError: on bad shapes, probabilities outside ``[0, 1]`` or rows not summing to 1,
            labels out of range, or ``eps`` outside ``(0, 1)``.

    Example:
        >>> probs = torch.tensor([[0.5, 0.5], [0.25, 0.75]])
        >>> round(nll(probs, torch.tensor([0, 1])), 6)  # -(log 0.5 + log 0.75) / 2
        0.490415
    """
    if isinstance(eps, bool) or not isinstance(eps, (float, int)) or not 0 < eps < 1:
        raise ValueError(f"eps must be a float in (0, 1), got {eps!r}")
    probs, labels = _checked(probs, labels)
    picked = probs.double().gather(1, labels.long()[:, None]).squeeze(1)
    return -picked.clamp_min(eps).log().mean().item()


def accuracy(probs: torch.Tensor, labels: torch.Tensor) -> float:
    """Fraction of points whose most probable class (first one on ties) is the label.

    Args:
        probs: ``(N, C)`` predictive probabilities.
        labels: ``(N,)`` integer labels in ``[0, C)``.

    Returns:
        The accuracy in ``[0, 1]`` as a float.

    Example:
        >>> accuracy(torch.tensor([[0.9, 0.1], [0.4, 0.6]]), torch.tensor([0, 0]))
        0.5
    """
    probs, labels = _checked(probs, labels)
    return (probs.argmax(dim=1) == labels).double().mean().item()


def brier_score(probs: torch.Tensor, labels: torch.Tensor) -> float:
    """Multi-class Brier score ``1/N sum_n sum_c (probs[n, c] - 1{labels[n] = c})^2``.

    This is Brier's original definition, in ``[0, 2]`` (lower is better). For two classes it is
    twice the binary form ``mean (p - y)^2`` (scikit-learn's ``brier_score_loss`` with
    ``scale_by_half=True``).

    Args:
        probs: ``(N, C)`` predictive probabilities.
        labels: ``(N,)`` integer labels in ``[0, C)``.

    Returns:
        The Brier score as a float.

    Example:
        >>> brier_score(torch.tensor([[0.75, 0.25]]), torch.tensor([0]))  # 0.25^2 + 0.25^2
        0.125
    """
    probs, labels = _checked(probs, labels)
    onehot = torch.nn.functional.one_hot(labels.long(), probs.shape[1]).double()
    return (probs.double() - onehot).square().sum(dim=1).mean().item()


class ReliabilityCurve(NamedTuple):
    """Result of :func:`reliability_curve`, one entry per confidence bin.

    Bin ``b`` holds the points whose confidence lies in ``(b / B, (b + 1) / B]`` (the first bin
    also holds confidence 0). Empty bins have ``NaN`` confidence and accuracy and count 0.

    Attributes:
        confidences: ``(B,)`` mean confidence (top-class probability) of the points in the bin.
        accuracies: ``(B,)`` fraction of those points classified correctly.
        counts: ``(B,)`` number of points in the bin (int64).

    Example:
        >>> probs = torch.tensor([[0.9, 0.1], [0.2, 0.8]])
        >>> curve = reliability_curve(probs, torch.tensor([0, 0]), n_bins=2)
        >>> curve.counts.tolist()
        [0, 2]
    """

    confidences: torch.Tensor
    accuracies: torch.Tensor
    counts: torch.Tensor


def reliability_curve(
    probs: torch.Tensor, labels: torch.Tensor, n_bins: int = 15
) -> ReliabilityCurve:
    """Confidence and accuracy per equal-width confidence bin (the reliability diagram's data).

    Args:
        probs: ``(N, C)`` predictive probabilities.
        labels: ``(N,)`` integer labels in ``[0, C)``.
        n_bins: number ``B`` of equal-width bins on ``[0, 1]``.

    Returns:
        :class:`ReliabilityCurve` ``(confidences, accuracies, counts)``, float64/int64 tensors
        of shape ``(B,)``.

    Raises:
        TypeError: if an argument has the wrong type (``n_bins`` must be an int).
        ValueError: on bad probabilities or labels, or ``n_bins < 1``.

    Example:
        >>> probs = torch.tensor([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
        >>> curve = reliability_curve(probs, torch.tensor([0, 1, 1]), n_bins=2)
        >>> curve.counts.tolist(), curve.accuracies.tolist()
        ([0, 3], [nan, 0.6666666666666666])
    """
    n_bins = check_n_bins(n_bins)
    probs, labels = _checked(probs, labels)
    confidence, predicted = probs.double().max(dim=1)
    correct = (predicted == labels).double()
    f64 = {"dtype": torch.float64, "device": probs.device}
    inner_edges = torch.linspace(0.0, 1.0, n_bins + 1, **f64)[1:-1]
    bins = torch.bucketize(confidence, inner_edges)  # bin b holds (edge_b, edge_{b+1}]
    counts = torch.bincount(bins, minlength=n_bins)
    conf_sum = torch.zeros(n_bins, **f64).index_add_(0, bins, confidence)
    correct_sum = torch.zeros(n_bins, **f64).index_add_(0, bins, correct)
    denom = counts.double()
    nan = torch.full_like(denom, math.nan)
    conf = torch.where(counts > 0, conf_sum / denom.clamp_min(1), nan)
    acc = torch.where(counts > 0, correct_sum / denom.clamp_min(1), nan)
    return ReliabilityCurve(conf, acc, counts)


def expected_calibration_error(
    probs: torch.Tensor, labels: torch.Tensor, n_bins: int = 15
) -> float:
    """Expected calibration error ``sum_b (n_b / N) |accuracy_b - confidence_b|``.

    Uses the equal-width top-class bins of :func:`reliability_curve` (Guo et al. 2017);
    empty bins contribute nothing.

    Args:
        probs: ``(N, C)`` predictive probabilities.
        labels: ``(N,)`` integer labels in ``[0, C)``.
        n_bins: number of equal-width confidence bins.

    Returns:
        The ECE in ``[0, 1]`` as a float.

    Example:
        >>> probs = torch.tensor([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
        >>> round(expected_calibration_error(probs, torch.tensor([0, 1, 1]), n_bins=2), 6)
        0.133333
    """
    curve = reliability_curve(probs, labels, n_bins=n_bins)
    weights = curve.counts.double() / curve.counts.sum()
    gaps = (curve.accuracies - curve.confidences).abs()
    return (weights * torch.nan_to_num(gaps, nan=0.0)).sum().item()
