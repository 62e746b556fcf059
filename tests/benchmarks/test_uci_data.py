"""The UCI split-folder loader of benchmarks/uci/ (shared data and synthetic folders), the
published reference values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks.uci import (
    PUBLISHED_UCI,
    UCISplit,
    load_uci_hyperparameters,
    load_uci_split,
    uci_num_splits,
    validation_split,
    write_uci_folder,
)

UCI = Path(__file__).resolve().parents[3] / "shared" / "data" / "uci"
if not UCI.is_dir():
    UCI = Path("/work/shared/data/uci")
needs_uci = pytest.mark.skipif(not UCI.is_dir(), reason="shared UCI data not found")


# ----------------------------------------------------------------------- shared UCI folders
_SIZES = {"bostonHousing": (455, 51, 13), "concrete": (927, 103, 8), "energy": (691, 77, 8)}
_SIZES["yacht"] = (277, 31, 6)


@needs_uci
@pytest.mark.parametrize("name", sorted(_SIZES))
def test_every_shared_split_is_a_disjoint_cover_of_the_stated_size(name):
    n_train, n_test, d = _SIZES[name]
    n_rows = np.loadtxt(UCI / name / "data.txt").shape[0]
    assert uci_num_splits(UCI / name) == 20
    for k in range(20):
        split = load_uci_split(str(UCI / name), k)
        assert split.X_train.shape == (n_train, d) and split.y_train.shape == (n_train, 1)
        assert split.X_test.shape == (n_test, d) and split.y_test.shape == (n_test, 1)
        rows = torch.cat([split.train_index, split.test_index]).sort().values
        assert torch.equal(rows, torch.arange(n_rows))  # disjoint and covering every row
        assert (split.dataset, split.split) == (name, k)


@needs_uci
def test_boston_split_rows_and_statistics_match_numpy():
    folder = UCI / "bostonHousing"
    data = np.loadtxt(folder / "data.txt")
    features = np.loadtxt(folder / "index_features.txt").astype(int)
    target = int(np.loadtxt(folder / "index_target.txt"))
    train = np.loadtxt(folder / "index_train_3.txt").astype(int)
    test = np.loadtxt(folder / "index_test_3.txt").astype(int)
    split = load_uci_split(folder, 3, dtype=torch.float64)
    X_tr, y_tr = data[train][:, features], data[train, target]
    np.testing.assert_array_equal(split.X_train.numpy(), X_tr)
    np.testing.assert_array_equal(split.y_test.numpy()[:, 0], data[test, target])
    np.testing.assert_allclose(split.x_mean.numpy(), X_tr.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(split.x_std.numpy(), X_tr.std(axis=0, ddof=0), rtol=1e-12)
    np.testing.assert_allclose(split.y_std.numpy(), [y_tr.std(ddof=0)], rtol=1e-12)
    # Normalised training data: mean 0 and population std 1 per column; test data are not.
    X_n = split.normalize_x(split.X_train)
    np.testing.assert_allclose(X_n.mean(0).numpy(), 0.0, atol=1e-12)
    np.testing.assert_allclose(X_n.std(0, correction=0).numpy(), 1.0, rtol=1e-12)
    assert split.normalize_y(split.y_test).mean().abs().item() > 1e-3
    # float32 loading: same numbers up to float32 rounding (2^-24 relative).
    split32 = load_uci_split(folder, 3)
    assert split32.X_train.dtype == torch.float32
    np.testing.assert_allclose(split32.y_mean.numpy(), [y_tr.mean()], rtol=1e-6)


@needs_uci
def test_boston_validation_split_cuts_the_last_fifth_and_renormalises():
    folder = UCI / "bostonHousing"
    split = load_uci_split(folder, 0, dtype=torch.float64)
    val = validation_split(split)
    assert (val.X_train.shape[0], val.X_test.shape[0]) == (364, 91)  # int(0.8 * 455)
    assert torch.equal(val.train_index, split.train_index[:364])
    assert torch.equal(val.test_index, split.train_index[364:])
    assert not set(val.test_index.tolist()) & set(split.test_index.tolist())
    data = np.loadtxt(folder / "data.txt")
    y_tr = data[split.train_index[:364].numpy(), 13]
    np.testing.assert_allclose(val.y_mean.numpy(), [y_tr.mean()], rtol=1e-12)
    np.testing.assert_allclose(val.y_std.numpy(), [y_tr.std(ddof=0)], rtol=1e-12)
    assert validation_split(split, fraction=0.1).X_test.shape[0] == 455 - int(0.9 * 455)


@needs_uci
def test_shared_hyperparameters():
    hp = load_uci_hyperparameters(UCI / "bostonHousing")
    assert (hp.n_splits, hp.n_hidden, hp.n_epochs) == (20, 50, 40)
    assert hp.dropout_rates == (0.005, 0.01, 0.05, 0.1) and hp.tau_values == (0.1, 0.15, 0.2)


# --------------------------------------------------------------------- synthetic UCI folders
def _hand_written_folder(tmp_path: Path) -> Path:
    """A 6 x 4 folder written by hand: tabs, a constant column, float-formatted indices."""
    folder = tmp_path / "tiny"
    folder.mkdir()
    rows = ["1\t10\t7\t0.5", "2\t20\t7\t1.5", "3\t30\t7\t2.5", "4\t40\t7\t3.5", "5\t50\t7\t4.5"]
    (folder / "data.txt").write_text("\n".join(rows + ["6\t60\t7\t5.5"]) + "\n\n")
    (folder / "index_features.txt").write_text("0\n2\n1\n")  # column order is respected
    (folder / "index_target.txt").write_text("3\n")
    (folder / "n_splits.txt").write_text("2\n")
    (folder / "index_train_0.txt").write_text("0\n1\n2\n3\n")
    (folder / "index_test_0.txt").write_text("4\n5\n")
    (folder / "index_train_1.txt").write_text("5.0\n4.0\n3.0\n2.0\n")
    (folder / "index_test_1.txt").write_text("1.0\n0.0\n")
    return folder


def test_any_folder_of_the_format_loads(tmp_path):
    folder = _hand_written_folder(tmp_path)
    assert uci_num_splits(folder) == 2
    split = load_uci_split(folder, 1)
    np.testing.assert_array_equal(split.X_train.numpy()[0], [6.0, 7.0, 60.0])
    np.testing.assert_array_equal(split.y_test.numpy(), [[1.5], [0.5]])
    torch.testing.assert_close(split.x_mean, torch.tensor([4.5, 7.0, 45.0]))
    # Population std of (6, 5, 4, 3) is sqrt(1.25), of (60, .., 30) sqrt(125); constant -> 1.
    torch.testing.assert_close(split.x_std, torch.tensor([1.25**0.5, 1.0, 125**0.5]))
    assert split.dataset == "tiny"


def test_normalisation_maps_back(tmp_path):
    split = load_uci_split(_hand_written_folder(tmp_path), 0)
    y = torch.tensor([[0.0], [2.0]])
    torch.testing.assert_close(split.denormalize_y(split.normalize_y(y)), y)
    torch.testing.assert_close(split.denormalize_scale(torch.ones(3, 1)), split.y_std.expand(3, 1))
    # The variance of samples mapped back equals the mapped-back variance of the samples.
    samples = torch.randn(50, 4, 1, generator=torch.Generator().manual_seed(0))
    expected = split.denormalize_y(samples).var(dim=0)
    torch.testing.assert_close(split.denormalize_variance(samples.var(dim=0)), expected)


def test_written_folder_round_trips(tmp_path):
    g = torch.Generator().manual_seed(0)
    X, y = torch.randn(30, 3, generator=g, dtype=torch.float64), torch.randn(30, generator=g)
    folder = write_uci_folder(tmp_path / "mine", X, y, n_splits=3, test_fraction=0.1, seed=4)
    data = np.loadtxt(folder / "data.txt")
    np.testing.assert_array_equal(data[:, :3], X.numpy())  # %.17g round-trips float64
    for k in range(3):
        split = load_uci_split(folder, k, dtype=torch.float64)
        assert split.X_train.shape == (27, 3)
        assert torch.equal(split.X_train, X[split.train_index])
        rows = torch.cat([split.train_index, split.test_index]).sort().values
        assert torch.equal(rows, torch.arange(30))
    assert not torch.equal(
        load_uci_split(folder, 0).train_index, load_uci_split(folder, 1).train_index
    )


def _broken(tmp_path: Path, name: str, text: str | None) -> Path:
    folder = _hand_written_folder(tmp_path)
    if text is None:
        (folder / name).unlink()
    else:
        (folder / name).write_text(text)
    return folder


@pytest.mark.parametrize(
    ("name", "text", "error", "match"),
    [
        ("data.txt", None, FileNotFoundError, "has no data.txt"),
        ("index_test_1.txt", None, FileNotFoundError, "index_test_1.txt"),
        ("n_splits.txt", None, FileNotFoundError, "n_splits.txt"),
        ("index_test_1.txt", "5\n0\n", ValueError, "train and test rows overlap"),
        ("index_test_1.txt", "1\n9\n", ValueError, r"rows must be in \[0, 6\)"),
        ("index_train_1.txt", "5\n5\n4\n3\n", ValueError, "repeats rows"),
        ("index_train_1.txt", "5.5\n4\n", ValueError, "must hold integers"),
        ("index_target.txt", "7\n", ValueError, r"columns must be in \[0, 4\)"),
        ("index_target.txt", "1\n2\n", ValueError, "one column index"),
        ("data.txt", "1 2 x 4\n", ValueError, "not a whitespace-separated numeric file"),
        ("index_train_1.txt", "", ValueError, "is empty"),
    ],
)
def test_broken_folders_raise_clear_errors(tmp_path, name, text, error, match):
    with pytest.raises(error, match=match):
        load_uci_split(_broken(tmp_path, name, text), 1)


def test_bad_loader_arguments_raise(tmp_path):
    folder = _hand_written_folder(tmp_path)
    with pytest.raises(ValueError, match=r"split must be in \[0, 2\)"):
        load_uci_split(folder, 2)
    with pytest.raises(ValueError, match="split must be in"):
        load_uci_split(folder, -1)
    with pytest.raises(TypeError, match="split must be an int"):
        load_uci_split(folder, "0")
    with pytest.raises(TypeError, match="dtype"):
        load_uci_split(folder, 0, dtype=torch.int64)
    with pytest.raises(TypeError, match="folder must be a str"):
        load_uci_split(3, 0)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        uci_num_splits(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="n_hidden.txt"):
        load_uci_hyperparameters(folder)
    split = load_uci_split(folder, 0)
    with pytest.raises(ValueError, match="fraction"):
        validation_split(split, fraction=1.0)
    with pytest.raises(ValueError, match="both sides"):
        validation_split(split, fraction=0.9)  # int(0.1 * 4) = 0 training rows left
    with pytest.raises(TypeError, match="UCISplit"):
        validation_split((split.X_train, split.y_train))
    with pytest.raises(ValueError, match="last dimension 3"):
        split.normalize_x(torch.ones(2, 4))
    with pytest.raises(TypeError, match="y must be a torch.Tensor"):
        split.denormalize_y([1.0])
    with pytest.raises(ValueError, match="test_fraction"):
        write_uci_folder(tmp_path / "w", torch.ones(5, 2), torch.ones(5), test_fraction=0.01)
    with pytest.raises(ValueError, match="X must be"):
        write_uci_folder(tmp_path / "w", torch.ones(5, 2), torch.ones(4))
    assert isinstance(split, UCISplit)


# ------------------------------------------------------------------------ published values
_ISSUE_TABLE = """
| boston | −2.90 ± 0.07 | −2.46 ± 0.25 | −2.40 ± 0.04 | −2.41 ± 0.25 |
| concrete | −3.39 ± 0.02 | −3.04 ± 0.09 | −2.93 ± 0.02 | −3.06 ± 0.18 |
| energy | −2.39 ± 0.03 | −1.99 ± 0.09 | −1.21 ± 0.01 | −1.38 ± 0.22 |
| yacht | −3.43 ± 0.16 | −1.55 ± 0.12 | −1.25 ± 0.01 | −1.18 ± 0.21 |
"""
_ISSUE_RMSE = "boston 4.32 / 2.97 / 2.90 / 3.28; concrete 7.19 / 5.23 / 4.82 / 6.03; " + (
    "energy 2.65 / 1.66 / 0.54 / 2.09; yacht 6.89 / 1.11 / 0.67 / 1.58"
)


def test_published_values_match_the_issue_tables():
    """PUBLISHED_UCI against the tables of issue 5, parsed from their text (an independent copy)."""
    folder = {"boston": "bostonHousing", "concrete": "concrete", "energy": "energy"}
    folder["yacht"] = "yacht"
    methods = list(dict.fromkeys(row["method"] for row in PUBLISHED_UCI))
    assert len(methods) == 4 and len(PUBLISHED_UCI) == 32
    got = {
        (r["dataset"], r["method"], r["metric"]): (r["mean"], r["stderr"]) for r in PUBLISHED_UCI
    }
    for line in _ISSUE_TABLE.strip().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        for method, cell in zip(methods, cells[1:], strict=True):
            mean, stderr = (float(v.replace("−", "-")) for v in cell.split("±"))
            assert got[(folder[cells[0]], method, "test_ll")] == (mean, stderr)
    for part in _ISSUE_RMSE.split(";"):
        name, values = part.split(maxsplit=1)
        for method, value in zip(methods, values.split("/"), strict=True):
            assert got[(folder[name], method, "rmse")] == (float(value), None)
