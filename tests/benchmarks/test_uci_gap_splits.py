"""Gap and tail splits generated from the shipped UCI data (``benchmarks/uci/gap_splits.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.uci.cli import RUNS_FILE, main
from benchmarks.uci.data import load_uci_split, uci_num_splits
from benchmarks.uci.gap_report import gap_tables
from benchmarks.uci.gap_splits import split_rows, write_gap_folders

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "uci" / "data"


@pytest.mark.parametrize("kind", ["gap", "tail"])
def test_splits_test_where_no_training_row_is(kind):
    """Along a feature with distinct values, every test value of a gap split lies strictly
    between the training values below and above it (and none of a tail split inside the
    training range); the two parts partition the rows, the test part a third of them."""
    rng = np.random.default_rng(0)
    values = rng.normal(size=301)
    train, test = split_rows(values, kind)
    assert np.array_equal(np.union1d(train, test), np.arange(301))
    assert len(np.intersect1d(train, test)) == 0 and abs(len(test) - 301 / 3) <= 1
    low, high = values[train].min(), values[train].max()
    if kind == "gap":
        below = values[train][values[train] < np.median(values)]
        above = values[train][values[train] > np.median(values)]
        assert below.max() < values[test].min() and values[test].max() < above.min()
    else:
        assert not ((values[test] >= low) & (values[test] <= high)).any()


def test_split_rows_refuses_bad_input():
    with pytest.raises(ValueError, match="kind"):
        split_rows(np.arange(10.0), "middle")
    with pytest.raises(ValueError, match="at least 6"):
        split_rows(np.arange(5.0), "gap")


def test_the_folders_follow_the_source_and_the_harness_runs_on_them(tmp_path):
    """One split per input feature, the data file copied byte for byte, the loader reads them,
    and the harness's smoke run scores a gap split."""
    written = write_gap_folders(DATA / "energy", tmp_path)
    assert [p.name for p in written] == ["energy_gap", "energy_tail"]
    source = (DATA / "energy" / "data.txt").read_bytes()
    for folder in written:
        assert (folder / "data.txt").read_bytes() == source
        assert uci_num_splits(folder) == 8
    data = np.loadtxt(DATA / "energy" / "data.txt")
    split = load_uci_split(written[0], 0)  # along the first feature
    column = split.X_test[:, 0].numpy()
    assert np.quantile(data[:, 0], 0.3) <= column.min() and column.max() <= np.quantile(
        data[:, 0], 0.7
    )
    out = tmp_path / "results"
    argv = ["--data", str(tmp_path), "--datasets", "energy_gap", "--splits", "0"]
    assert main([*argv, "--methods", "vi", "--quick", "--quiet", "--out", str(out)]) == 0
    lines = (out / RUNS_FILE).read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    assert [(r["dataset"], r["split"]) for r in records] == [("energy_gap", 0)]
    assert np.isfinite(records[0]["test_ll"]) and 0.0 <= records[0]["coverage_95"] <= 1.0
    text = gap_tables(records)
    assert "## gap splits" in text and "| vi | " in text and "Best per set: energy: vi" in text


def test_no_data_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no UCI data folder"):
        write_gap_folders(tmp_path, tmp_path / "out")


def test_rows_without_a_grid_of_their_own_are_named_untuned():
    untuned = {"epochs": 800, "lr": 1e-3, "batch_size": 32}  # the generic row's configuration
    rows = [
        {"dataset": "toy_gap", "split": 0, "method": m, "coverage_95": 0.9, "test_ll": -1.0,
         "config": config}
        for m, config in [("vi", {}), ("dkl", untuned), ("vbll", untuned), ("vbnn", {}),
                          ("sngp", {**untuned, "lengthscale": 2.0})]
    ]  # fmt: skip
    text = gap_tables(rows)
    assert "| dkl | 0.900 ± 0.000 |" in text
    # a dev row run before its grid existed is untuned; a run of its grid is not
    assert "Untuned rows (dkl; vbll; vbnn): the harness's one configuration" in text
    assert "Untuned" not in gap_tables(rows[:1])  # a tuned row alone: no such line
    assert "Untuned" not in gap_tables(rows[-1:])
    # a method tuned on one set and untuned on others: the note names where it is untuned
    mixed = [{**rows[1], "dataset": d} for d in ("yacht_gap", "concrete_tail")]
    mixed.append({**rows[4], "method": "dkl", "dataset": "energy_gap"})
    assert "Untuned rows (dkl on concrete, yacht): the" in gap_tables(mixed)
