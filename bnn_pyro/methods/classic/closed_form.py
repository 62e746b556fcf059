"""``ClosedFormPredictive``: ``predict`` for a method that knows the posterior mean and variance
of its outputs in closed form (VBLL, SNGP, DKL): one pass over the rows, no draws unless
samples are asked for, and the Gaussian predictive of a regression's ``y``."""

from __future__ import annotations

from typing import Any

import torch

from bnn_pyro.base import PredictOutput
from bnn_pyro.methods.classic.predictive import ClassicPredictive

__all__ = ["ClosedFormPredictive"]

Moments = tuple[torch.Tensor, torch.Tensor]


class ClosedFormPredictive(ClassicPredictive):
    """The predictive half of a closed-form method. A subclass gives ``_moments(x)`` (the
    outputs' mean and variance ``(n, O)`` for checked inputs, the net in eval mode),
    ``_sample_outputs`` (draws, for ``return_samples`` and a sampled softmax), ``_last()``
    (the net's last ``nn.Linear``: ``O`` is its width) and ``_noise_std()`` (a
    regression's ``σ``); and, where the class probabilities have a closed form,
    ``_softmax_moments`` with ``_closed_softmax = True``."""

    #: Rows per block of the closed form.
    _closed_rows = 2048
    #: The class probabilities in closed form (``_softmax_moments``), not sampled?
    _closed_softmax = False

    def _moments(self, x: torch.Tensor) -> Moments:
        raise NotImplementedError

    def _noise_std(self) -> float | torch.Tensor:
        raise NotImplementedError

    def _softmax_moments(self, mean: torch.Tensor, var: torch.Tensor) -> Moments:
        """The class probabilities' mean and variance from the logits' ``(mean, var)``
        (where ``_closed_softmax``)."""
        raise NotImplementedError

    def output_moments(self, x: torch.Tensor) -> Moments:
        """The closed-form posterior mean and variance ``(N, O)`` of the net's outputs (a
        classifier's logits) at ``x``, the net in eval mode.

        Args:
            x: ``(N, ...)`` inputs.

        Returns:
            ``mean (N, O)`` and ``variance (N, O)``.

        Example:
            >>> import bnn_pyro as bp
            >>> m = bp.VBLL(bp.nn.mlp(2, [4], 1), "regression")
            >>> [t.shape for t in m.output_moments(torch.randn(3, 2))]
            [torch.Size([3, 1]), torch.Size([3, 1])]
        """
        return self._moments(self._check_x(x))

    @torch.no_grad()
    def predict(
        self,
        x: torch.Tensor,
        return_samples: bool = False,
        normalize_output: bool | None = None,
        *,
        num_samples: int | None = None,
        seed: int | None = None,
        generator: torch.Generator | None = None,
        **options: Any,
    ) -> PredictOutput:
        """The predictive at ``x``: the outputs' closed-form mean and variance in one pass;
        where the outputs are softmaxed, the class probabilities' closed form where the method
        has one (SNGP's mean-field probit), else the mean and variance of ``S`` sampled
        probability vectors.

        Args:
            x: ``(N, ...)`` inputs.
            return_samples: also return ``S`` samples (the outputs for ``S`` posterior draws,
                softmaxed where the outputs are), beside the closed form's mean and variance.
            normalize_output: softmax multi-column outputs; ``None``: for a classifier only.
            num_samples: ``S`` (default: the constructor's ``num_samples``).
            seed: makes the draws reproducible without touching the global RNG.
            generator: the same through a ``torch.Generator`` (instead of ``seed``).
            **options: none (an unknown one is refused).

        Returns:
            ``mean (N, O)``, ``variance (N, O)`` (epistemic: add the noise variance for a
            regression's ``y``, or use :meth:`predictive_gaussian`) and, if asked,
            ``samples (S, N, O)``.

        Example:
            >>> import bnn_pyro as bp
            >>> m = bp.SNGP(bp.nn.mlp(2, [4], 3), bp.Categorical(), num_features=16)
            >>> mean, var, samples = m.predict(torch.randn(5, 2), return_samples=True,
            ...                                num_samples=8, seed=0)
            >>> samples.shape, torch.allclose(mean.sum(-1), torch.ones(5))
            (torch.Size([8, 5, 3]), True)
        """
        if options:
            raise TypeError(f"{type(self).__name__}.predict got unknown options {sorted(options)}")
        draws = {"num_samples": num_samples, "seed": seed, "generator": generator}
        x = self._check_x(x)
        self._check_draws(num_samples, seed, generator)
        moments = self._moments
        if self._normalize(normalize_output) and self._last().out_features > 1:
            if not self._closed_softmax:
                return super().predict(x, return_samples, normalize_output, **draws)

            def moments(part: torch.Tensor) -> Moments:
                return self._softmax_moments(*self._moments(part))

        return self._closed_form(
            x, moments, self._closed_rows, return_samples, normalize_output, draws
        )

    def predictive_gaussian(self, x: torch.Tensor, **kwargs: Any) -> Moments:
        """The Gaussian predictive of a regression's ``y``, ``N(mean(x), var(x) + σ²)``, exact
        for the method's closed form, as a mixture of one component.

        Args:
            x: ``(N, ...)`` inputs.
            **kwargs: passed to :meth:`predict` (checked; the closed form draws nothing).

        Returns:
            ``locs (1, N, O)`` and ``scales (1, N, O)``.

        Raises:
            NotImplementedError: for a classifier.

        Example:
            >>> import bnn_pyro as bp
            >>> m = bp.VBLL(bp.nn.mlp(2, [4], 1), bp.Gaussian(scale=0.5))
            >>> locs, scales = m.predictive_gaussian(torch.randn(3, 2))
            >>> locs.shape, bool((scales > 0.5).all())
            (torch.Size([1, 3, 1]), True)
        """
        if self.likelihood.classifies:
            raise NotImplementedError(
                f"predictive_gaussian is a regression's predictive of y, and this "
                f"{type(self).__name__} classifies: use predict"
            )
        mean, var = self.predict(x, **kwargs)
        noise = torch.as_tensor(self._noise_std(), dtype=mean.dtype, device=mean.device)
        return mean.unsqueeze(0), (var + noise**2).sqrt().unsqueeze(0)
