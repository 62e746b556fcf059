"""What an installed package carries: its version (one source), a license file that says what
``pyproject.toml`` says, and the ``py.typed`` marker that lets type checkers read the hints."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest
import tomllib

import bnn_pyro
from bnn_pyro.cli import main

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_version_is_the_installed_distributions():
    assert bnn_pyro.__version__ == importlib.metadata.version("bnn_pyro")
    assert bnn_pyro.__version__ == PROJECT["project"]["version"]


def test_the_command_prints_its_version(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"bnn-pyro {bnn_pyro.__version__}"


def test_the_license_file_is_the_declared_license():
    assert PROJECT["project"]["license"]["text"] == "MIT"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License\n")


def test_the_typing_marker_ships_with_the_package():
    assert (ROOT / "bnn_pyro" / "py.typed").is_file()
    assert "py.typed" in PROJECT["tool"]["setuptools"]["package-data"]["bnn_pyro"]
