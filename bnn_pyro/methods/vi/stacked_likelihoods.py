"""Per-row log-likelihoods of K stacked nets (:mod:`bnn_pyro.methods.vi.stacked`): the sum over
a minibatch is the ELBO's data term, the rows one by one the black-box alpha energy's
(:mod:`bnn_pyro.methods.vi.stacked_alpha`). The density is the likelihood's own
(:meth:`~bnn_pyro.likelihoods.Likelihood.log_prob`); what this adds is each member's noise."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from bnn_pyro.likelihoods import NOISE_SITE

__all__ = ["row_log_likelihood"]


def row_log_likelihood(
    bnns: Sequence[Any], lik: Any, f: torch.Tensor, y: torch.Tensor, noise: torch.Tensor | None
) -> torch.Tensor:
    """``(K', B)``: each row's log-likelihood under each of ``K' = K * P`` stacked nets, ``f``
    ``(K', B, O)`` (member k's ``P`` draws consecutive), ``y`` ``(K', B, ...)``; ``noise``: a
    learned scale ``(K', O)``, else each member's fixed values
    (:meth:`~bnn_pyro.likelihoods.Likelihood.fixed_latents`, e.g. its own noise scale) are used.

    Example:
        >>> import bnn_pyro as bp
        >>> bnns = [bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(1.0)) for _ in range(2)]
        >>> f, y = torch.zeros(6, 5, 1), torch.zeros(6, 5, 1)  # K = 2 members x P = 3 draws
        >>> rows = row_log_likelihood(bnns, bnns[0].likelihood, f, y, None)
        >>> rows.shape, round(float(rows[0, 0]), 4)  # log N(0; 0, 1)
        (torch.Size([6, 5]), -0.9189)
    """
    k = f.shape[0]
    if noise is not None:
        latents = {NOISE_SITE: noise.view(k, 1, -1)}
    else:
        own = [b.likelihood.fixed_latents(f) for b in bnns]
        draws = k // len(bnns)
        latents = {
            name: torch.stack([values[name] for values in own])
            .repeat_interleave(draws, 0)
            .unsqueeze(1)  # (K', 1, ...): one value per stacked net, broadcast over the rows
            for name in own[0]
        }
    return lik.log_prob(f, y, latents)
