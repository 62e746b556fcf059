"""The UCI harness reports its test scores in the target's original units.

Models train and predict in normalised units (``y_n = (y - mean) / std`` on the training rows);
a normalised Gaussian-mixture predictive ``N(m_s, s_s^2)`` is, in original units,
``N(mean + std m_s, (std s_s)^2)``, whose log-density at ``y`` is the normalised one minus
``log std``. A harness that forgot the rescaling would report every test log-likelihood
``log std`` too high: here ``std ~ 21``, about 3 nats. The expected values are computed from
the raw ``data.txt`` and index files with numpy, in original units throughout (no
normalisation, no ``- log std`` shortcut), from the mixture the method handed the harness.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks.uci import BenchmarkSettings, MethodSpec, Task, registry, run_task, write_uci_folder

S = 4
NOISE = torch.tensor([0.4, 0.5, 0.6, 0.7], dtype=torch.float64).reshape(S, 1, 1)


def _fixed_mixture(calls: list[tuple[torch.Tensor, torch.Tensor]]) -> MethodSpec:
    """A method whose predictive is a known mixture of the (normalised) inputs: component ``s``
    has mean ``0.2 (s - 1.5) + 0.6 x_0`` and sd ``NOISE[s]``. Records what it hands over."""

    def train(config, x, y, *, y_std, hidden, seed, checkpoints, report, num_samples) -> None:
        def predictor(x_eval: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            shift = 0.2 * (torch.arange(S, dtype=torch.float64) - 1.5).reshape(S, 1, 1)
            locs = shift + 0.6 * x_eval[:, :1].double().unsqueeze(0)
            calls.append((locs, NOISE))
            return locs, NOISE

        for epoch in checkpoints:
            report(epoch, predictor)

    grid = lambda info, quick: [{"epochs": 1}]  # noqa: E731
    return MethodSpec("fixed", "Fixed", "a known mixture", grid, train, lambda c: [1])


def _raw_split(folder: Path, split: int) -> tuple[np.ndarray, np.ndarray]:
    """The training and test targets of ``split``, straight from the files, float64."""
    data = np.loadtxt(folder / "data.txt")
    target = int(np.loadtxt(folder / "index_target.txt"))
    train = np.loadtxt(folder / f"index_train_{split}.txt", dtype=int)
    test = np.loadtxt(folder / f"index_test_{split}.txt", dtype=int)
    return data[train, target], data[test, target]


def test_the_reported_test_scores_are_in_original_units(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = torch.Generator().manual_seed(4)
    X = torch.randn(80, 2, generator=g, dtype=torch.float64)
    y = 500.0 + 20.0 * X[:, 0] + 8.0 * torch.randn(80, generator=g, dtype=torch.float64)
    folder = write_uci_folder(tmp_path / "scaled", X, y, n_splits=2)
    calls: list[tuple[torch.Tensor, torch.Tensor]] = []
    monkeypatch.setitem(registry.METHODS, "fixed", _fixed_mixture(calls))
    record = run_task(Task("scaled", str(folder), 1, "fixed"), BenchmarkSettings())

    y_train, y_test = _raw_split(folder, 1)
    mean, std = y_train.mean(), y_train.std()  # the protocol's statistics: ddof = 0
    assert std > 15.0  # far from 1: log std ~ 3 nats
    locs, scales = (t.numpy() for t in calls[-1])  # the last prediction: the test rows
    assert locs.shape == (S, len(y_test), 1) and record["n_test"] == len(y_test)

    loc = mean + std * locs[:, :, 0]  # (S, N), original units
    sd = std * scales[:, :, 0]  # (S, 1)
    log_density = -0.5 * ((y_test - loc) / sd) ** 2 - np.log(sd) - 0.5 * math.log(2 * math.pi)
    per_point = np.logaddexp.reduce(log_density, axis=0) - math.log(S)
    expected_ll = float(per_point.mean())
    expected_rmse = float(np.sqrt(np.mean((loc.mean(0) - y_test) ** 2)))
    # The harness reads its targets in float32 (load_uci_split): a relative rounding of ~6e-8
    # of |y| ~ 500 moves a target by ~3e-5, i.e. ~1e-5 of a predictive sd of ~10, and the
    # log-density by about |z| of that. 1e-4 nats covers it; forgetting std is ~3 nats.
    assert record["test_ll"] == pytest.approx(expected_ll, abs=1e-4)
    normalised_ll = expected_ll + math.log(std)  # what a harness that forgot std would report
    assert record["test_ll"] < normalised_ll - 2.5
    assert record["rmse"] == pytest.approx(expected_rmse, rel=1e-5)
