"""The files of :mod:`bnn_pyro.checkpoint`: atomic writes, stale temporaries, verified reads.

**Writing.** :func:`atomic_save` writes to a temporary file in the same folder and renames it,
so a crash never leaves a half-written checkpoint behind, and a failed save (read-only folder,
full disk) leaves the old file as it was. The temporary file is named
``.tmp-<name>.<host>.<pid>.<random>.pt``; a crash that kills the process before it can remove
it leaves it behind, and the next save or load of the same file removes it (see
:func:`remove_stale_temporaries` for the rule that keeps other processes' files).

**Integrity.** ``torch.save`` writes a zip archive (tensors uncompressed) with a CRC-32 of every
record, but ``torch.load`` never checks them: one flipped bit inside a tensor loads silently.
:func:`load_file` checks the archive (its structure and the CRC-32 of every record, pickle and
tensors alike) before unpickling, so the file format needs no digest of its own and the files
of earlier versions are checked too. CRC-32 detects every 1-bit error and every burst of up to
32 bits, and any other damage but for a chance of 2**-32; it guards against accidental damage
(disk, copy, truncation), not a deliberate forgery, which could rewrite any stored digest too.
:func:`atomic_save` always writes the CRCs; an archive written by ``torch.save`` with
``torch.serialization.set_crc32_options(False)`` (every CRC zero) cannot be checked and is read
without it. Every problem with a file raises one :class:`~bnn_pyro.exceptions.CheckpointError`
naming the file and what is wrong (a missing file: :class:`FileNotFoundError`).
"""

from __future__ import annotations

import errno
import os
import re
import socket
import tempfile
import threading
import time
import zipfile
import zlib
from typing import Any

import torch

from bnn_pyro.exceptions import CheckpointError

__all__ = ["STALE_AFTER", "atomic_save", "load_file", "remove_stale_temporaries", "umask_mode"]

#: A temporary file of another host (a shared folder) or of an earlier naming (``.tmp-*.pt``)
#: is removed once it has not been written to for this long, in seconds: a live writer touches
#: its file continuously, so an hour without a write means the writer is gone.
STALE_AFTER = 3600.0

_ZIP_MAGIC = b"PK\x03\x04"


_UMASK_LOCK = threading.Lock()


def _current_umask() -> int:
    """The process's umask, read without changing it where Linux shows it (``/proc``): setting
    and restoring it, the only portable way, would briefly change it for every thread."""
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    with _UMASK_LOCK:  # elsewhere: set and restore, at least never two of ours at once
        mask = os.umask(0)
        os.umask(mask)
    return mask


def umask_mode(directory: bool = False) -> int:
    """The mode ``open()`` or ``mkdir()`` would give a new file (``0o666``) or folder
    (``0o777``) under the process's umask: ``tempfile`` makes its files ``0o600`` and its
    folders ``0o700``, which an atomic rename would otherwise keep.

    Example:
        >>> oct(umask_mode() | 0o022) in ("0o666", "0o644")  # 0o644 under the usual umask
        True
    """
    return (0o777 if directory else 0o666) & ~_current_umask()


def check_path(path: Any, name: str = "path") -> str:
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"{name} must be a str or os.PathLike, got {type(path).__name__}")
    return os.fspath(path)


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname())[:32] or "host"


def _temp_prefix(path: str) -> str:
    return f".tmp-{os.path.basename(path)[:100]}."


def _pid_alive(pid: int) -> bool:
    if os.name == "nt":  # os.kill(pid, 0) would terminate the process there: assume it lives
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. EPERM: it exists, owned by someone else
        return True
    return True


def remove_stale_temporaries(path: str | os.PathLike) -> list[str]:
    """Remove the temporary files that crashed saves of ``path`` left in its folder.

    A temporary file of this host is removed when the process that wrote it (the pid in its
    name) no longer runs: a process killed mid-write can remove nothing itself, and a live
    writer's file is never touched (a pid reused by another process only delays the removal;
    on Windows, where pids cannot be probed safely, the age rule below applies). One of another
    host, whose pids cannot be checked from
    here, or of the earlier naming ``.tmp-<random>.pt`` (whose target is unknown), is removed
    once it is :data:`STALE_AFTER` seconds old. Files that cannot be removed are left.

    Args:
        path: the checkpoint file (it need not exist).

    Returns:
        The paths removed.

    Example:
        >>> import os, tempfile
        >>> folder = tempfile.mkdtemp(); path = os.path.join(folder, "m.pt")
        >>> stale = os.path.join(folder, ".tmp-m.pt.somehost.999999999.abc.pt")
        >>> os.utime(open(stale, "wb").name, (0, 0))
        >>> [os.path.basename(p) for p in remove_stale_temporaries(path)]
        ['.tmp-m.pt.somehost.999999999.abc.pt']
    """
    path = check_path(path)
    folder = os.path.dirname(os.path.abspath(path))
    prefix, host, now = _temp_prefix(path), _host(), time.time()
    pattern = re.compile(r"([A-Za-z0-9_-]+)\.(\d+)\.[A-Za-z0-9_]+\.pt")
    old_naming = re.compile(r"\.tmp-[A-Za-z0-9_]{8}\.pt")
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        full = os.path.join(folder, name)
        match = pattern.fullmatch(name[len(prefix) :]) if name.startswith(prefix) else None
        try:
            if match and match[1] == host and os.name != "nt":
                stale = int(match[2]) != os.getpid() and not _pid_alive(int(match[2]))
            elif match or old_naming.fullmatch(name):
                stale = now - os.stat(full).st_mtime > STALE_AFTER
            else:
                continue
            if stale:
                os.remove(full)
                removed.append(full)
        except OSError:
            continue
    return removed


def atomic_save(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save(obj, path)`` through a temporary file in the same folder and a rename.

    The old file at ``path`` stays as it was if anything fails (an unwritable folder, a full
    disk, an error or interrupt while writing), and no temporary file is left behind; stale
    ones of earlier crashed saves of ``path`` are removed (:func:`remove_stale_temporaries`).
    The archive always carries the CRC-32 of each record, which :func:`load_file` checks.

    Raises:
        FileNotFoundError: the folder of ``path`` does not exist.
        OSError: the file cannot be written; the message names ``path``.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "x.pt")
        >>> atomic_save({"a": torch.ones(2)}, path)
        >>> torch.load(path, weights_only=True)["a"].tolist()
        [1.0, 1.0]
    """
    path = check_path(path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"the folder of {path!r} does not exist")
    remove_stale_temporaries(path)
    tmp = None
    crc = torch.serialization.get_crc32_options()
    try:
        prefix = f"{_temp_prefix(path)}{_host()}.{os.getpid()}."
        fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".pt", dir=folder)
        os.chmod(fd, umask_mode())
        with os.fdopen(fd, "wb") as handle:
            torch.serialization.set_crc32_options(True)
            torch.save(obj, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as err:
        reason = err.strerror or str(err) or type(err).__name__
        message = f"cannot write {path!r}: {reason} (the file there before, if any, is unchanged)"
        raise (OSError(err.errno, message) if err.errno else OSError(message)) from None
    finally:
        torch.serialization.set_crc32_options(crc)
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)


def _verify_archive(handle: Any, source: str) -> None:
    """Raise :class:`CheckpointError` unless ``handle`` is a whole zip archive whose records
    all match their CRC-32 (unchecked if every CRC is zero: written without them)."""
    try:
        archive = zipfile.ZipFile(handle)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        handle.seek(0)
        if handle.read(4) == _ZIP_MAGIC:
            raise CheckpointError(
                f"{source} is truncated or damaged: it starts as a checkpoint but its end (the "
                "archive directory) is missing or broken; an interrupted copy or save? Use a "
                "backup or save the model again"
            ) from None
        raise CheckpointError(
            f"{source} is not a bnn_pyro model file: not a zip archive written by torch.save "
            "(another kind of file, or damaged beyond recognition)"
        ) from None
    with archive:
        records = archive.infolist()
        if not any(info.CRC for info in records):
            return
        for info in records:
            try:
                with archive.open(info) as record:
                    crc = 0
                    while chunk := record.read(1 << 22):
                        crc = zlib.crc32(chunk, crc)
            except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError):
                crc = None
            if crc != info.CRC:
                raise CheckpointError(
                    f"{source} is corrupted: its record {info.filename!r} does not match the "
                    "CRC-32 stored when it was saved (the bytes changed since); use a backup or "
                    "save the model again"
                ) from None


def load_file(path: str | os.PathLike, map_location: Any = None) -> Any:
    """``torch.load(path, weights_only=True)`` of a file whose integrity is checked first.

    Args:
        path: a file written by :func:`atomic_save` (or ``torch.save``).
        map_location: as in ``torch.load``.

    Returns:
        What was saved.

    Raises:
        FileNotFoundError: no file at ``path``.
        CheckpointError: the file is empty, truncated, corrupted, not a zip archive of
            ``torch.save``, holds objects that ``weights_only=True`` refuses to unpickle, or
            cannot be read; the message names ``path`` and what is wrong.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "x.pt"); atomic_save({"a": 1}, path)
        >>> load_file(path)
        {'a': 1}
        >>> with open(path, "r+b") as f: _ = f.truncate(100)
        >>> load_file(path)
        Traceback (most recent call last):
          ...
        bnn_pyro.exceptions.CheckpointError: ... is truncated or damaged: ...
    """
    path = check_path(path)
    source = repr(path)
    remove_stale_temporaries(path)
    try:
        handle = open(path, "rb")  # noqa: SIM115 (closed below)
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, f"no checkpoint file at {source}") from None
    except IsADirectoryError:
        raise CheckpointError(f"{source} is a folder, not a checkpoint file") from None
    except OSError as err:
        raise CheckpointError(f"{source} cannot be read: {err.strerror or err}") from None
    with handle:
        try:
            size = os.fstat(handle.fileno()).st_size
            if size == 0:
                raise CheckpointError(
                    f"{source} is empty (0 bytes): not a checkpoint; the save or copy that "
                    "wrote it was probably interrupted"
                )
            _verify_archive(handle, source)
            handle.seek(0)
            return torch.load(handle, map_location=map_location, weights_only=True)
        except CheckpointError:
            raise
        except OSError as err:
            raise CheckpointError(f"{source} cannot be read: {err.strerror or err}") from None
        except Exception as err:  # noqa: BLE001 (torch's own texts advise the unsafe load)
            text = str(err)
            if "weights_only" in text or "Unpickler" in text or "GLOBAL" in text:
                raise CheckpointError(
                    f"{source} is not a bnn_pyro model file: it holds pickled objects other than "
                    "tensors and plain data (e.g. code to run), which bnn_pyro never loads"
                ) from None
            first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
            raise CheckpointError(f"{source} cannot be read as a checkpoint: {first}") from None
