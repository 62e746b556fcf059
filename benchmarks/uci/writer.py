"""Write a data set in the UCI split-folder format read by :mod:`benchmarks.uci.data`."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

__all__ = ["write_uci_folder"]


def write_uci_folder(
    folder: str | os.PathLike,
    X: torch.Tensor,
    y: torch.Tensor,
    n_splits: int = 20,
    test_fraction: float = 0.1,
    seed: int = 0,
) -> Path:
    """Write a data set in the UCI split-folder format, so the same loader and benchmark run on it.

    Each split is a random permutation of the rows (``torch.randperm`` from ``seed``); its first
    ``round((1 - test_fraction) * N)`` rows are the training rows, the rest the test rows, as in
    the reference splits. Writes ``data.txt`` (inputs then target as the last column),
    ``index_features.txt``, ``index_target.txt``, ``n_splits.txt`` and the index files; not the
    optional settings files.

    Args:
        folder: folder to create (its parents must exist); files in it are overwritten.
        X: ``(N, D)`` inputs.
        y: ``(N,)`` or ``(N, 1)`` targets.
        n_splits: number of splits.
        test_fraction: share of the rows in each test set, in ``(0, 1)``.
        seed: seed of the permutations.

    Returns:
        The folder's path.

    Raises:
        TypeError: if ``X``/``y`` are not tensors.
        ValueError: on mismatched shapes, ``n_splits < 1`` or a fraction leaving a part empty.

    Example:
        >>> import tempfile
        >>> from benchmarks.uci.data import load_uci_split, uci_num_splits
        >>> X, y = torch.arange(20.0).reshape(10, 2), torch.arange(10.0)
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     folder = write_uci_folder(Path(tmp) / "toy", X, y, n_splits=3)
        ...     split = load_uci_split(folder, 2)
        ...     n = uci_num_splits(folder)
        >>> n, split.X_train.shape, split.y_test.shape, split.dataset
        (3, torch.Size([9, 2]), torch.Size([1, 1]), 'toy')
    """
    if not isinstance(X, torch.Tensor) or not isinstance(y, torch.Tensor):
        raise TypeError(
            f"X and y must be torch.Tensors, got {type(X).__name__}, {type(y).__name__}"
        )
    if X.dim() != 2 or y.reshape(y.shape[0], -1).shape != (X.shape[0], 1):
        raise ValueError(
            f"X must be (N, D) and y (N,) or (N, 1), got {tuple(X.shape)}, {tuple(y.shape)}"
        )
    if isinstance(n_splits, bool) or not isinstance(n_splits, int) or n_splits < 1:
        raise ValueError(f"n_splits must be a positive int, got {n_splits!r}")
    n = X.shape[0]
    n_train = round((1.0 - test_fraction) * n) if 0 < test_fraction < 1 else -1
    if not 0 < n_train < n:
        raise ValueError(
            f"test_fraction must be in (0, 1) and leave both parts non-empty, got {test_fraction}"
        )
    path = Path(folder)
    path.mkdir(exist_ok=True)
    data = torch.cat([X.double(), y.double().reshape(n, 1)], dim=1).numpy()
    np.savetxt(path / "data.txt", data, fmt="%.17g")
    np.savetxt(path / "index_features.txt", np.arange(X.shape[1]), fmt="%d")
    np.savetxt(path / "index_target.txt", [X.shape[1]], fmt="%d")
    np.savetxt(path / "n_splits.txt", [n_splits], fmt="%d")
    g = torch.Generator().manual_seed(seed)
    for k in range(n_splits):
        perm = torch.randperm(n, generator=g).numpy()
        np.savetxt(path / f"index_train_{k}.txt", perm[:n_train], fmt="%d")
        np.savetxt(path / f"index_test_{k}.txt", perm[n_train:], fmt="%d")
    return path
