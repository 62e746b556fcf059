"""The pages a user reads speak the user's language: no project-internal words.

A user of the library has the README, the documentation site, the command's help and the
notebooks; they have none of the project's internal history (its issue numbers, the origin
names of its parts, the development machine's folders). This test greps those pages for the
internal words."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from bnn_pyro.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
#: What a user cannot follow: an issue number, an origin name, the shared development folder.
INTERNAL = re.compile(
    r"seed system|\bmission\b|\bissues? \d+|\(issue|\.\./shared\b|shared folder"
    r"|\bseeds? 00\d",
    re.IGNORECASE,
)
PAGES = sorted(
    [
        ROOT / "README.md",
        ROOT / "CHANGELOG.md",
        ROOT / "benchmarks" / "uci" / "data" / "README.md",
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "notebooks").glob("*.py"),
        *(ROOT / "notebooks").glob("*.ipynb"),
        *(ROOT / "notebooks").glob("*.md"),
    ]
)


def _internal_words(text: str) -> list[str]:
    return [
        f"line {text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
        for m in INTERNAL.finditer(text)
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_has_no_internal_words(page):
    found = _internal_words(page.read_text(encoding="utf-8"))
    assert not found, f"{page.relative_to(ROOT)}: {found}"


def _helps(parser: argparse.ArgumentParser) -> list[str]:
    texts = [parser.format_help()]
    for action in parser._actions:  # argparse keeps its subcommands here, no public accessor
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                texts.extend(_helps(sub))
    return texts


def test_command_help_has_no_internal_words():
    helps = _helps(build_parser())
    assert len(helps) >= 4  # bnn-pyro and its subcommands
    found = [w for text in helps for w in _internal_words(text)]
    assert not found, found


def test_the_grep_sees_internal_words():
    """The pattern catches each kind of word (so a pass above means something)."""
    text = "see issue 12\n(issue) seed 001 and the mission\n--data ../shared/data"
    assert len(_internal_words(text)) == 5
    assert not _internal_words("a random seed 0, the issue's target, shared weights")
    assert not _internal_words("[`SharedNormal`](../SharedNormal/)")  # a sibling API page


#: A folder of the machine that wrote a page: an absolute path under the usual roots, or the
#: development folder beside the clone. ``<dir>`` stands for such a folder in a recorded command.
MACHINE_PATH = re.compile(r"(?<![\w.<>/-])/(?:work|tmp|root|home|Users|opt|mnt|var)/|\.\./shared")
RECORDS = sorted(
    [
        *PAGES,
        *(ROOT / "benchmarks" / "results").rglob("*.md"),
        *(ROOT / "benchmarks" / "results").rglob("*.json"),
    ]
)


@pytest.mark.parametrize("page", RECORDS, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_has_no_machine_path(page):
    """Results record their commands as a reader types them in a clone
    (``benchmarks/_report.py:repo_command``), not with the folders of the machine that ran them;
    the notebooks' outputs carry none either (a warning's kernel path among them)."""
    text = page.read_text(encoding="utf-8")
    found = [
        f"line {text.count(chr(10), 0, m.start()) + 1}: {text[m.start() : m.start() + 40]!r}"
        for m in MACHINE_PATH.finditer(text)
    ]
    assert not found, f"{page.relative_to(ROOT)}: {found}"


def test_recorded_commands_are_relative_to_the_clone():
    import importlib.util

    spec = importlib.util.spec_from_file_location("report", ROOT / "benchmarks" / "_report.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    argv = ["/venv/bin/python3.11", "-m", "benchmarks.uci", "--data", str(ROOT / "data"), "--out"]
    line = report.repo_command([*argv, "/scratch/run1"], root=str(ROOT))
    assert line == "python -m benchmarks.uci --data data --out <dir>/run1"
    assert not MACHINE_PATH.search(line)
