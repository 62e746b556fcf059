"""``predict`` of the classic methods (:class:`~bnn_pyro.methods.classic.base.ClassicMethod`):
a Monte Carlo predictive over ``S`` draws of the method's posterior, streamed in blocks of rows,
and the check of its inputs against the shape the net expects."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

from bnn_pyro._checks import check_seed
from bnn_pyro._streaming import BLOCK_BUDGET, block_seed, stream_summary
from bnn_pyro.base import BaseBayesianMethod, PredictOutput, to_probabilities
from bnn_pyro.methods.classic.checks import check_inputs
from bnn_pyro.nn.batched import chunk_rows
from bnn_pyro.nn.inputs import InputSpec, input_spec, takes_indices

__all__ = ["ClassicPredictive"]


class ClassicPredictive(BaseBayesianMethod):
    """The predictive half of :class:`~bnn_pyro.methods.classic.base.ClassicMethod`: a subclass
    gives ``_sample_outputs`` (``S`` raw net outputs for seeded draws) and ``likelihood`` (its
    ``classifies`` decides whether ``predict`` returns probabilities by default)."""

    likelihood: Any
    _seen_input: tuple[int, ...] | None = None  # x.shape[1:] of the last fit that succeeded

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
        """Monte Carlo predictive over ``S`` samples of the method's posterior, vectorized.

        Args:
            x: ``(N, ...)`` inputs.
            return_samples: also return the samples.
            normalize_output: softmax multi-column outputs (see
                :func:`~bnn_pyro.base.to_probabilities`); ``None``: for a classifier only.
            num_samples: ``S`` (default: the constructor's ``num_samples``).
            seed: makes the draws reproducible without touching the global RNG.
            generator: the same through a ``torch.Generator`` (instead of ``seed``).
            **options: the method's own (``DeepEnsemble``: ``vectorize``).

        Returns:
            ``mean (N, O)``, ``variance (N, O)`` (epistemic) and, if asked,
            ``samples (S, N, O)``.

        Memory is bounded: the rows go in blocks reduced into buffers allocated once (see
        :mod:`bnn_pyro._streaming`); every block sees the same ``S`` draws (one seed for all).
        """
        x = self._check_x(x)
        num_samples = self._samples_to_draw(num_samples)
        seed = self._predict_seed(seed, generator)
        normalize = self._normalize(normalize_output)
        n = len(x)
        rows = chunk_rows(self, num_samples, BLOCK_BUDGET, self.device)
        if rows < n and seed is None:  # one seed for every block: the same posterior draws
            seed = int(torch.randint(0, 2**62, (1,)))

        def block(start: int, stop: int) -> tuple[torch.Tensor, None]:
            part = x if stop - start == n else x[start:stop]
            part_seed = block_seed(seed, start, self._row_wise_draws)
            out = self._sample_outputs(part, num_samples, part_seed, **options)
            return to_probabilities(out, normalize), None

        return stream_summary(n, rows, block, return_samples)

    _row_wise_draws = False  # draws per row (MC dropout's masks): a seed per block of rows

    def _check_draws(
        self, num_samples: int | None, seed: int | None, generator: torch.Generator | None
    ) -> None:
        """The sampled predictive's checks of its draws' arguments, for a closed form that
        draws nothing unless samples are asked for (Laplace's GLM, VBLL)."""
        self._samples_to_draw(num_samples)
        check_seed("seed", seed)
        if seed is not None and generator is not None:
            raise ValueError("pass seed or generator, not both")

    def _closed_form(
        self,
        x: torch.Tensor,
        moments: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
        rows: int,
        return_samples: bool,
        normalize_output: bool | None,
        draws: dict[str, Any],
    ) -> PredictOutput:
        """``predict`` in closed form (its arguments checked): ``moments(x_block)`` gives the
        mean and variance ``(n, O)`` of each block of ``rows`` rows (sharded under
        ``torch.distributed``); the samples, where asked for, drawn by the sampled predictive
        (:meth:`predict` with ``draws``), beside the closed form's mean and variance."""

        def block(start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
            mean, var = moments(x[start:stop])
            return mean.unsqueeze(0), var  # one "sample", its variance added: exactly (mean, var)

        mean, var = stream_summary(len(x), rows, block)
        if not return_samples:
            return mean, var
        return mean, var, ClassicPredictive.predict(self, x, True, normalize_output, **draws)[2]

    def _net(self) -> nn.Module | None:
        """The net whose layers fix the inputs (``self.model``; an ensemble's first member)."""
        return self._modules.get("model")

    def _input_spec(self) -> InputSpec | None:
        """The input shape the net expects: from its first layer (a linear/conv net or a
        ``Sequential`` starting with one), else the rows the last ``fit`` saw."""
        net = self._net()
        spec = input_spec(net) if net is not None else None
        if spec is None and self._seen_input is not None:
            spec = InputSpec.exact(self._seen_input)
        return spec

    def _check_x(self, x: Any, name: str = "x") -> torch.Tensor:
        """``x`` checked (:func:`~bnn_pyro.methods.classic.checks.check_inputs`: floating, or
        integer
        indices for a net with an ``nn.Embedding``) and its shape against :meth:`_input_spec`:
        a ``ValueError`` naming ``name`` with both shapes, before any vmap or matrix product.
        Returns ``x`` on the method's device, floating inputs in its dtype (inputs given on
        another device or in another precision are moved, as ``fit`` moves them)."""
        net = self._net()
        x = check_inputs(x, name, indices=net is not None and takes_indices(net))
        spec = self._input_spec()
        return self._placed(x if spec is None else spec.check(name, x))

    def _placed(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` on the method's device, a floating ``t`` in its dtype."""
        return t.to(self.device, self.dtype) if t.is_floating_point() else t.to(self.device)

    def _sample_outputs(self, x: torch.Tensor, num_samples: int, seed: int | None) -> torch.Tensor:
        """``(S, N, O)`` raw net outputs for ``S`` posterior samples (seeded draws)."""
        raise NotImplementedError

    def _normalize(self, normalize_output: bool | None) -> bool:
        """Softmax the samples? ``None``: for a classifier only (``True`` also
        softmaxes a multi-output regression, which is rarely what anyone wants)."""
        if normalize_output is None:
            return self.likelihood.classifies
        if not isinstance(normalize_output, bool):
            raise TypeError(
                f"normalize_output must be a bool or None, got {type(normalize_output).__name__}"
            )
        return normalize_output
