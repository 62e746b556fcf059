"""Out-of-distribution detection for classifiers: scores per input, and how well they separate.

A score says how unlike the training data an input looks, higher meaning more so. From the
predictive (``probs_samples`` ``(S, N, C)``, the class probabilities of ``S`` posterior draws):

* :func:`predictive_entropy` / :func:`mutual_information` (in :mod:`~bnn_pyro.metrics`): total
  and epistemic uncertainty;
* :func:`max_probability_score`: ``1 - max_c p̄_c`` of the mean prediction (Hendrycks &
  Gimpel 2017);
* :func:`energy_score`: ``-T logsumexp(f / T)`` of logits ``f`` (Liu et al. 2020).

How well scores separate in-distribution inputs (``scores_in``) from out-of-distribution ones
(``scores_out``): :func:`ood_auroc`, :func:`ood_aupr` (the OOD inputs as positives) and
:func:`fpr_at_95_tpr` (the share of OOD inputs taken for in-distribution when 95% of the
in-distribution inputs are kept, as in Liang et al. 2018). Ties count half.
"""

from __future__ import annotations

import math

import torch

from bnn_pyro._checks import as_tensor, check_float

__all__ = ["energy_score", "fpr_at_95_tpr", "max_probability_score", "ood_aupr", "ood_auroc"]


def max_probability_score(probs_samples: torch.Tensor) -> torch.Tensor:
    """``1 - max_c mean_s probs[s, n, c]``: low for a confident mean prediction.

    Args:
        probs_samples: ``(S, N, C)`` class probabilities of ``S`` draws (or ``(N, C)``).

    Returns:
        ``(N,)``.

    Example:
        >>> max_probability_score(torch.tensor([[[0.9, 0.1]], [[0.5, 0.5]]]))
        tensor([0.3000])
    """
    given = as_tensor("probs_samples", probs_samples, min_dim=2)
    p = given.double()
    mean = p if p.dim() == 2 else p.mean(0)
    return (1.0 - mean.max(-1).values).to(given.dtype)


def energy_score(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """The free energy ``-T logsumexp(f / T)`` of logits ``f``: high (less negative) for an
    input the classifier gives little mass to.

    Args:
        logits: ``(N, C)``, or ``(S, N, C)`` (averaged over the draws first).
        temperature: ``T > 0``.

    Returns:
        ``(N,)``.

    Example:
        >>> energy_score(torch.tensor([[10.0, 0.0], [0.0, 0.0]])).round(decimals=3)
        tensor([-10.0000,  -0.6930])
    """
    t = check_float("temperature", temperature, minimum=0.0, strict=True)
    f = as_tensor("logits", logits, min_dim=2)
    f = f if f.dim() == 2 else f.mean(0)
    return -t * torch.logsumexp(f / t, dim=-1)


def _pair(scores_in: object, scores_out: object) -> tuple[torch.Tensor, torch.Tensor]:
    s_in = as_tensor("scores_in", scores_in, dtype=torch.float64).reshape(-1)
    s_out = as_tensor("scores_out", scores_out, dtype=torch.float64).reshape(-1)
    if not len(s_in) or not len(s_out):
        raise ValueError("scores_in and scores_out must each hold at least one score")
    return s_in, s_out


def ood_auroc(scores_in: torch.Tensor, scores_out: torch.Tensor) -> float:
    """The probability that an OOD input scores higher than an in-distribution one (ties
    half): the area under the ROC curve.

    Args:
        scores_in, scores_out: ``(N_in,)`` and ``(N_out,)`` scores, higher meaning more OOD.

    Returns:
        A float in ``[0, 1]``; 0.5 is chance.

    Example:
        >>> ood_auroc(torch.tensor([0.1, 0.2, 0.3]), torch.tensor([0.25, 0.9]))
        0.8333333333333334
    """
    s_in, s_out = _pair(scores_in, scores_out)
    both = torch.cat([s_in, s_out])
    order = both.argsort()
    ranks = torch.empty_like(both)
    ranks[order] = torch.ones_like(both).cumsum(0)  # 1, 2, ..., N where the scores are
    values, inverse, counts = torch.unique(both, return_inverse=True, return_counts=True)
    sums = torch.zeros_like(values).index_add_(0, inverse, ranks)
    ranks = (sums / counts)[inverse]  # ties: their mean rank
    n_in, n_out = len(s_in), len(s_out)
    u = ranks[n_in:].sum() - n_out * (n_out + 1) / 2  # Mann-Whitney U of the OOD scores
    return float(u / (n_in * n_out))


def ood_aupr(scores_in: torch.Tensor, scores_out: torch.Tensor) -> float:
    """The average precision of detecting the OOD inputs (the positives) by their scores:
    ``Σ_k (R_k - R_{k-1}) P_k`` over the distinct thresholds, high to low (scikit-learn's
    ``average_precision_score``).

    Example:
        >>> ood_aupr(torch.tensor([0.1, 0.2, 0.3]), torch.tensor([0.25, 0.9]))
        0.8333333333333333
    """
    s_in, s_out = _pair(scores_in, scores_out)
    scores = torch.cat([s_in, s_out])
    positive = torch.cat([torch.zeros_like(s_in), torch.ones_like(s_out)])
    # sorted high to low, the counts above each distinct threshold are running sums taken at
    # the last position of each run of equal scores (O(N log N), no (T, N) matrix)
    order = scores.argsort(descending=True)
    ranked, tp_run = scores[order], positive[order].cumsum(0)
    last = torch.ones_like(ranked, dtype=torch.bool)
    last[:-1] = ranked[1:] != ranked[:-1]
    tp = tp_run[last]
    precision = tp / (torch.nonzero(last).squeeze(-1) + 1).to(tp)
    recall = tp / positive.sum()
    steps = torch.diff(recall, prepend=recall.new_zeros(1))
    return float((steps * precision).sum())


def fpr_at_95_tpr(scores_in: torch.Tensor, scores_out: torch.Tensor, tpr: float = 0.95) -> float:
    """The share of OOD inputs taken for in-distribution at the threshold that keeps ``tpr``
    of the in-distribution inputs (scores at or below it): lower is better.

    Args:
        scores_in, scores_out: ``(N_in,)`` and ``(N_out,)`` scores, higher meaning more OOD.
        tpr: the share of in-distribution inputs kept, in ``(0, 1]``.

    Example:
        >>> s_in = torch.arange(100.0)  # keeping 95%: the threshold is 94
        >>> fpr_at_95_tpr(s_in, torch.tensor([50.0, 94.0, 96.0, 200.0]))
        0.5
    """
    tpr = check_float("tpr", tpr, minimum=0.0, strict=True, maximum=1.0 + 1e-12)
    s_in, s_out = _pair(scores_in, scores_out)
    kept = max(1, math.ceil(round(tpr * len(s_in), 9)))  # ⌈tpr N_in⌉, without float noise
    threshold = s_in.sort().values[kept - 1]
    return float((s_out <= threshold).double().mean())
