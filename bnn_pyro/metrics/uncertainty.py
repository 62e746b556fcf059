"""Uncertainty of classification predictions from ``(S, N, C)`` class-probability samples.

The total uncertainty of the predictive ``p(y | x) = 1/S sum_s p_s(y | x)`` splits into two
parts (Houlsby et al. 2011; Depeweg et al. 2018), all in nats::

    predictive_entropy  =  expected_entropy  +  mutual_information
    H[1/S sum_s p_s]       1/S sum_s H[p_s]     I(y; weights)  (BALD)
    total                  aleatoric            epistemic

The mutual information is the disagreement between the samples: 0 when all samples agree.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from bnn_pyro.metrics._validation import check_probs

__all__ = [
    "EntropyDecomposition",
    "entropy_decomposition",
    "expected_entropy",
    "mutual_information",
    "predictive_entropy",
]


def _entropy(probs: torch.Tensor) -> torch.Tensor:
    """Entropy over the last dimension with ``0 log 0 = 0``."""
    return -torch.special.xlogy(probs, probs).sum(dim=-1)


def _check(probs_samples: object) -> torch.Tensor:
    return check_probs(probs_samples, "probs_samples", ndim=3).double()


def predictive_entropy(probs_samples: torch.Tensor) -> torch.Tensor:
    """Entropy of the mean predictive distribution (total uncertainty), per point.

    Args:
        probs_samples: ``(S, N, C)`` class probabilities of each of the S samples (the
            ``samples`` of ``predict(x, return_samples=True)`` for a classifier).

    Returns:
        ``(N,)`` float64 tensor ``H[1/S sum_s probs_samples[s, n]]`` in nats.

    Raises:
        TypeError: if ``probs_samples`` is not a floating tensor.
        ValueError: if it is not ``(S, N, C)`` probabilities summing to 1 over ``C``.

    Example:
        >>> samples = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]])  # two confident, opposite
        >>> predictive_entropy(samples).tolist()  # log 2
        [0.6931471805599453]
    """
    return _entropy(_check(probs_samples).mean(dim=0))


def expected_entropy(probs_samples: torch.Tensor) -> torch.Tensor:
    """Mean over samples of each sample's entropy (aleatoric uncertainty), per point.

    Args:
        probs_samples: ``(S, N, C)`` class-probability samples.

    Returns:
        ``(N,)`` float64 tensor ``1/S sum_s H[probs_samples[s, n]]`` in nats.

    Example:
        >>> samples = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]])
        >>> expected_entropy(samples).tolist()  # every sample is certain
        [0.0]
    """
    return _entropy(_check(probs_samples)).mean(dim=0)


def mutual_information(probs_samples: torch.Tensor) -> torch.Tensor:
    """Mutual information between label and weights, BALD (epistemic uncertainty), per point.

    ``predictive_entropy - expected_entropy``; it is never negative in exact arithmetic, so
    rounding errors below 0 are clipped to 0.

    Args:
        probs_samples: ``(S, N, C)`` class-probability samples.

    Returns:
        ``(N,)`` float64 tensor in nats, between 0 and ``log C``.

    Example:
        >>> samples = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]])
        >>> mutual_information(samples).tolist()  # all of the uncertainty is disagreement
        [0.6931471805599453]
    """
    return entropy_decomposition(probs_samples).epistemic


class EntropyDecomposition(NamedTuple):
    """Result of :func:`entropy_decomposition`, each an ``(N,)`` tensor in nats.

    Attributes:
        total: predictive entropy.
        aleatoric: expected entropy.
        epistemic: mutual information (``total - aleatoric``, clipped at 0).

    Example:
        >>> probs = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]])  # (S=2, N=1, C=2): sure, opposite
        >>> parts = entropy_decomposition(probs)
        >>> [round(float(p), 4) for p in parts]  # total log 2, all epistemic
        [0.6931, 0.0, 0.6931]
    """

    total: torch.Tensor
    aleatoric: torch.Tensor
    epistemic: torch.Tensor


def entropy_decomposition(probs_samples: torch.Tensor) -> EntropyDecomposition:
    """Total, aleatoric and epistemic uncertainty per point in one pass.

    Args:
        probs_samples: ``(S, N, C)`` class-probability samples.

    Returns:
        :class:`EntropyDecomposition` ``(total, aleatoric, epistemic)``, each ``(N,)``.

    Example:
        >>> samples = torch.tensor([[[0.5, 0.5]], [[0.5, 0.5]]])  # samples agree: no epistemic
        >>> parts = entropy_decomposition(samples)
        >>> round(parts.total.item(), 6), round(parts.aleatoric.item(), 6), parts.epistemic.item()
        (0.693147, 0.693147, 0.0)
    """
    probs = _check(probs_samples)
    total = _entropy(probs.mean(dim=0))
    aleatoric = _entropy(probs).mean(dim=0)
    return EntropyDecomposition(total, aleatoric, (total - aleatoric).clamp_min(0.0))
