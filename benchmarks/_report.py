"""Shared by the benchmark scripts: print a markdown report and, when asked, write it."""

from __future__ import annotations

import os


def publish(text: str, output: str | None) -> None:
    """Print ``text``; if ``output`` is a path, also write it there (creating its folder)."""
    print(text)
    if output is not None:
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
        with open(output, "w", encoding="utf-8") as handle:
            handle.write(text)


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def repo_command(parts: list[str], root: str = ROOT) -> str:
    """A command line as a reader of the results can type it in a clone of the repository: the
    interpreter as ``python``, paths inside the repository relative to its root, and a path
    outside it (a folder of the machine that ran it, absolute or ``../...``) as
    ``<dir>/<its last part>``.

    Example:
        >>> repo_command(["/opt/venv/bin/python", "-m", "benchmarks.uci", "--out",
        ...               "/tmp/runs/uci", "--data", "/repo/benchmarks/uci/data"], root="/repo")
        'python -m benchmarks.uci --out <dir>/uci --data benchmarks/uci/data'
        >>> repo_command(["alpha", "--data", "../elsewhere/uci"], root="/repo")
        'alpha --data <dir>/uci'
    """
    words = []
    for i, part in enumerate(parts):
        if i == 0 and os.path.isabs(part) and os.path.basename(part).startswith("python"):
            words.append("python")
        elif os.path.isabs(part) or part.startswith(".." + os.sep):
            full = os.path.normpath(os.path.join(root, part))
            inside = os.path.commonpath([root, full]) == root
            where = os.path.relpath(full, root) if inside else f"<dir>/{os.path.basename(full)}"
            words.append(where)
        else:
            words.append(part)
    return " ".join(words)
