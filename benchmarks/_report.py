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
