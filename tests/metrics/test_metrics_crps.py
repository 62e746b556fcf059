"""CRPS: dtypes, argument checks and the chunking of the pairwise term, by hand."""

from __future__ import annotations

import math

import pytest
import torch

import bnn_pyro.metrics.crps as crps_module
from bnn_pyro.metrics import crps_from_samples, crps_gaussian_mixture

# CRPS of N(0, 1) at y = 0 (Gneiting & Raftery 2007 at z = 0): 2 phi(0) - 1/sqrt(pi).
STANDARD_AT_ZERO = math.sqrt(2.0 / math.pi) - 1.0 / math.sqrt(math.pi)


def test_per_point_scores_come_back_in_the_inputs_dtype():
    """The sums run in float64; float32 inputs get float32 per-point values back. Samples 0
    and 1 at y = 0: (0 + 1) / 2 - (|0 - 1| + |1 - 0|) / (2 * 4) = 0.25."""
    mixture = crps_gaussian_mixture(torch.zeros(1, 2), 1.0, torch.zeros(2), reduction="none")
    assert mixture.dtype == torch.float32
    torch.testing.assert_close(mixture, torch.full((2,), STANDARD_AT_ZERO, dtype=torch.float32))
    samples = crps_from_samples(torch.tensor([[0.0], [1.0]]), torch.zeros(1), reduction="none")
    assert samples.dtype == torch.float32 and samples.tolist() == [0.25]


def test_a_chunk_of_one_point_gives_the_closed_form():
    """chunk_size = 1 is the smallest legal chunk: three standard normals, each scored at 0."""
    got = crps_gaussian_mixture(
        torch.zeros(1, 3, dtype=torch.float64),
        1.0,
        torch.zeros(3, dtype=torch.float64),
        reduction="none",
        chunk_size=1,
    )
    torch.testing.assert_close(got, torch.full((3,), STANDARD_AT_ZERO, dtype=torch.float64))


@pytest.mark.parametrize("chunk_size", [0, -1, True, 2.0, "2"])
def test_chunk_size_must_be_a_positive_int(chunk_size):
    with pytest.raises(
        ValueError, match=rf"^chunk_size must be a positive int or None, got {chunk_size!r}$"
    ):
        crps_gaussian_mixture(torch.zeros(2, 3), 1.0, torch.zeros(3), chunk_size=chunk_size)


def _pairwise_chunks(monkeypatch) -> list[int]:
    """Record how many points each call of the pairwise term sees (its (S, S, chunk, O)
    arguments; the first term's (S, N, O) call is not pairwise)."""
    seen: list[int] = []
    original = crps_module._expected_abs_normal

    def recording(mu, var):
        if mu.dim() == 4:
            seen.append(mu.shape[2])
        return original(mu, var)

    monkeypatch.setattr(crps_module, "_expected_abs_normal", recording)
    return seen


def test_the_pairwise_term_runs_over_consecutive_chunks_of_points(monkeypatch):
    """Five points in chunks of two: blocks of 2, 2 and 1 points, and the scores equal the
    unchunked ones."""
    g = torch.Generator().manual_seed(0)
    locs = torch.randn(4, 5, generator=g, dtype=torch.float64)
    y = torch.randn(5, generator=g, dtype=torch.float64)
    whole = crps_gaussian_mixture(locs, 0.5, y, reduction="none")
    seen = _pairwise_chunks(monkeypatch)
    chunked = crps_gaussian_mixture(locs, 0.5, y, reduction="none", chunk_size=2)
    assert seen == [2, 2, 1]
    torch.testing.assert_close(chunked, whole, rtol=1e-13, atol=0)


def test_the_default_chunk_keeps_each_block_within_the_budget(monkeypatch):
    """The budget is 2**21 elements of an (S, S, chunk, O) block: with S = 3 all five points fit
    in one block (2**21 // 9 > 5); with S = 1025, 2**21 // 1025**2 = 1 point per block."""
    seen = _pairwise_chunks(monkeypatch)
    crps_gaussian_mixture(torch.zeros(3, 5), 1.0, torch.zeros(5))
    assert seen == [5]
    seen.clear()
    crps_gaussian_mixture(torch.zeros(1025, 3), 1.0, torch.zeros(3))
    assert seen == [1, 1, 1]


def test_bad_samples_are_refused_by_name():
    shape = r"must have shape \(S, N\) or \(S, N, O\), got \(3,\)$"
    with pytest.raises(ValueError, match=rf"^locs {shape}"):
        crps_gaussian_mixture(torch.zeros(3), 1.0, torch.zeros(3))
    with pytest.raises(ValueError, match=rf"^samples {shape}"):
        crps_from_samples(torch.zeros(3), torch.zeros(3))
