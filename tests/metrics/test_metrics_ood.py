"""OOD scores and detection metrics: against scikit-learn and closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bnn_pyro.metrics import (
    energy_score,
    fpr_at_95_tpr,
    max_probability_score,
    ood_aupr,
    ood_auroc,
)

sk_metrics = pytest.importorskip("sklearn.metrics")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auroc_and_aupr_are_scikit_learns_with_ties(seed):
    g = torch.Generator().manual_seed(seed)
    s_in = torch.randint(0, 20, (300,), generator=g).double()  # many ties
    s_out = torch.randint(5, 30, (120,), generator=g).double()
    labels = np.r_[np.zeros(300), np.ones(120)]
    scores = np.r_[s_in.numpy(), s_out.numpy()]
    assert ood_auroc(s_in, s_out) == pytest.approx(sk_metrics.roc_auc_score(labels, scores))
    assert ood_aupr(s_in, s_out) == pytest.approx(
        sk_metrics.average_precision_score(labels, scores)
    )


def test_fpr_at_95_tpr_is_the_gaussian_closed_form():
    """In-distribution scores N(0, 1), OOD N(2, 1): the threshold is z_0.95 = 1.645 and the
    OOD share below it Φ(1.645 - 2) = 0.361. With 200,000 draws each the sampled share's sd
    is about 0.0011, and the threshold's sampling error moves it by about 0.002: 0.01 is ample."""
    g = torch.Generator().manual_seed(0)
    s_in = torch.randn(200_000, generator=g, dtype=torch.float64)
    s_out = 2.0 + torch.randn(200_000, generator=g, dtype=torch.float64)
    expected = 0.5 * (1 + math.erf((1.6448536 - 2.0) / math.sqrt(2)))
    assert fpr_at_95_tpr(s_in, s_out) == pytest.approx(expected, abs=0.01)
    assert ood_auroc(s_in, s_out) == pytest.approx(
        0.5 * (1 + math.erf(2.0 / 2.0)),
        abs=0.005,  # Φ(d / √2), d = 2
    )


def test_scores_order_confident_below_unsure():
    confident = torch.tensor([[[0.98, 0.01, 0.01]]]).expand(4, 1, 3)
    unsure = torch.full((4, 1, 3), 1 / 3)
    assert max_probability_score(confident) < max_probability_score(unsure)
    logits_sure, logits_flat = torch.tensor([[8.0, 0.0, 0.0]]), torch.zeros(1, 3)
    assert energy_score(logits_sure) < energy_score(logits_flat)
    assert float(energy_score(logits_flat)[0]) == pytest.approx(-math.log(3))


def test_bad_input_is_refused_by_name():
    with pytest.raises(ValueError, match="at least one score"):
        ood_auroc(torch.tensor([]), torch.ones(2))
    with pytest.raises(ValueError, match="temperature"):
        energy_score(torch.zeros(2, 3), temperature=0.0)
    with pytest.raises(ValueError, match="tpr"):
        fpr_at_95_tpr(torch.ones(3), torch.ones(3), tpr=0.0)


def test_fpr_at_95_tpr_counts_ood_scores_tied_with_the_threshold():
    """Worked by hand. In-distribution: ten 0s, nine 1s, one 2 (N = 20). Keeping 95% means
    keeping ⌈0.95 · 20⌉ = 19 of them, the 19th smallest being 1: the threshold is 1 and the
    in-distribution inputs at or below it are exactly 19 of 20. The OOD scores 0, 1, 1, 2, 3:
    three of five (0 and both 1s) lie at or below 1, so the FPR is 3/5; a strict ``<`` would
    count only the 0 (1/5)."""
    s_in = torch.tensor([1.0, 0.0, 2.0] + [0.0] * 9 + [1.0] * 8)
    assert sorted(s_in.tolist()) == [0.0] * 10 + [1.0] * 9 + [2.0]
    s_out = torch.tensor([3.0, 1.0, 0.0, 2.0, 1.0])
    assert fpr_at_95_tpr(s_in, s_out) == pytest.approx(3 / 5)
    # ties across the threshold among the in-distribution scores too: five 0s and fifteen 1s;
    # the 19th smallest is 1, and keeping every score <= 1 keeps all 20. OOD 1, 1, 2, 2: half.
    s_in = torch.tensor([0.0] * 5 + [1.0] * 15)
    assert fpr_at_95_tpr(s_in, torch.tensor([1.0, 2.0, 1.0, 2.0])) == pytest.approx(0.5)
    # tpr = 0.5 of 1, 2, 3, 4: the 2nd smallest, 2; OOD 2, 2, 3: two of three at or below it
    s_in = torch.tensor([3.0, 1.0, 4.0, 2.0])
    assert fpr_at_95_tpr(s_in, torch.tensor([2.0, 3.0, 2.0]), tpr=0.5) == pytest.approx(2 / 3)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fpr_at_95_tpr_is_scikit_learns_roc_with_ties(seed):
    """Independently from scikit-learn's ROC curve, with the in-distribution inputs as the
    positives of the score ``-s`` (kept when ``s`` is at or below the threshold): the FPR at
    the first (lowest) threshold whose TPR reaches 0.95. Integer scores: many ties, also at
    the threshold."""
    g = torch.Generator().manual_seed(seed)
    s_in = torch.randint(0, 12, (300,), generator=g).double()
    s_out = torch.randint(6, 20, (150,), generator=g).double()
    labels = np.r_[np.ones(300), np.zeros(150)]
    scores = -np.r_[s_in.numpy(), s_out.numpy()]
    fpr, tpr, _ = sk_metrics.roc_curve(labels, scores, drop_intermediate=False)
    expected = fpr[np.argmax(tpr >= 0.95 - 1e-12)]
    assert 0 < expected < 1  # a case where the threshold's ties matter
    assert fpr_at_95_tpr(s_in, s_out) == pytest.approx(expected, abs=1e-12)


def test_scores_take_samples_or_their_mean_and_compute_the_formula():
    """Hand values: (N, C) input is used as it is, (S, N, C) is averaged over S first; the
    energy's temperature divides the logits inside and multiplies outside. N != C, so a
    reduction over the wrong axis changes the shape or the value."""
    probs = torch.tensor([[0.7, 0.2, 0.1], [0.4, 0.4, 0.2]])  # (N=2, C=3)
    assert torch.allclose(max_probability_score(probs), torch.tensor([0.3, 0.6]))
    draws = torch.stack([probs, torch.tensor([[0.1, 0.8, 0.1], [0.2, 0.2, 0.6]])])  # (S=2, N, C)
    # means: [0.4, 0.5, 0.1] and [0.3, 0.3, 0.4] -> 1 - max = 0.5 and 0.6
    assert torch.allclose(max_probability_score(draws), torch.tensor([0.5, 0.6]))
    logits = torch.tensor([[2.0, 0.0, -1.0], [1.0, 1.0, 1.0]])
    t = 2.0
    expected = -t * torch.log(torch.exp(logits / t).sum(-1))
    assert torch.allclose(energy_score(logits, temperature=t), expected)
    stacked = torch.stack([logits, logits + 2.0])  # mean over S: logits + 1
    assert torch.allclose(energy_score(stacked), energy_score(logits + 1.0))


def test_one_dimensional_input_is_refused_naming_the_argument():
    name = r"(?<![A-Za-z_]){}(?![A-Za-z_])"
    with pytest.raises(ValueError, match=name.format("probs_samples")):
        max_probability_score(torch.tensor([0.5, 0.5]))
    with pytest.raises(ValueError, match=name.format("logits")):
        energy_score(torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match=name.format("temperature")):
        energy_score(torch.zeros(2, 3), temperature=-1.0)


def test_each_score_argument_is_named_when_refused():
    with pytest.raises(TypeError, match=r"^scores_in must be numeric"):
        ood_auroc(np.array(["a", "b"]), torch.ones(2))
    with pytest.raises(TypeError, match=r"^scores_out must be numeric"):
        ood_aupr(torch.ones(2), np.array(["a", "b"]))
    with pytest.raises(
        ValueError, match=r"^scores_in and scores_out must each hold at least one score$"
    ):
        fpr_at_95_tpr(torch.ones(2), torch.tensor([]))


def test_tpr_is_a_share_in_0_to_1_and_1_keeps_every_in_distribution_score():
    """tpr = 1 keeps all ten in-distribution scores: the threshold is the largest, 9, so the
    OOD scores 5 and 9 pass and 10 does not (2 of 3). Above 1 is refused, naming tpr."""
    s_in, s_out = torch.arange(10.0), torch.tensor([5.0, 9.0, 10.0])
    assert fpr_at_95_tpr(s_in, s_out, tpr=1.0) == pytest.approx(2 / 3)
    for bad in (1.5, 1.0 + 1e-9):
        with pytest.raises(ValueError, match=r"^tpr must be a finite float in \(0.0, "):
            fpr_at_95_tpr(s_in, s_out, tpr=bad)


def test_the_kept_count_is_the_ceiling_of_tpr_n_to_nine_decimals():
    """Ten in-distribution scores 0..9 and OOD scores 0..9:

    * tpr = 0.94 keeps ⌈9.4⌉ = 10 (not round(9.4) = 9): threshold 9, all 10 OOD pass;
    * tpr = 0.05 keeps ⌈0.5⌉ = 1: threshold 0, one OOD score passes;
    * tpr = 0.9 + 2e-11 is 0.9 to float noise: it keeps 9 (threshold 8, 9 pass), not 10.
    """
    s = torch.arange(10.0)
    assert fpr_at_95_tpr(s, s, tpr=0.94) == 1.0
    assert fpr_at_95_tpr(s, s, tpr=0.05) == pytest.approx(0.1)
    assert fpr_at_95_tpr(s, s, tpr=0.9 + 2e-11) == pytest.approx(0.9)


def test_half_precision_scores_are_ranked_in_double():
    """bfloat16 holds integers exactly only up to 256: ranks (and their sums) over 2,000
    scores would round in it. The metrics read any dtype in float64: the same figures as the
    float64 copy of the same scores."""
    g = torch.Generator().manual_seed(0)
    s_in = torch.randn(1000, generator=g).bfloat16()
    s_out = (torch.randn(1000, generator=g) + 1).bfloat16()
    for metric in (ood_auroc, ood_aupr, fpr_at_95_tpr):
        assert metric(s_in, s_out) == metric(s_in.double(), s_out.double())
