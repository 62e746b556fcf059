"""Files and folders the library writes get the mode a plain ``open()``/``mkdir()`` would give
them under the user's umask, not ``tempfile``'s private ``0o600``/``0o700`` (their atomic
writes start from a temporary file)."""

from __future__ import annotations

import os
import stat

import pytest
import torch.nn as nn

import bnn_pyro as bp
from bnn_pyro.cli.output import atomic_write_text, staged_folder


@pytest.fixture
def umask_022():
    before = os.umask(0o022)
    yield
    os.umask(before)


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_saved_model_is_readable_by_others(tmp_path, umask_022):
    path = str(tmp_path / "m.pt")
    bp.MCDropout(nn.Sequential(nn.Linear(2, 4), nn.Dropout(0.1), nn.Linear(4, 1))).save(path)
    assert _mode(path) == 0o644


def test_cli_outputs_get_the_umask_modes(tmp_path, umask_022):
    path = str(tmp_path / "p.csv")
    atomic_write_text(path, "mean,std\n")
    assert _mode(path) == 0o644
    folder = str(tmp_path / "run")
    with staged_folder(folder) as stage:
        open(os.path.join(stage, "a.txt"), "w").close()
    assert _mode(folder) == 0o755


def test_a_stricter_umask_is_respected(tmp_path):
    before = os.umask(0o077)
    try:
        path = str(tmp_path / "p.csv")
        atomic_write_text(path, "x\n")
        assert _mode(path) == 0o600
    finally:
        os.umask(before)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="Linux's /proc only")
def test_the_umask_is_read_without_being_changed(monkeypatch):
    """Where /proc shows it, the umask is read, not set and restored: setting it would briefly
    change it for every other thread of the process (one writing a file at that moment would
    get mode 0o666)."""
    from bnn_pyro._checkpoint_file import umask_mode

    before = os.umask(0o027)
    try:

        def no_umask(mask: int) -> int:
            raise AssertionError("os.umask was called")

        monkeypatch.setattr(os, "umask", no_umask)
        assert (umask_mode(), umask_mode(directory=True)) == (0o640, 0o750)
    finally:
        monkeypatch.undo()
        os.umask(before)
