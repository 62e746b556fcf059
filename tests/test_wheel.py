"""The wheel holds what the library needs: built from a copy of the sources, installed with
``--no-deps`` into a folder of its own beside this environment's torch and pyro, every module
imports from it and the README's ten lines run as written."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Every module of the installed package imports, from the installed copy (not this checkout,
# which the editable install would otherwise supply), and the ten lines run.
CHECK = """
import importlib, pkgutil, sys
import bnn_pyro
assert bnn_pyro.__file__.startswith(sys.argv[1]), bnn_pyro.__file__
names = [m.name for m in pkgutil.walk_packages(bnn_pyro.__path__, "bnn_pyro.")]
for name in names:
    module = importlib.import_module(name)
    assert module.__file__.startswith(sys.argv[1]), module.__file__
print(len(names), "modules")
import importlib.resources
assert importlib.resources.files("bnn_pyro").joinpath("py.typed").is_file()
exec(open(sys.argv[2]).read())
print("ten lines ran")
"""


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to list the sources")
def test_the_wheel_installs_without_dependencies_and_runs_the_ten_lines(tmp_path):
    tracked = subprocess.run(
        ["git", "ls-files", "pyproject.toml", "README.md", "LICENSE", "bnn_pyro"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    if not tracked:
        pytest.skip("not a git checkout")
    source = tmp_path / "source"
    for name in tracked:  # a copy: building writes build/ and egg-info next to the sources
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path),
                    str(source)], check=True, capture_output=True)  # fmt: skip
    (wheel,) = tmp_path.glob("bnn_pyro-*.whl")
    site = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True)  # fmt: skip
    ten_lines = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)[0]
    (tmp_path / "ten_lines.py").write_text(ten_lines)
    run = subprocess.run(
        [sys.executable, "-c", CHECK, str(site), str(tmp_path / "ten_lines.py")],
        cwd=tmp_path, capture_output=True, text=True,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg"},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "ten lines ran" in run.stdout
    assert (tmp_path / "model.pt").is_file()
