"""Per-row log-likelihoods of K stacked nets (:mod:`bnn_pyro.methods.vi.stacked`): the sum over
a minibatch is the ELBO's data term, the rows one by one the black-box alpha energy's
(:mod:`bnn_pyro.methods.vi.stacked_alpha`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from bnn_pyro.likelihoods import Bernoulli, Categorical, HeteroscedasticGaussian
from bnn_pyro.weight_distributions import LOG_SQRT_2PI

__all__ = ["row_log_likelihood"]


def row_log_likelihood(
    bnns: Sequence[Any], lik: Any, f: torch.Tensor, y: torch.Tensor, noise: torch.Tensor | None
) -> torch.Tensor:
    """``(K', B)``: each row's log-likelihood under each of ``K' = K * P`` stacked nets, ``f``
    ``(K', B, O)`` (member k's ``P`` draws consecutive), ``y`` ``(K', B, ...)``; ``noise``: a
    learned scale ``(K', O)``, else each member's fixed one is used.

    Example:
        >>> import bnn_pyro as bp
        >>> bnns = [bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(1.0)) for _ in range(2)]
        >>> f, y = torch.zeros(6, 5, 1), torch.zeros(6, 5, 1)  # K = 2 members x P = 3 draws
        >>> rows = row_log_likelihood(bnns, bnns[0].likelihood, f, y, None)
        >>> rows.shape, round(float(rows[0, 0]), 4)  # log N(0; 0, 1)
        (torch.Size([6, 5]), -0.9189)
    """
    k, rows = f.shape[0], f.shape[1]
    if isinstance(lik, Categorical):
        ce = F.cross_entropy(f.reshape(-1, f.shape[-1]), y.reshape(-1), reduction="none")
        return -ce.view(k, rows)
    if isinstance(lik, Bernoulli):
        bce = F.binary_cross_entropy_with_logits(f, y, reduction="none")
        return -bce.reshape(k, rows, -1).sum(-1)
    if isinstance(lik, HeteroscedasticGaussian):  # (K, B, 2O): locs, then raw scales
        loc, s = lik.loc_scale(f, {})
        z = (loc - y) / s
        return (-0.5 * z.pow(2) - s.log() - LOG_SQRT_2PI).reshape(k, rows, -1).sum(-1)
    if noise is None:
        s = torch.tensor([b.likelihood.scale for b in bnns], dtype=f.dtype, device=f.device)
        s = s.repeat_interleave(k // len(bnns)).view(k, 1, 1).expand(k, 1, f.shape[-1])
    else:
        s = noise.view(k, 1, -1)
    z = (f - y) / s
    return (-0.5 * z.pow(2) - s.log() - LOG_SQRT_2PI).reshape(k, rows, -1).sum(-1)
