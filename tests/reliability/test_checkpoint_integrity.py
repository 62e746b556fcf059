"""Checkpoint files: damage is detected, bad files are refused in plain words, saves that fail
leave the old file intact, and crashed saves leave no temporary file for long.

Each refused file goes through ``bnn_pyro.load`` / ``Method.load`` / ``TabularBNN.load`` and must
raise :class:`bnn_pyro.CheckpointError` naming the file, never advising ``weights_only=False``.
"""

from __future__ import annotations

import errno
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zipfile

import pytest
import torch

import bnn_pyro as bp
from bnn_pyro.checkpoint import FORMAT_VERSION, atomic_save
from tests.reliability.refusal import assert_refused

NET = (3, [5], 1)


def _net(width: int = 5, inputs: int = 3, outputs: int = 1) -> torch.nn.Module:
    return bp.nn.mlp(inputs, [width], outputs)


@pytest.fixture(scope="module")
def saved():
    """A fitted VariationalBNN (2 epochs on 16 rows) saved once; tests copy its bytes."""
    torch.manual_seed(0)
    X, y = torch.randn(16, 3), torch.randn(16, 1)
    bnn = bp.VariationalBNN(_net(), bp.Gaussian(0.5))
    bnn.fit(X, y, epochs=2, progress=False, seed=0)
    folder = tempfile.mkdtemp()
    path = os.path.join(folder, "model.pt")
    bnn.save(path)
    with open(path, "rb") as handle:
        return bnn, X, handle.read()


def _write(tmp_path, data: bytes, name: str = "model.pt") -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def _tensor_regions(data: bytes) -> list[tuple[int, int]]:
    """(start, end) byte offsets of each tensor's data inside the zip (records ``*/data/N``)."""
    path = os.path.join(tempfile.mkdtemp(), "probe.pt")
    with open(path, "wb") as handle:
        handle.write(data)
    regions = []
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            if "/data/" in info.filename:
                head = data[info.header_offset : info.header_offset + 30]
                name_len, extra_len = struct.unpack("<HH", head[26:30])
                start = info.header_offset + 30 + name_len + extra_len
                regions.append((start, start + info.file_size))
    return regions


def _tensors(obj) -> list[torch.Tensor]:
    """Every tensor in a nested dict/list, in order."""
    if torch.is_tensor(obj):
        return [obj]
    items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, list | tuple) else []
    return [t for item in items for t in _tensors(item)]


def _flip_positions(data: bytes) -> dict[str, tuple[int, int]]:
    """Distinct places for one flipped bit: (byte offset, bit)."""
    regions = _tensor_regions(data)
    first, last = regions[0], regions[-1]
    biggest = max(regions, key=lambda r: r[1] - r[0])
    return {
        "first byte of a tensor, low mantissa bit": (first[0], 0),
        "float32 exponent's top bit (x 2**128)": (biggest[0] + 3, 6),
        "sign bit in the middle of a tensor": (
            biggest[0] + 4 * ((biggest[1] - biggest[0]) // 8) + 3,
            7,
        ),
        "last byte of the last tensor": (last[1] - 1, 3),
    }


@pytest.mark.parametrize("where", range(4), ids=lambda i: f"flip{i}")
def test_one_flipped_bit_inside_a_tensor_is_detected(saved, tmp_path, where):
    bnn, _, data = saved
    label, (offset, bit) = list(_flip_positions(data).items())[where]
    damaged = bytearray(data)
    damaged[offset] ^= 1 << bit
    path = _write(tmp_path, bytes(damaged))
    # Without the check this loads silently with a changed tensor: the test needs the check.
    clean = _tensors(torch.load(_write(tmp_path, data, "clean.pt"), weights_only=True))
    raw = _tensors(torch.load(path, weights_only=True))
    assert len(raw) == len(clean) and any(
        not torch.equal(a, b) for a, b in zip(raw, clean, strict=True)
    )
    net = _net()
    assert_refused(lambda: bp.load(path, net=net), bp.CheckpointError, path, "corrupted", obj=net)


def test_a_flipped_bit_in_the_pickle_is_detected(saved, tmp_path):
    _, _, data = saved
    with zipfile.ZipFile(_write(tmp_path, data, "probe.pt")) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith("data.pkl"))
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    damaged = bytearray(data)
    damaged[start + info.file_size // 2] ^= 0x10
    path = _write(tmp_path, bytes(damaged))
    assert_refused(lambda: bp.load(path, net=_net()), bp.CheckpointError, path)


@pytest.mark.parametrize(
    "keep", ["1 byte", "100 bytes", "half", "all but the directory end", "all but 1 byte"]
)
def test_a_truncated_file_is_refused(saved, tmp_path, keep):
    _, _, data = saved
    lengths = {
        "1 byte": 1,
        "100 bytes": 100,
        "half": len(data) // 2,
        "all but the directory end": len(data) - 22,  # the zip's end record is 22 bytes
        "all but 1 byte": len(data) - 1,
    }
    path = _write(tmp_path, data[: lengths[keep]])
    net = _net()
    assert_refused(lambda: bp.load(path, net=net), bp.CheckpointError, path, obj=net)


class _RunsCode:
    """An object whose unpickling would run code (it would create the marker folder)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.makedirs, (self.marker,))


def _bad_file(kind: str, tmp_path) -> tuple[str, str]:
    """A file of the given kind and a word its refusal must contain."""
    path = str(tmp_path / "model.pt")
    good = {"format_version": FORMAT_VERSION, "class": "VariationalBNN"}
    if kind == "empty":
        open(path, "wb").close()
        return path, "empty"
    if kind == "random bytes":
        path = _write(
            tmp_path,
            bytes(
                torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(0)).tolist()
            ),
        )
        return path, "not a bnn_pyro model file"
    if kind == "text":
        return _write(tmp_path, b"weights: [1, 2, 3]\n"), "not a bnn_pyro model file"
    if kind == "plain torch.save of a dict":
        torch.save({"weight": torch.ones(2)}, path)
        return path, "not a bnn_pyro checkpoint"
    if kind == "a pickle with code":
        torch.save(dict(good, payload=_RunsCode(str(tmp_path / "ran"))), path)
        return path, "pickled objects"
    if kind == "newer version":
        torch.save(dict(good, format_version=FORMAT_VERSION + 1), path)
        return path, "upgrade bnn_pyro"
    if kind == "older version":
        torch.save(dict(good, format_version=FORMAT_VERSION - 1), path)
        return path, "older bnn_pyro"
    if kind == "version not a number":
        torch.save(dict(good, format_version="2"), path)
        return path, "format_version"
    if kind == "entries missing":
        torch.save(good, path)
        return path, "'config'"
    if kind == "a folder":
        os.mkdir(path)
        return path, "folder"
    raise AssertionError(kind)


BAD_FILES = [
    "empty",
    "random bytes",
    "text",
    "plain torch.save of a dict",
    "a pickle with code",
    "newer version",
    "older version",
    "version not a number",
    "entries missing",
    "a folder",
]


@pytest.mark.parametrize("kind", BAD_FILES)
def test_a_file_that_is_not_a_usable_checkpoint_is_refused(tmp_path, kind):
    path, word = _bad_file(kind, tmp_path)
    net = _net()
    assert_refused(lambda: bp.load(path, net=net), bp.CheckpointError, path, word, obj=net)
    assert not (tmp_path / "ran").exists(), "unpickling ran code"


def test_a_missing_file_is_a_file_not_found_error_naming_it(tmp_path):
    path = str(tmp_path / "nowhere.pt")
    assert_refused(lambda: bp.load(path, net=_net()), FileNotFoundError, path)


def test_the_estimator_file_is_checked_too(tmp_path):
    pytest.importorskip("sklearn")
    from bnn_pyro.estimators import TabularBNN

    X = torch.randn(20, 2).numpy()
    model = TabularBNN(method="swag", epochs=2, num_samples=3).fit(X, X[:, 0])
    path = str(tmp_path / "est.pt")
    model.save(path)
    data = bytearray(open(path, "rb").read())
    start, end = _tensor_regions(bytes(data))[0]
    data[start] ^= 0x01
    _write(tmp_path, bytes(data), "est.pt")
    assert_refused(lambda: TabularBNN.load(path), bp.CheckpointError, path, "corrupted")


# -- a net of the wrong architecture --------------------------------------------------------


@pytest.mark.parametrize(
    "method, make_net, name, saved_shape, given_shape",
    [
        ("vi", lambda: _net(width=7), "0.weight", "(5, 3)", "(7, 3)"),
        ("vi", lambda: _net(inputs=4), "0.weight", "(5, 3)", "(5, 4)"),
        ("vi", lambda: _net(outputs=2), "2.weight", "(1, 5)", "(2, 5)"),
        ("vi", lambda: bp.nn.mlp(3, [5, 5], 1), "2.weight", "(1, 5)", "(5, 5)"),
        ("dropout", lambda: bp.nn.mlp(3, [9], 1, dropout=0.1), "0.weight", "(5, 3)", "(9, 3)"),
    ],
    ids=["hidden width", "input width", "output width", "extra layer", "MCDropout hidden width"],
)
def test_a_net_of_another_width_names_the_layer_and_both_shapes(
    saved, tmp_path, method, make_net, name, saved_shape, given_shape
):
    if method == "vi":
        path = _write(tmp_path, saved[2])
    else:
        model = bp.MCDropout(bp.nn.mlp(3, [5], 1, dropout=0.1), likelihood=bp.Gaussian(0.3))
        path = str(tmp_path / "model.pt")
        model.save(path)
    net = make_net()
    assert_refused(
        lambda: bp.load(path, net=net),
        bp.CheckpointError,
        "architecture",
        name,
        f"{saved_shape} in the file",
        f"{given_shape} in net",
        obj=net,
    )


@pytest.mark.parametrize(
    "call, exc, name",
    [
        (lambda path: bp.VariationalBNN.load(path, net="mlp(3, [5], 1)"), TypeError, "net"),
        (lambda path: bp.checkpoint.read_checkpoint(3), TypeError, "path"),
        (lambda path: bp.checkpoint.atomic_save({}, b"model.pt"), TypeError, "path"),
    ],
    ids=["net not a module", "path a number", "path as bytes"],
)
def test_arguments_of_the_wrong_type_are_refused_by_name(saved, tmp_path, call, exc, name):
    path = _write(tmp_path, saved[2])
    assert_refused(lambda: call(path), exc, name)
    assert os.listdir(tmp_path) == ["model.pt"]


# -- saves that fail ------------------------------------------------------------------------


def test_a_full_disk_leaves_the_old_file_intact(saved, tmp_path, monkeypatch):
    bnn = saved[0]
    path = str(tmp_path / "model.pt")
    bnn.save(path)
    before = open(path, "rb").read()

    def full(obj, handle):
        handle.write(b"x" * 1000)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full)
    info = assert_refused(lambda: bnn.save(path), OSError, path, "No space left", obj=bnn)
    assert info.value.errno == errno.ENOSPC
    assert open(path, "rb").read() == before
    assert os.listdir(tmp_path) == ["model.pt"], "a temporary file was left"


def test_a_read_only_folder_leaves_the_old_file_intact(saved, tmp_path, monkeypatch):
    bnn = saved[0]
    path = str(tmp_path / "model.pt")
    bnn.save(path)
    before = open(path, "rb").read()
    if os.geteuid() == 0:  # root writes into read-only folders: refuse as the OS would

        def refuse(*args, **kwargs):
            raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / ".tmp-x"))

        monkeypatch.setattr(tempfile, "mkstemp", refuse)
    os.chmod(tmp_path, 0o555)
    try:
        info = assert_refused(lambda: bnn.save(path), PermissionError, path, obj=bnn)
    finally:
        os.chmod(tmp_path, 0o755)
    assert info.value.errno == errno.EACCES
    assert open(path, "rb").read() == before and os.listdir(tmp_path) == ["model.pt"]


# -- temporary files of crashed saves -------------------------------------------------------


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_stale_temporaries_are_removed_and_live_ones_kept(saved, tmp_path):
    from bnn_pyro._checkpoint_file import STALE_AFTER, _host

    host, old = _host(), time.time() - STALE_AFTER - 60
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        files = {
            f".tmp-model.pt.{host}.{_dead_pid()}.abcdefgh.pt": ("removed", None),
            f".tmp-model.pt.{host}.{sleeper.pid}.abcdefgh.pt": ("kept", None),  # writer alive
            f".tmp-model.pt.{host}.{os.getpid()}.abcdefgh.pt": ("kept", None),  # this process
            ".tmp-model.pt.otherhost.1.abcdefgh.pt": ("kept", None),  # cannot tell: too young
            ".tmp-model.pt.otherhost.2.abcdefgh.pt": ("removed", old),
            ".tmp-a1b2c3d4.pt": ("removed", old),  # the earlier naming, an hour old
            ".tmp-e5f6g7h8.pt": ("kept", None),
            f".tmp-other.pt.{host}.{_dead_pid()}.abcdefgh.pt": ("kept", None),  # another file
        }
        for name, (_, mtime) in files.items():
            (tmp_path / name).write_bytes(b"half")
            if mtime is not None:
                os.utime(tmp_path / name, (mtime, mtime))
        saved[0].save(tmp_path / "model.pt")
        left = set(os.listdir(tmp_path))
    finally:
        sleeper.kill()
        sleeper.wait()
    for name, (fate, _) in files.items():
        assert (name in left) == (fate == "kept"), f"{name} should be {fate}"


CHILD = """
import sys, time, torch
from bnn_pyro.checkpoint import atomic_save
real = torch.save
def slow(obj, handle):
    handle.write(b"half a checkpoint"); handle.flush()
    print("writing", flush=True); time.sleep(60)
torch.save = slow
atomic_save({"a": torch.ones(3)}, sys.argv[1])
"""


def test_a_save_killed_mid_write_is_cleaned_up_by_the_next_load(tmp_path):
    path = str(tmp_path / "model.pt")
    atomic_save({"format_version": FORMAT_VERSION, "a": torch.zeros(3)}, path)
    before = open(path, "rb").read()
    env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, path], stdout=subprocess.PIPE, env=env, text=True
    )
    try:
        assert child.stdout.readline().strip() == "writing"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert child.returncode == -signal.SIGKILL
    assert len(os.listdir(tmp_path)) == 2, "the killed save left its temporary file"
    assert open(path, "rb").read() == before
    from bnn_pyro.checkpoint import read_checkpoint

    assert torch.equal(read_checkpoint(path)["a"], torch.zeros(3))
    assert os.listdir(tmp_path) == ["model.pt"]
