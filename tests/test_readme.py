"""The README's code blocks run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_the_ten_line_example():
    first = _python_blocks()[0]
    assert len(first.strip().splitlines()) <= 12  # the ten lines (and their two imports)


def test_readme_python_blocks_run_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the example writes model.pt
    torch.manual_seed(0)
    namespace: dict = {}
    for block in _python_blocks():
        exec(compile(block, str(README), "exec"), namespace)  # noqa: S102
    assert (tmp_path / "model.pt").exists()
    assert namespace["samples"].shape == (100, 5, 1)
    assert namespace["mean"].shape[0] == 500  # the scikit-learn block's predictions


@pytest.mark.parametrize("command", ["make demo", "make test"])
def test_readme_names_the_two_commands(command):
    assert command in README.read_text()
