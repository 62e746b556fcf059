"""Per-row log-likelihoods of K stacked nets (:mod:`bnn_pyro.methods.vi.stacked`): the sum over
a minibatch is the ELBO's data term, the rows one by one the black-box alpha energy's
(:mod:`bnn_pyro.methods.vi.objective`). The density is the likelihood's own
(:meth:`~bnn_pyro.likelihoods.Likelihood.log_prob`); what this adds is each member's noise."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from bnn_pyro.likelihoods import NOISE_SITE

__all__ = ["row_log_likelihood"]


def row_log_likelihood(
    bnns: Sequence[Any],
    lik: Any,
    f: torch.Tensor,
    y: torch.Tensor,
    noise: torch.Tensor | None,
    cache: dict[tuple, dict[str, torch.Tensor]] | None = None,
) -> torch.Tensor:
    """``(K', B)``: each row's log-likelihood under each of ``K' = K * P`` stacked nets, ``f``
    ``(K', B, O)`` (member k's ``P`` draws consecutive), ``y`` ``(K', B, ...)``; ``noise``: a
    learned scale ``(K', O)``, else each member's fixed values
    (:meth:`~bnn_pyro.likelihoods.Likelihood.fixed_latents`, e.g. its own noise scale) are used,
    stacked once per ``(K', O, dtype, device)`` into ``cache`` where one is given (a fit keeps
    one: the members' fixed values do not change while it runs, and stacking K of them each
    step costs more than the density itself).

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
        key = (k, f.shape[-1], f.dtype, f.device)
        latents = None if cache is None else cache.get(key)
        if latents is None:
            latents = _stacked_fixed_latents(bnns, f)
            if cache is not None:
                cache[key] = latents
    return lik.log_prob(f, y, latents)


def _stacked_fixed_latents(bnns: Sequence[Any], f: torch.Tensor) -> dict[str, torch.Tensor]:
    """Each member's :meth:`~bnn_pyro.likelihoods.Likelihood.fixed_latents` stacked
    ``(K', 1, ...)``: one value per stacked net (member k's ``K' / K`` draws consecutive),
    broadcast over the rows."""
    own = [b.likelihood.fixed_latents(f) for b in bnns]
    draws = f.shape[0] // len(bnns)
    return {
        name: torch.stack([values[name] for values in own]).repeat_interleave(draws, 0).unsqueeze(1)
        for name in own[0]
    }
