"""The VI rows' predictive noise factor: every factor scored from one run, the same draws."""

from __future__ import annotations

import pytest
import torch

from benchmarks.uci.method import DatasetInfo
from benchmarks.uci.variational import NOISE_FACTORS, vi_grid, vi_train

#: These tests check the harness's plumbing (records, backends, bundles, factors) on runs kept
#: a few epochs long on purpose: their fits are not meant to converge, and the library rightly
#: warns that they predict their training targets poorly. Here that warning is expected.
pytestmark = pytest.mark.filterwarnings("ignore::bnn_pyro.exceptions.TrainingInstabilityWarning")


def _run(config, x, y):
    seen = []

    def report(epoch, predictor, overrides=None):
        locs, scales = predictor(x)
        seen.append((epoch, overrides, locs, torch.as_tensor(scales)))

    vi_train(config, x, y, y_std=1.0, hidden=8, seed=0, checkpoints=[2, 4], report=report,
             num_samples=5)  # fmt: skip
    return seen


def test_each_factor_scales_the_noise_of_the_same_draws():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 3, generator=g), torch.randn(40, 1, generator=g)
    config = {**vi_grid(DatasetInfo("toy", 40, 3), quick=True)[0], "noise_factors": [0.5, 2.0]}
    seen = _run(config, x, y)
    assert [(e, o) for e, o, _, _ in seen] == [
        (2, {"noise_factor": 0.5}), (2, {"noise_factor": 2.0}),
        (4, {"noise_factor": 0.5}), (4, {"noise_factor": 2.0}),
    ]  # fmt: skip
    for small, large in ((seen[0], seen[1]), (seen[2], seen[3])):
        assert torch.equal(small[2], large[2])  # one set of weight draws per checkpoint
        assert torch.allclose(large[3], 4.0 * small[3])
    assert not torch.equal(seen[0][2], seen[2][2])  # and training moved on in between


def test_the_final_run_reports_only_the_chosen_factor():
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(40, 3, generator=g), torch.randn(40, 1, generator=g)
    config = {**vi_grid(DatasetInfo("toy", 40, 3), quick=True)[0], "noise_factors": [0.5, 2.0]}
    seen = _run({**config, "noise_factor": 2.0}, x, y)
    assert [o for _, o, _, _ in seen] == [{"noise_factor": 2.0}] * 2


def test_the_full_grid_spans_narrower_and_wider_than_trained():
    grid = vi_grid(DatasetInfo("toy", 455, 13))
    assert all(c["noise_factors"] == list(NOISE_FACTORS) for c in grid)
    assert min(NOISE_FACTORS) < 1.0 < max(NOISE_FACTORS) and 1.0 in NOISE_FACTORS
