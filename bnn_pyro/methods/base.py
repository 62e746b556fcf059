"""The one prediction contract that every method in bnn_pyro answers.

``mean, variance = method.predict(x)`` and
``mean, variance, samples = method.predict(x, return_samples=True)`` with ``samples`` of shape
``(S, N, ...)``. The variance is the *epistemic* part: the spread of the S predictive samples.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
import torch.nn as nn

__all__ = ["BaseBayesianMethod", "PredictOutput", "summarize_samples", "to_probabilities"]

_NO_NOISE = (
    "{cls} has no observation noise: set `noise_scale` (the Gaussian noise standard deviation, "
    "a float or a tensor broadcastable to (S, N, O)) or use a Gaussian-likelihood regression model"
)

PredictOutput = tuple[torch.Tensor, torch.Tensor] | tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def to_probabilities(outputs: torch.Tensor, normalize_output: bool = True) -> torch.Tensor:
    """Apply a softmax to multi-column logits, as the seed methods library does.

    Args:
        outputs: ``(S, N, C)`` per-sample network outputs, or ``(S, N)`` / ``(S, N, 1)``.
        normalize_output: when True and the per-sample output is 2-D with more than one column
            (``outputs.dim() == 3 and C > 1``), the columns are treated as logits and turned into
            probabilities with a softmax over the last dimension. Otherwise returned unchanged.

    Returns:
        Tensor of the same shape as ``outputs``.

    Example:
        >>> p = to_probabilities(torch.zeros(2, 3, 4))
        >>> bool(torch.allclose(p, torch.full((2, 3, 4), 0.25)))
        True
    """
    if not isinstance(outputs, torch.Tensor):
        raise TypeError(f"outputs must be a torch.Tensor, got {type(outputs).__name__}")
    if normalize_output and outputs.dim() == 3 and outputs.size(-1) > 1:
        return torch.softmax(outputs, dim=-1)
    return outputs


def summarize_samples(samples: torch.Tensor, return_samples: bool = False) -> PredictOutput:
    """Reduce predictive samples to ``(mean, variance[, samples])``.

    The variance is the population variance over the sample dimension (``correction=0``): it is
    the variance of the equally weighted mixture of the samples, it is 0 (not NaN) for S = 1, and
    it is never negative.

    Args:
        samples: ``(S, N, ...)`` predictive samples.
        return_samples: also return ``samples`` as the third element.

    Returns:
        ``mean`` ``(N, ...)``, ``variance`` ``(N, ...)`` and, if asked, ``samples`` ``(S, N, ...)``.

    Example:
        >>> m, v = summarize_samples(torch.tensor([[1.0], [3.0]]))
        >>> m.tolist(), v.tolist()
        ([2.0], [1.0])
    """
    if not isinstance(samples, torch.Tensor):
        raise TypeError(f"samples must be a torch.Tensor, got {type(samples).__name__}")
    if samples.dim() < 2:
        raise ValueError(f"samples must have shape (S, N, ...), got shape {tuple(samples.shape)}")
    # Two passes over the data shifted by the first sample: as stable as torch.var, exactly 0
    # for identical samples, and 15-40x faster on a CPU, where torch.var over the leading dim
    # runs an unvectorized Welford reduction.
    shifted = samples - samples[0]
    offset = shifted.mean(dim=0)
    mean = samples[0] + offset
    variance = (shifted - offset).square().mean(dim=0)
    if return_samples:
        return mean, variance, samples
    return mean, variance


class BaseBayesianMethod(nn.Module, ABC):
    """Abstract base class of every uncertainty method in bnn_pyro.

    Subclasses implement :meth:`predict`, returning ``(mean, variance)`` or, with
    ``return_samples=True``, ``(mean, variance, samples)`` where ``samples`` has shape
    ``(S, N, ...)``. For a net whose per-sample output is ``(N, C)`` with ``C > 1``, the samples
    are softmax probabilities unless ``normalize_output=False``. The variance is epistemic: the
    disagreement between the S samples (see :func:`summarize_samples`).

    Example:
        >>> from bnn_pyro.methods import MCDropout
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(2, 8), nn.Dropout(0.2), nn.Linear(8, 1))
        >>> method: BaseBayesianMethod = MCDropout(net, num_samples=4)
        >>> mean, variance, samples = method.predict(torch.randn(3, 2), return_samples=True)
        >>> samples.shape
        torch.Size([4, 3, 1])
    """

    @abstractmethod
    def predict(
        self, x: torch.Tensor, return_samples: bool = False, **kwargs: object
    ) -> PredictOutput:
        """Predict with uncertainty.

        Args:
            x: ``(N, ...)`` inputs.
            return_samples: also return the ``(S, N, ...)`` samples.

        Returns:
            ``(mean, variance)`` or ``(mean, variance, samples)``.
        """

    def predictive_gaussian(
        self, x: torch.Tensor, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The Gaussian predictive of a regression model as a mixture over samples.

        The predictive density of ``y`` at ``x`` is ``1/S sum_s Normal(y; locs[s], scales[s])``.
        ``locs`` are samples of the mean function (epistemic), ``scales`` the observation noise
        standard deviation of each sample (aleatoric). This is what the Gaussian test
        log-likelihood and CRPS in :mod:`bnn_pyro.metrics` consume.

        The default uses ``self.noise_scale`` (homoscedastic noise); heteroscedastic models
        override it.

        Args:
            x: ``(N, D)`` inputs.
            **kwargs: passed to :meth:`predict`.

        Returns:
            ``locs`` ``(S, N, O)`` and ``scales`` broadcastable to ``(S, N, O)``.
        """
        noise_scale = getattr(self, "noise_scale", None)
        if noise_scale is None:
            raise NotImplementedError(_NO_NOISE.format(cls=type(self).__name__))
        _, _, locs = self.predict(x, return_samples=True, normalize_output=False, **kwargs)
        scales = torch.as_tensor(noise_scale, dtype=locs.dtype, device=locs.device)
        if bool((scales <= 0).any()):
            raise ValueError(f"noise_scale must be positive, got {noise_scale}")
        return locs, scales
