"""The UCI regression split-folder loader: any folder of that format, by path.

A folder holds (whitespace-separated plain text, all indices 0-based):

* ``data.txt``: the data matrix, one row per example;
* ``index_features.txt`` / ``index_target.txt``: the input columns / the one target column;
* ``index_train_K.txt`` / ``index_test_K.txt``: the rows of split ``K``;
* ``n_splits.txt``: the number of splits;
* optionally ``n_hidden.txt``, ``n_epochs.txt``, ``dropout_rates.txt``, ``tau_values.txt``: the
  reference experiments' settings (see :func:`load_uci_hyperparameters`).

Protocol (Hernández-Lobato & Adams 2015; Gal & Ghahramani 2016): inputs and target are
normalised with the mean and population std (``ddof=0``) of the split's training rows only, a
std of 0 replaced by 1; predictions are mapped back to original units before scoring.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

__all__ = [
    "UCIHyperparameters",
    "UCISplit",
    "load_uci_hyperparameters",
    "load_uci_split",
    "uci_num_splits",
    "validation_split",
]


@dataclass(frozen=True, eq=False)
class UCISplit:
    """One train/test split in original units, with the training-rows normalisation stats.

    Attributes:
        X_train: ``(N_train, D)`` training inputs.
        y_train: ``(N_train, 1)`` training targets.
        X_test: ``(N_test, D)`` test inputs.
        y_test: ``(N_test, 1)`` test targets.
        x_mean: ``(D,)`` mean of the training inputs.
        x_std: ``(D,)`` population std of the training inputs, 0 replaced by 1.
        y_mean: ``(1,)`` mean of the training targets.
        y_std: ``(1,)`` population std of the training targets, 0 replaced by 1.
        train_index: ``(N_train,)`` rows of ``data.txt`` (int64).
        test_index: ``(N_test,)`` rows of ``data.txt`` (int64).
        dataset: the folder name, e.g. ``"bostonHousing"``.
        split: the split number ``K``.

    Example:
        >>> import tempfile
        >>> from benchmarks.uci.writer import write_uci_folder
        >>> X, y = torch.randn(20, 2), 100 + 10 * torch.randn(20)
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     split = load_uci_split(write_uci_folder(Path(tmp) / "toy", X, y), 0)
        >>> y_n = split.normalize_y(split.y_test)  # train on normalised data ...
        >>> bool(torch.allclose(split.denormalize_y(y_n), split.y_test))  # ... map back
        True
        >>> bool(torch.allclose(split.denormalize_scale(torch.ones(1)), split.y_std))
        True
    """

    X_train: torch.Tensor
    y_train: torch.Tensor
    X_test: torch.Tensor
    y_test: torch.Tensor
    x_mean: torch.Tensor
    x_std: torch.Tensor
    y_mean: torch.Tensor
    y_std: torch.Tensor
    train_index: torch.Tensor
    test_index: torch.Tensor
    dataset: str
    split: int

    def normalize_x(self, x: torch.Tensor) -> torch.Tensor:
        """``(x - x_mean) / x_std`` for inputs ``(N, D)``."""
        return (_check_last(x, "x", self.x_mean) - self.x_mean) / self.x_std

    def normalize_y(self, y: torch.Tensor) -> torch.Tensor:
        """``(y - y_mean) / y_std`` for targets ``(N, 1)``."""
        return (_check_last(y, "y", self.y_mean) - self.y_mean) / self.y_std

    def denormalize_y(self, y: torch.Tensor) -> torch.Tensor:
        """Map normalised targets, predictive means or samples ``(..., 1)`` to original units."""
        return _check_last(y, "y", self.y_mean) * self.y_std + self.y_mean

    def denormalize_scale(self, scale: torch.Tensor) -> torch.Tensor:
        """Map a standard deviation (or noise scale) ``(..., 1)`` to original units."""
        return _check_last(scale, "scale", self.y_std) * self.y_std

    def denormalize_variance(self, variance: torch.Tensor) -> torch.Tensor:
        """Map a variance ``(..., 1)`` to original units (times ``y_std ** 2``)."""
        return _check_last(variance, "variance", self.y_std) * self.y_std.square()


@dataclass(frozen=True)
class UCIHyperparameters:
    """Settings of the reference experiments stored in a UCI folder.

    Attributes:
        n_splits: number of train/test splits.
        n_hidden: hidden-layer width (50; 100 for protein-sized data).
        n_epochs: base number of epochs (the dropout experiments multiplied it).
        dropout_rates: grid of dropout probabilities of the reference grid search.
        tau_values: grid of noise precisions, in original target units ``1 / units^2``.

    Example:
        >>> hp = UCIHyperparameters(20, 50, 40, (0.005, 0.01), (0.25, 0.5))
        >>> hp.n_hidden, len(hp.tau_values)
        (50, 2)
    """

    n_splits: int
    n_hidden: int
    n_epochs: int
    dropout_rates: tuple[float, ...]
    tau_values: tuple[float, ...]


def _check_last(t: object, name: str, like: torch.Tensor) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() == 0 or t.shape[-1] != like.shape[-1]:
        raise ValueError(
            f"{name} must have last dimension {like.shape[-1]}, got shape {tuple(t.shape)}"
        )
    return t


def _read(folder: Path, name: str, integral: bool) -> np.ndarray:
    """Read a whitespace-separated numeric file with clear errors."""
    path = folder / name
    if not path.is_file():
        raise FileNotFoundError(f"UCI folder {str(folder)!r} has no {name} (expected at {path})")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # numpy warns on an empty file
            values = np.loadtxt(path, dtype=np.float64, ndmin=1 if integral else 2)
    except ValueError as err:
        raise ValueError(f"{path} is not a whitespace-separated numeric file: {err}") from err
    if values.size == 0:
        raise ValueError(f"{path} is empty")
    if not np.isfinite(values).all():
        raise ValueError(f"{path} holds NaN or infinite values")
    if integral:
        if values.ndim != 1 or not np.array_equal(values, np.round(values)):
            raise ValueError(f"{path} must hold integers, one per line")
        return values.astype(np.int64)
    return values


def _read_one_int(folder: Path, name: str) -> int:
    values = _read(folder, name, integral=True)
    if values.size != 1 or values[0] < 1:
        raise ValueError(f"{folder / name} must hold one positive integer, got {values.tolist()}")
    return int(values[0])


def _as_folder(folder: object) -> Path:
    if not isinstance(folder, (str, os.PathLike)):
        raise TypeError(f"folder must be a str or os.PathLike, got {type(folder).__name__}")
    path = Path(folder)
    if not path.is_dir():
        raise FileNotFoundError(f"UCI folder {str(folder)!r} does not exist or is not a folder")
    return path


def uci_num_splits(folder: str | os.PathLike) -> int:
    """Number of train/test splits of a UCI folder (its ``n_splits.txt``).

    Args:
        folder: path of the data set folder.

    Returns:
        The number of splits; split ``K`` runs from 0 to that number minus 1.

    Raises:
        FileNotFoundError: if the folder or ``n_splits.txt`` is missing.

    Example:
        >>> import tempfile
        >>> from benchmarks.uci.writer import write_uci_folder
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     folder = write_uci_folder(Path(tmp) / "toy", torch.ones(10, 2), torch.ones(10), 4)
        ...     uci_num_splits(folder)
        4
    """
    return _read_one_int(_as_folder(folder), "n_splits.txt")


def load_uci_hyperparameters(folder: str | os.PathLike) -> UCIHyperparameters:
    """The reference settings of a UCI folder (``n_splits``, ``n_hidden``, ``n_epochs``, grids).

    Args:
        folder: path of the data set folder.

    Returns:
        :class:`UCIHyperparameters`.

    Raises:
        FileNotFoundError: if the folder or one of its settings files is missing.
        ValueError: if a file does not hold what it should.

    Example:
        >>> import tempfile
        >>> from benchmarks.uci.writer import write_uci_folder
        >>> settings = {"n_hidden.txt": "50", "n_epochs.txt": "40",
        ...             "dropout_rates.txt": "0.005 0.01", "tau_values.txt": "0.25 0.5"}
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     folder = write_uci_folder(Path(tmp) / "toy", torch.ones(10, 2), torch.ones(10))
        ...     for name, text in settings.items():
        ...         _ = (folder / name).write_text(text)
        ...     hp = load_uci_hyperparameters(folder)
        >>> hp.n_splits, hp.n_hidden, hp.dropout_rates, hp.tau_values
        (20, 50, (0.005, 0.01), (0.25, 0.5))
    """
    path = _as_folder(folder)
    counts = [_read_one_int(path, f"{name}.txt") for name in ("n_splits", "n_hidden", "n_epochs")]
    grids = [
        _read(path, name, integral=False).ravel()
        for name in ("dropout_rates.txt", "tau_values.txt")
    ]
    return UCIHyperparameters(
        n_splits=counts[0],
        n_hidden=counts[1],
        n_epochs=counts[2],
        dropout_rates=tuple(float(v) for v in grids[0]),
        tau_values=tuple(float(v) for v in grids[1]),
    )


def _make_split(
    X_tr: np.ndarray,
    y_tr: np.ndarray,
    X_te: np.ndarray,
    y_te: np.ndarray,
    index: tuple[np.ndarray, np.ndarray],
    name: tuple[str, int],
    dtype: torch.dtype,
) -> UCISplit:
    """Build a split; statistics from the training rows, float64, ``ddof=0``, std 0 -> 1."""
    x_std, y_std = X_tr.std(axis=0), y_tr.std(axis=0)
    x_std[x_std == 0] = 1.0
    y_std[y_std == 0] = 1.0

    def t(a: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.ascontiguousarray(a), dtype=dtype)

    return UCISplit(
        X_train=t(X_tr),
        y_train=t(y_tr),
        X_test=t(X_te),
        y_test=t(y_te),
        x_mean=t(X_tr.mean(axis=0)),
        x_std=t(x_std),
        y_mean=t(y_tr.mean(axis=0)),
        y_std=t(y_std),
        train_index=torch.as_tensor(index[0], dtype=torch.long),
        test_index=torch.as_tensor(index[1], dtype=torch.long),
        dataset=name[0],
        split=name[1],
    )


def load_uci_split(
    folder: str | os.PathLike, split: int, dtype: torch.dtype = torch.float32
) -> UCISplit:
    """Load split ``split`` of a UCI regression folder, with training-rows normalisation stats.

    The data stay in original units; normalise with :meth:`UCISplit.normalize_x` /
    :meth:`UCISplit.normalize_y` and map predictions back with :meth:`UCISplit.denormalize_y`
    and :meth:`UCISplit.denormalize_scale` (or score normalised predictions with
    ``y_scale=split.y_std`` in :mod:`bnn_pyro.metrics`).

    Args:
        folder: path of the data set folder (any folder of the format in the module docstring).
        split: split number ``K`` in ``[0, n_splits)``.
        dtype: floating dtype of the returned tensors; the statistics are computed in float64.

    Returns:
        :class:`UCISplit` with ``X`` ``(N, D)`` and ``y`` ``(N, 1)`` for train and test.

    Raises:
        TypeError: if ``folder`` is not a path or ``split`` not an int.
        FileNotFoundError: if the folder or a needed file is missing.
        ValueError: if ``split`` is out of range, or the files are inconsistent (indices out of
            range or repeated, train and test rows overlapping).

    Example:
        >>> import tempfile
        >>> from benchmarks.uci.writer import write_uci_folder
        >>> X, y = torch.randn(40, 3), 10 + 5 * torch.randn(40)
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     split = load_uci_split(write_uci_folder(Path(tmp) / "toy", X, y), 0)
        >>> split.X_train.shape, split.y_test.shape
        (torch.Size([36, 3]), torch.Size([4, 1]))
        >>> y_n = split.normalize_y(split.y_train)  # mean 0, population std 1
        >>> round(y_n.mean().item(), 5) + 0.0, round(y_n.std(correction=0).item(), 5)
        (0.0, 1.0)
    """
    path = _as_folder(folder)
    if isinstance(split, bool) or not isinstance(split, (int, np.integer)):
        raise TypeError(f"split must be an int, got {type(split).__name__}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    n_splits = uci_num_splits(path)
    if not 0 <= split < n_splits:
        raise ValueError(f"split must be in [0, {n_splits}) for {path.name}, got {split}")
    data = _read(path, "data.txt", integral=False)
    features = _read(path, "index_features.txt", integral=True)
    target = _read(path, "index_target.txt", integral=True)
    if target.size != 1:
        raise ValueError(f"{path / 'index_target.txt'} must hold one column index")
    for name, cols in (("index_features.txt", features), ("index_target.txt", target)):
        if cols.min() < 0 or cols.max() >= data.shape[1]:
            raise ValueError(f"{path / name}: columns must be in [0, {data.shape[1]})")
    rows = {}
    for part in ("train", "test"):
        name = f"index_{part}_{split}.txt"
        rows[part] = _read(path, name, integral=True)
        if rows[part].min() < 0 or rows[part].max() >= data.shape[0]:
            raise ValueError(f"{path / name}: rows must be in [0, {data.shape[0]})")
        if np.unique(rows[part]).size != rows[part].size:
            raise ValueError(f"{path / name} repeats rows")
    if np.intersect1d(rows["train"], rows["test"]).size:
        raise ValueError(f"split {split} of {path.name}: train and test rows overlap")
    X, y = data[:, features], data[:, target]
    tr, te = rows["train"], rows["test"]
    return _make_split(X[tr], y[tr], X[te], y[te], (tr, te), (path.name, split), dtype)


def validation_split(split: UCISplit, fraction: float = 0.2) -> UCISplit:
    """Cut the last ``fraction`` of the training rows off as a validation set.

    As in the reference experiments (Gal's ``num_training_examples = int(0.8 * N)``), the
    first ``int((1 - fraction) * N_train)`` training rows stay for training and the rest become
    the returned split's ``X_test``/``y_test``. The statistics are recomputed on the reduced
    training part (in float64 from the split's tensors). The original test rows are not used.

    Args:
        split: a split from :func:`load_uci_split`.
        fraction: share of the training rows held out, in ``(0, 1)``.

    Returns:
        A new :class:`UCISplit` whose test part is the validation set.

    Raises:
        TypeError: if ``split`` is not a :class:`UCISplit`.
        ValueError: if ``fraction`` is outside ``(0, 1)`` or leaves a part empty.

    Example:
        >>> import tempfile
        >>> from benchmarks.uci.writer import write_uci_folder
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     folder = write_uci_folder(Path(tmp) / "toy", torch.randn(50, 2), torch.randn(50))
        ...     split = load_uci_split(folder, 0)
        >>> val = validation_split(split)  # 45 training rows: int(0.8 * 45) = 36 and 9
        >>> val.X_train.shape[0], val.X_test.shape[0]
        (36, 9)
        >>> bool((val.test_index == split.train_index[36:]).all())
        True
    """
    if not isinstance(split, UCISplit):
        raise TypeError(f"split must be a UCISplit, got {type(split).__name__}")
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise TypeError(f"fraction must be a float, got {type(fraction).__name__}")
    n = split.X_train.shape[0]
    n_keep = int((1.0 - fraction) * n) if 0 < fraction < 1 else -1
    if not 0 < n_keep < n:
        raise ValueError(
            f"fraction must be in (0, 1) and leave rows on both sides of {n} rows, got {fraction}"
        )
    X = split.X_train.double().numpy()
    y = split.y_train.double().numpy()
    index = (split.train_index[:n_keep].numpy(), split.train_index[n_keep:].numpy())
    name = (split.dataset, split.split)
    return _make_split(
        X[:n_keep], y[:n_keep], X[n_keep:], y[n_keep:], index, name, split.X_train.dtype
    )
