"""The collinear, nearly noiseless synthetic set on which VI's broken finals reproduce."""

from __future__ import annotations

import pytest
import torch

from benchmarks.uci.data import load_uci_split
from benchmarks.uci.synthetic import LEVEL, SPREAD, collinear_plant
from benchmarks.uci.synthetic import main as write_main


def test_the_set_has_the_naval_shape_and_collinear_inputs():
    X, y = collinear_plant()
    assert tuple(X.shape) == (11934, 16) and tuple(y.shape) == (11934, 1)
    sd = X.std(0)
    assert int((sd == 0).sum()) == 2  # the two constant columns
    Z = (X - X.mean(0)) / torch.where(sd > 0, sd, torch.ones_like(sd))
    assert int(torch.linalg.matrix_rank(Z)) == 7  # 8 functions of the row, centred
    assert torch.equal(X[:, 4], X[:, 5])  # one column written twice
    assert float(y.mean()) == pytest.approx(LEVEL, abs=1e-12)
    assert float(y.std()) == pytest.approx(SPREAD, rel=1e-9)
    # the target is a function of the row: no two rows with equal inputs disagree
    assert torch.unique(X, dim=0).shape[0] == X.shape[0]


def test_the_set_is_made_again_the_same_and_refuses_a_bad_grid():
    a, b = collinear_plant(3, 4, 5, seed=1), collinear_plant(3, 4, 5, seed=1)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    with pytest.raises(ValueError, match="speeds must be an int >= 2"):
        collinear_plant(1)
    with pytest.raises(ValueError, match="seed must be"):
        collinear_plant(seed=-1)


def test_the_folder_the_harness_reads(tmp_path):
    write_main(["--out", str(tmp_path / "collinear_plant"), "--splits", "2"])
    split = load_uci_split(str(tmp_path / "collinear_plant"), 1)
    assert split.X_train.shape[1] == 16
    assert split.X_train.shape[0] + split.X_test.shape[0] == 11934
