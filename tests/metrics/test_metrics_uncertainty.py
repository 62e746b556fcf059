"""Entropy and mutual information against scipy.stats.entropy and the KL form of BALD."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import entropy

from bnn_pyro.metrics import (
    entropy_decomposition,
    expected_entropy,
    mutual_information,
    predictive_entropy,
)


def _samples(seed: int, s: int = 6, n: int = 9, c: int = 3) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(1.5 * torch.randn(s, n, c, generator=g, dtype=torch.float64), dim=-1)


def test_entropies_match_scipy():
    probs = _samples(0)
    p = probs.numpy()
    # float64 throughout; only summation order differs from scipy.
    np.testing.assert_allclose(
        predictive_entropy(probs).numpy(), entropy(p.mean(axis=0), axis=-1), rtol=1e-12
    )
    np.testing.assert_allclose(
        expected_entropy(probs).numpy(), entropy(p, axis=-1).mean(axis=0), rtol=1e-12
    )


def test_mutual_information_equals_mean_kl_to_the_mean_prediction():
    # BALD in its KL form, I = 1/S sum_s KL(p_s || p_mean), an independent formula.
    probs = _samples(1)
    p = probs.numpy()
    p_mean = p.mean(axis=0)
    expected = [np.mean([entropy(p[s, n], p_mean[n]) for s in range(6)]) for n in range(9)]
    np.testing.assert_allclose(mutual_information(probs).numpy(), expected, rtol=1e-9, atol=1e-15)


def test_decomposition_adds_up_and_handles_degenerate_cases():
    probs = _samples(2)
    parts = entropy_decomposition(probs)
    torch.testing.assert_close(parts.total, parts.aleatoric + parts.epistemic)
    assert bool((parts.epistemic > 0).all())  # distinct samples disagree
    # One sample, or identical samples: nothing epistemic.
    assert float(mutual_information(probs[:1]).abs().max()) == 0.0
    same = probs[:1].expand(4, -1, -1)
    assert float(mutual_information(same).max()) < 1e-15
    # Exact zeros give 0 log 0 = 0, not NaN; two certain, opposite samples give MI = log 2.
    opposite = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]])
    assert mutual_information(opposite).item() == pytest.approx(math.log(2))
    assert expected_entropy(opposite).item() == 0.0


@pytest.mark.parametrize(
    ("probs", "error", "match"),
    [
        (np.ones((2, 3, 2)) / 2, TypeError, "probs_samples must be a torch.Tensor"),
        (torch.ones(3, 2) / 2, ValueError, r"\(S, N, C\)"),
        (torch.ones(2, 3, 2), ValueError, "sum to 1"),
        (torch.full((2, 3, 2), -0.5), ValueError, r"\[0, 1\]"),
        (torch.ones(2, 3, 1), ValueError, "C >= 2"),
    ],
)
def test_bad_probability_samples_raise(probs, error, match):
    for fn in (predictive_entropy, expected_entropy, mutual_information, entropy_decomposition):
        with pytest.raises(error, match=match):
            fn(probs)
