"""Gap and tail splits of a UCI data set (Foong et al. 2019), generated from its own files.

The standard splits test on random rows, which always have training rows nearby. These test
where there is no data:

* **gap** split ``j``: sort the rows by input feature ``j``; the middle third are the test rows,
  the outer two thirds the training rows;
* **tail** split ``j``: the same sort; the lowest and the highest sixth are the test rows, the
  middle two thirds the training rows (extrapolation along feature ``j``).

So a data set with ``D`` input features gets ``D`` gap and ``D`` tail splits. Ties in a feature
are broken by row order: a feature with few distinct values (a binary one, a grid of settings)
gives a gap or a tail that shares values with the training rows, a weaker test; the written
``distinct_values.txt`` says how many each feature has.

:func:`write_gap_folders` writes each as a folder in the layout :mod:`benchmarks.uci.data` reads
(the data file and the settings files copied, new index files and ``n_splits.txt``), so the
harness runs on them unchanged::

    python -m benchmarks.uci.gap_splits --data benchmarks/uci/data --out /tmp/uci_gap
    python -m benchmarks.uci --data /tmp/uci_gap --out /tmp/uci_gap_out --jobs 2

The harness's ``--splits all`` is the fewest splits of the sets it runs (yacht's 6): the sets
with more features get theirs with ``--resume --datasets <name>_gap,<name>_tail --splits 6-12``.

Nothing is shipped: the folders are re-made from the shipped data in a second.
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

import numpy as np

__all__ = ["KINDS", "split_rows", "write_gap_folders"]

KINDS = ("gap", "tail")
_SETTINGS = ("n_hidden.txt", "n_epochs.txt", "dropout_rates.txt", "tau_values.txt")


def split_rows(values: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """The training and test rows ``(train, test)`` of a gap or tail split along one feature.

    Args:
        values: ``(N,)`` the feature's value in every row, ``N >= 6``.
        kind: ``"gap"`` (test on the middle third of the sorted rows) or ``"tail"`` (test on
            the lowest and highest sixth).

    Returns:
        Two sorted integer arrays that partition ``range(N)``.

    Example:
        >>> train, test = split_rows(np.arange(12.0)[::-1], "gap")  # rows 11..0 hold 0..11
        >>> test.tolist(), len(train)
        ([4, 5, 6, 7], 8)
        >>> split_rows(np.arange(12.0), "tail")[1].tolist()
        [0, 1, 10, 11]
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    values = np.asarray(values)
    if values.ndim != 1 or len(values) < 6:
        raise ValueError(f"values must be a 1-D array of at least 6 rows, got {values.shape}")
    n = len(values)
    order = np.argsort(values, kind="stable")  # ties: row order
    if kind == "gap":
        test = order[round(n / 3) : round(2 * n / 3)]
    else:
        sixth = round(n / 6)
        test = np.concatenate([order[:sixth], order[n - sixth :]])
    train = np.setdiff1d(np.arange(n), test)
    return train, np.sort(test)


def write_gap_folders(
    source: str | os.PathLike, out: str | os.PathLike, kinds: tuple[str, ...] = KINDS
) -> list[Path]:
    """Write ``<out>/<name>_<kind>/`` for each UCI folder under ``source`` (or ``source``
    itself) and each of ``kinds``: one split per input feature.

    Returns:
        The folders written.

    Example:
        >>> import tempfile
        >>> from benchmarks.uci.data import load_uci_split, uci_num_splits
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     written = write_gap_folders("benchmarks/uci/data/yacht", tmp)
        ...     split = load_uci_split(written[0], 5)  # along the 6th feature
        ...     names, n = [p.name for p in written], uci_num_splits(written[1])
        >>> names, n, split.X_train.shape[0], split.X_test.shape[0]
        (['yacht_gap', 'yacht_tail'], 6, 206, 102)
    """
    source, out = Path(source), Path(out)
    for kind in kinds:
        if kind not in KINDS:
            raise ValueError(f"kinds must be among {KINDS}, got {kind!r}")
    folders = [source] if (source / "data.txt").exists() else sorted(
        p for p in source.iterdir() if (p / "data.txt").exists()
    )  # fmt: skip
    if not folders:
        raise FileNotFoundError(f"no UCI data folder (one holding data.txt) at {source}")
    written = []
    for folder in folders:
        data = np.loadtxt(folder / "data.txt")
        features = np.loadtxt(folder / "index_features.txt", dtype=int, ndmin=1)
        for kind in kinds:
            target = out / f"{folder.name}_{kind}"
            target.mkdir(parents=True, exist_ok=True)
            for name in ("data.txt", "index_features.txt", "index_target.txt", *_SETTINGS):
                if (folder / name).exists():
                    shutil.copyfile(folder / name, target / name)
            for k, column in enumerate(features):
                train, test = split_rows(data[:, column], kind)
                np.savetxt(target / f"index_train_{k}.txt", train, fmt="%d")
                np.savetxt(target / f"index_test_{k}.txt", test, fmt="%d")
            np.savetxt(target / "n_splits.txt", [len(features)], fmt="%d")
            distinct = [len(np.unique(data[:, c])) for c in features]
            np.savetxt(target / "distinct_values.txt", distinct, fmt="%d")
            written.append(target)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="a UCI data folder, or a folder of them")
    parser.add_argument("--out", required=True, help="where to write <name>_<kind>/ folders")
    parser.add_argument("--kinds", default="gap,tail", help="gap, tail or both (default)")
    args = parser.parse_args(argv)
    for path in write_gap_folders(args.data, args.out, tuple(args.kinds.split(","))):
        print(path)


if __name__ == "__main__":
    main()
