"""Output of ``bnn-pyro``: all or nothing. Nothing half-written stays after a failure.

* :func:`staged_folder`: ``bnn-pyro fit --out DIR`` writes into a hidden staging folder; on
  success the files move into ``DIR`` (a new ``DIR`` is one rename); on any failure (an error, a
  diverged fit, Ctrl-C) the staging folder and any folder it created are removed, and an
  existing ``DIR`` keeps its old files untouched.
* :func:`removed_on_failure`: for commands that write in place (``bnn-pyro demo``): a folder
  that did not exist before is removed if the command fails.
* :func:`atomic_write_text`: a file is written to a temporary name and renamed over the target.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from bnn_pyro.exceptions import CLIError

__all__ = ["atomic_write_text", "removed_on_failure", "staged_folder"]


def _missing_parents(folder: str) -> list[str]:
    """The ancestors of ``folder`` (itself included) that do not exist, outermost first."""
    missing: list[str] = []
    path = os.path.abspath(folder)
    while not os.path.exists(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return missing[::-1]


def _remove_created(created: list[str]) -> None:
    if created:
        shutil.rmtree(created[0], ignore_errors=True)


@contextmanager
def staged_folder(out: str, option: str = "--out") -> Iterator[str]:
    """Yield a staging folder to write into; on success its files move into ``out``.

    Args:
        out: the output folder (created with its parents if missing).
        option: the option named in errors.

    Yields:
        The staging folder: ``out/.bnn-pyro-*`` if ``out`` exists (so the final moves are
        renames inside one folder), else a hidden sibling that is renamed to ``out``.

    Raises:
        CLIError: ``out`` is a file, or its folder cannot be created or written (naming
            ``option``), before any work inside starts.

    Example:
        >>> folder = os.path.join(tempfile.mkdtemp(), "run")
        >>> with staged_folder(folder) as stage:
        ...     _ = open(os.path.join(stage, "a.txt"), "w").write("done")
        >>> os.listdir(folder)
        ['a.txt']
        >>> try:
        ...     with staged_folder(folder) as stage:
        ...         _ = open(os.path.join(stage, "a.txt"), "w").write("half")
        ...         raise KeyboardInterrupt
        ... except KeyboardInterrupt:
        ...     pass
        >>> os.listdir(folder), open(os.path.join(folder, "a.txt")).read()
        (['a.txt'], 'done')
        >>> shutil.rmtree(os.path.dirname(folder))
    """
    out = os.path.abspath(out)
    if os.path.exists(out) and not os.path.isdir(out):
        raise CLIError(f"{option}: {out} is a file, not a folder")
    created = _missing_parents(os.path.dirname(out))
    exists = os.path.isdir(out)
    try:
        if created:
            os.makedirs(created[-1])
        stage = tempfile.mkdtemp(prefix=".bnn-pyro-", dir=out if exists else os.path.dirname(out))
        from bnn_pyro._checkpoint_file import umask_mode  # (torch: not at import, see cli)

        os.chmod(stage, umask_mode(directory=True))  # as mkdir() would make it, not 0o700
    except OSError as err:
        _remove_created(created)
        raise CLIError(f"{option}: cannot write in {out} ({err.strerror or err})") from None
    try:
        yield stage
        if exists:
            for name in sorted(os.listdir(stage)):
                os.replace(os.path.join(stage, name), os.path.join(out, name))
            os.rmdir(stage)
        else:
            os.rename(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        _remove_created(created)
        raise


@contextmanager
def removed_on_failure(folder: str) -> Iterator[None]:
    """Remove ``folder`` (and the parents made for it) if the work inside fails and it did not
    exist before; an existing folder is left alone.

    Example:
        >>> folder = os.path.join(tempfile.mkdtemp(), "new", "run")
        >>> try:
        ...     with removed_on_failure(folder):
        ...         os.makedirs(folder)
        ...         raise ValueError("bad")
        ... except ValueError:
        ...     pass
        >>> os.path.exists(os.path.dirname(folder))
        False
    """
    created = _missing_parents(folder)
    try:
        yield
    except BaseException:
        _remove_created(created)
        raise


def atomic_write_text(path: str, text: str, option: str = "--out") -> None:
    """Write ``text`` to ``path`` through a temporary file renamed over it: a reader sees the
    old file or the new one, never half of it; on failure the old file is intact.

    Raises:
        CLIError: the folder is missing or not writable (naming ``option``).

    Example:
        >>> path = os.path.join(tempfile.mkdtemp(), "p.csv")
        >>> atomic_write_text(path, "mean,std\\n")
        >>> open(path).read(), len(os.listdir(os.path.dirname(path)))
        ('mean,std\\n', 1)
    """
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CLIError(f"{option}: {path}: the folder {folder} does not exist")
    if os.path.isdir(path):
        raise CLIError(f"{option}: {path} is a folder, not a file")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".bnn-pyro-", suffix=".tmp", dir=folder)
        from bnn_pyro._checkpoint_file import umask_mode

        os.chmod(fd, umask_mode())  # as open() would make it, not mkstemp's 0o600
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except OSError as err:
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)
        raise CLIError(f"{option}: {path}: cannot write ({err.strerror or err})") from None
