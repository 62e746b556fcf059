"""Convergence of SG-MCMC chains judged on their predictions, not on their weights.

A network's weights are not identifiable (hidden units permute, layers rescale), so R̂ and the
effective sample size of the weights say little: two chains in equivalent modes look as far
apart as two chains that disagree. What a user consumes is the prediction, so the diagnostics
here run on ``f(x; θ)``, each chain's per-sample predictive means at given inputs (for a
classifier, its class probabilities): split R̂ (Gelman et al. 2013, ``< 1.01``–``1.1`` is the
usual bar) and the effective sample size over all chains, from Pyro's own estimators
(``pyro.ops.stats.split_gelman_rubin`` and ``effective_sample_size``), per input and output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
from pyro.ops.stats import effective_sample_size, split_gelman_rubin

from bnn_pyro._checks import check_tensor

__all__ = ["ChainDiagnostics", "chain_diagnostics", "prediction_diagnostics"]


class ChainDiagnostics(NamedTuple):
    """Split R̂ and effective sample size of the predictions, each ``(N, O)``.

    Example:
        >>> d = ChainDiagnostics(torch.tensor([[1.0], [1.2]]), torch.tensor([[400.0], [30.0]]))
        >>> d.worst_rhat, d.least_ess
        (1.2000000476837158, 30.0)
    """

    rhat: torch.Tensor
    ess: torch.Tensor

    @property
    def worst_rhat(self) -> float:
        """The largest R̂ over inputs and outputs."""
        return float(self.rhat.max())

    @property
    def least_ess(self) -> float:
        """The smallest effective sample size over inputs and outputs."""
        return float(self.ess.min())


def prediction_diagnostics(
    predictions: torch.Tensor, rank_normalized: bool = False
) -> ChainDiagnostics:
    """R̂ and ESS of per-sample predictions ``(C, S, N, O)``: ``C >= 2`` chains of ``S >= 4``
    samples each, in chain order.

    With ``rank_normalized=True`` these are the rank-normalised diagnostics of Vehtari et al.
    (2021), the ones the "R̂ < 1.01, bulk-ESS ≥ 400" bar is stated for: the draws of each
    ``(n, o)``, pooled over the chains, are replaced by normal scores of their ranks
    (``Φ⁻¹((r - 3/8) / (CS + 1/4))``, tied draws given their average rank); R̂ is the larger of
    the split R̂ of those scores and of the scores of ``|value - median|`` (a chain too wide or
    too narrow shows in the second); the ESS is the bulk-ESS, the ESS of the scores over the
    ``2C`` half-chains. Both are defined for heavy-tailed predictions; the bulk-ESS and the R̂
    of the scores are unchanged by any increasing transform of them (that of the folded scores,
    in general by an affine one only).

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> iid = torch.randn(4, 500, 3, 1, generator=g)  # four chains of independent draws
        >>> d = prediction_diagnostics(iid)
        >>> d.rhat.shape, d.worst_rhat < 1.01, d.least_ess > 1000
        (torch.Size([3, 1]), True, True)
        >>> bulk = prediction_diagnostics(iid.exp(), rank_normalized=True)
        >>> bulk.worst_rhat < 1.01, bulk.least_ess > 1000
        (True, True)
    """
    predictions = check_tensor("predictions", predictions)
    if predictions.dim() != 4 or predictions.shape[0] < 2 or predictions.shape[1] < 4:
        raise ValueError(
            "predictions must have shape (C, S, N, O) with C >= 2 chains of S >= 4 samples, "
            f"got {tuple(predictions.shape)}"
        )
    if not isinstance(rank_normalized, bool):
        raise TypeError(f"rank_normalized must be a bool, got {type(rank_normalized).__name__}")
    values = predictions.double()
    if not rank_normalized:
        return ChainDiagnostics(
            split_gelman_rubin(values, chain_dim=0, sample_dim=1),
            effective_sample_size(values, chain_dim=0, sample_dim=1),
        )
    scores = _normal_scores(values)
    folded = _normal_scores((values - _median(values.flatten(0, 1))).abs())
    rhat = torch.maximum(
        split_gelman_rubin(scores, chain_dim=0, sample_dim=1),
        split_gelman_rubin(folded, chain_dim=0, sample_dim=1),
    )
    half = scores.shape[1] // 2  # the split chains: each chain's first and last half
    halves = torch.cat([scores[:, :half], scores[:, scores.shape[1] - half :]])
    return ChainDiagnostics(rhat, effective_sample_size(halves, chain_dim=0, sample_dim=1))


def _median(flat: torch.Tensor) -> torch.Tensor:
    """The median over the first axis, the mean of the two middle values for an even count
    (``Tensor.median`` returns the lower one)."""
    ordered = flat.sort(0).values
    return (ordered[(len(flat) - 1) // 2] + ordered[len(flat) // 2]) / 2


def _normal_scores(values: torch.Tensor) -> torch.Tensor:
    """``(C, S, ...)`` values → the normal scores of their ranks among all ``C·S`` draws
    (tied draws share their average rank, as in Vehtari et al.)."""
    chains, draws = values.shape[:2]
    flat = values.flatten(0, 1).movedim(0, -1).contiguous()  # (..., CS)
    ordered = flat.sort(-1).values
    below = torch.searchsorted(ordered, flat)  # draws smaller than each
    upto = torch.searchsorted(ordered, flat, right=True)  # draws not larger
    ranks = ((below + upto + 1).to(values.dtype) / 2).movedim(-1, 0)  # 1..CS, ties averaged
    total = chains * draws
    return torch.special.ndtri((ranks - 0.375) / (total + 0.25)).reshape(values.shape)


def chain_diagnostics(chains: Sequence[Any], x: torch.Tensor) -> ChainDiagnostics:
    """R̂ and ESS of the predictions at ``x`` of several fitted SG-MCMC chains (e.g. one
    method fitted under several seeds), each evaluated on every one of its kept samples in
    chain order; chains that kept different numbers of samples are cut to their last ``S``,
    ``S`` the fewest.

    Args:
        chains: two or more fitted :class:`~bnn_pyro.SGMCMC` of one model.
        x: ``(N, *features)`` inputs to judge the predictions at.

    Returns:
        :class:`ChainDiagnostics` with ``(N, O)`` tensors (``O``: outputs, or classes).

    Example:
        >>> import bnn_pyro as bp
        >>> X = torch.randn(64, 2, generator=torch.Generator().manual_seed(0))
        >>> y = X[:, 0] - X[:, 1]
        >>> def chains(epochs):
        ...     torch.manual_seed(0)  # the nets' initial weights
        ...     fits = [bp.make("sghmc", bp.nn.mlp(2, [], 1), bp.Gaussian(scale=0.5))
        ...             for _ in range(2)]
        ...     for seed, m in enumerate(fits):
        ...         _ = m.fit(X, y, epochs=epochs, batch_size=32, progress=False, seed=seed)
        ...     return fits
        >>> chain_diagnostics(chains(8), X[:5]).worst_rhat > 1.1  # 16 steps: not mixed yet
        True
        >>> d = chain_diagnostics(chains(400), X[:5])
        >>> d.rhat.shape, d.worst_rhat < 1.1
        (torch.Size([5, 1]), True)
    """
    if len(chains) < 2:
        raise ValueError(f"chains must hold at least 2 fitted chains, got {len(chains)}")
    for i, chain in enumerate(chains):
        if not callable(getattr(chain, "samples", None)) or not hasattr(chain, "bnn"):
            raise TypeError(f"chains[{i}] must be a fitted SGMCMC, got {type(chain).__name__}")
    per_chain = []
    for chain in chains:
        with torch.no_grad():
            _, _, samples = chain.bnn.predict(x, True, posterior_samples=chain.samples())
        per_chain.append(samples)
    fewest = min(len(p) for p in per_chain)
    return prediction_diagnostics(torch.stack([p[len(p) - fewest :] for p in per_chain]))
