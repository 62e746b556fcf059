"""The notebooks: each runs top to bottom in fast mode, and each committed copy is executed.

Each notebook's cells live in ``notebooks/NAME.py`` (jupytext percent format), paired with
``NAME.ipynb``, committed executed at full size by ``notebooks/run.py``. Here the ``.py``
sources are executed again in fast mode (``BNN_PYRO_NOTEBOOK_FAST=1``: few epochs, a few
seconds each) with the ``python3`` kernel of the running interpreter, and the committed copies
are checked against their sources and for outputs, plots and errors.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
jupytext = pytest.importorskip("jupytext")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from nbclient import NotebookClient  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
UCI_RESULTS = ROOT / "benchmarks" / "results" / "uci" / "uci.json"
FAST_ENV = "BNN_PYRO_NOTEBOOK_FAST"
TIMEOUT = 300  # seconds per cell; the fast mode needs a few seconds per notebook
NAMES = sorted(p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.py"))


def _source(name: str) -> nbformat.NotebookNode:
    """The unexecuted notebook ``name``, read from its jupytext source ``NAME.py``."""
    return jupytext.read(NOTEBOOKS / f"{name}.py")


def _cells(nb: nbformat.NotebookNode) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source) for c in nb.cells]


def _run(nb: nbformat.NotebookNode) -> None:
    NotebookClient(
        nb, timeout=TIMEOUT, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    ).execute()


def _outputs(nb: nbformat.NotebookNode, output_type: str) -> list:
    return [
        out
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.outputs
        if out.output_type == output_type
    ]


def _smoke_results(folder: Path) -> Path:
    """A ``--quick`` benchmark run on a small synthetic data set (seconds), for notebook 04
    when the full results are not in the repository."""
    import torch

    from benchmarks.uci import main, write_uci_folder

    g = torch.Generator().manual_seed(0)
    X = torch.randn(80, 3, generator=g)
    y = 10.0 + 5.0 * X[:, 0] - 2.0 * X[:, 1] ** 2 + 0.5 * torch.randn(80, generator=g)
    (folder / "data").mkdir()
    write_uci_folder(folder / "data" / "toy", X, y, n_splits=2)
    argv = ["--data", str(folder / "data"), "--splits", "0-1", "--quick", "--quiet"]
    argv += ["--methods", "vi,dropout", "--out", str(folder / "out")]
    assert main(argv) == 0
    return folder / "out" / "uci.json"


def test_kernel_is_this_interpreter() -> None:
    """nbclient's ``python3`` kernel must be the interpreter running the tests (the venv), and
    import the same ``bnn_pyro`` (the kernel inherits ``PYTHONPATH``)."""
    import bnn_pyro

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import sys; print(sys.prefix)"),
        nbformat.v4.new_code_cell("import bnn_pyro; print(bnn_pyro.__file__)"),
    ]
    _run(nb)

    def printed(cell: Any) -> str:  # stdout only: importing may warn on stderr (tqdm's notebook
        # mode, now and then), which came first in the outputs and failed this test
        return "".join(o.text for o in cell.outputs if o.get("name") == "stdout").strip()

    assert printed(nb.cells[0]) == sys.prefix
    assert printed(nb.cells[1]) == bnn_pyro.__file__


def test_the_five_notebooks_are_found() -> None:
    """A glob that matched nothing would parametrize the tests below away."""
    assert NAMES == [
        "01_toy_regression",
        "02_classification",
        "03_priors_and_guides",
        "04_uci_benchmark",
        "05_uncertainty_you_can_act_on",
    ]


@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_in_fast_mode(
    name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(FAST_ENV, "1")  # the kernel inherits the environment
    if name.startswith("04") and not UCI_RESULTS.is_file():
        monkeypatch.setenv("BNN_PYRO_UCI_RESULTS", str(_smoke_results(tmp_path)))
    nb = _source(name)
    _run(nb)  # raises CellExecutionError on the first failing cell
    assert not _outputs(nb, "error")
    assert "mode: fast" in nb.cells[1].outputs[0].text


@pytest.mark.parametrize("name", NAMES)
def test_committed_copy_matches_its_source_and_is_executed_at_full_size(name: str) -> None:
    path = NOTEBOOKS / f"{name}.ipynb"
    assert path.is_file(), f"{path} is missing: run notebooks/run.py {name[:2]}"
    nb = nbformat.read(path, as_version=4)
    source = _source(name)
    assert _cells(nb) == _cells(source), (
        f"{path.name} differs from its source {name}.py: run notebooks/run.py {name[:2]}"
    )
    for paired in (nb, source):  # jupytext pairing, so Jupyter keeps both files in sync
        assert paired.metadata.get("jupytext", {}).get("formats") == "ipynb,py:percent"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), f"{path.name} is not executed"
    assert not _outputs(nb, "error")
    # no warning at full size: a newcomer reading the committed outputs sees none
    warned = [o.text[:200] for o in _outputs(nb, "stream") if o.get("name") == "stderr"]
    assert not warned, f"{path.name} printed to stderr (a warning?): {warned}"
    assert "mode: full" in code[0].outputs[0].text, f"{path.name} was executed in fast mode"
    plots = [o for kind in ("display_data", "execute_result") for o in _outputs(nb, kind)]
    assert any("image/png" in o.get("data", {}) for o in plots), f"{path.name} has no plot"
    # modest size on a repository page: no giant outputs
    assert len(json.dumps(nb)) < 2_000_000
