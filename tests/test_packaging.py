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


#: The peers the parity tests run beside, by the extra that installs them and the module a
#: test imports (torch-uncertainty's SG-MCMC is loaded by its files where the package's own
#: import needs torchvision: benchmarks/sgmcmc_peer_runs.py).
PEERS = {
    "laplace": "ood",
    "posteriors": "peers",
    "torch_uncertainty": "peers",
    "mapie": "dev",
    "uncertainty_toolbox": "dev",
    "vbll": "peers",
}


@pytest.mark.parametrize("module", sorted(PEERS))
def test_ci_has_every_peer_so_no_parity_test_is_skipped(module):
    """In CI (``CI=true``, where ``make test`` installs ``.[dev,ood,peers]``) a missing peer
    fails here instead of skipping its parity tests in silence; on a developer's machine
    without the extra, this test skips with the command that installs it."""
    import importlib.util
    import os

    found = importlib.util.find_spec(module) is not None
    if not found and os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
        pytest.skip(f"{module} is not installed: pip install -e '.[{PEERS[module]}]'")
    assert found, f"{module} is missing in CI: make test installs .[dev,ood,peers]"
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    distribution = {"laplace": "laplace-torch", "torch_uncertainty": "torch-uncertainty"}
    name = distribution.get(module, module.replace("_", "-"))
    assert any(dep.lower().startswith(name) for dep in extras[PEERS[module]]), PEERS[module]
