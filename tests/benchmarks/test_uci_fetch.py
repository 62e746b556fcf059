"""benchmarks/uci/fetch.py, offline: served from the shipped copy it rebuilds a set byte for
byte; a damaged source is refused before anything is moved into place; no network gives a
clear message and status 2."""

from __future__ import annotations

import filecmp
import urllib.error
from pathlib import Path

import pytest

from benchmarks.uci.fetch import fetch_dataset, main

SHIPPED = Path(__file__).resolve().parents[2] / "benchmarks" / "uci" / "data"


def _local(name: str):
    return lambda url: (SHIPPED / name / url.rsplit("/", 1)[1]).read_bytes()


def test_a_fetched_set_is_the_shipped_one_byte_for_byte(tmp_path):
    folder = fetch_dataset("yacht", tmp_path, fetch=_local("yacht"))
    names = sorted(p.name for p in (SHIPPED / "yacht").iterdir())
    assert sorted(p.name for p in folder.iterdir()) == names
    match, mismatch, errors = filecmp.cmpfiles(SHIPPED / "yacht", folder, names, shallow=False)
    assert (mismatch, errors) == ([], [])
    assert [p.name for p in tmp_path.iterdir()] == ["yacht"]  # no staging folder left


def test_overlapping_splits_are_refused_and_nothing_is_moved_in(tmp_path):
    def damaged(url: str) -> bytes:
        if url.endswith("index_test_3.txt"):  # split 3's test rows: its first training rows
            return (SHIPPED / "yacht" / "index_train_3.txt").read_bytes()[:20]
        return _local("yacht")(url)

    with pytest.raises(ValueError, match="split 3"):
        fetch_dataset("yacht", tmp_path, fetch=damaged)
    assert list(tmp_path.iterdir()) == []


def test_no_network_says_so(tmp_path, capsys):
    def offline(url: str) -> bytes:
        raise urllib.error.URLError("Temporary failure in name resolution")

    assert main(["--out", str(tmp_path), "kin8nm"], fetch=offline) == 2
    err = capsys.readouterr().err
    assert "could not fetch kin8nm" in err and "UCI_Datasets/kin8nm/data/" in err
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path), "mnist"], fetch=offline)
    assert "unknown set(s) ['mnist']" in capsys.readouterr().err
