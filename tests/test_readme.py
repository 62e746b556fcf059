"""The README's code blocks run as written."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
import torch

import bnn_pyro as bp

README = Path(__file__).resolve().parents[1] / "README.md"
RESULTS_PAGE = README.parent / "docs" / "results.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_the_ten_line_example():
    first = _python_blocks()[0]
    assert len(first.strip().splitlines()) <= 12  # the ten lines (and their two imports)


def test_readme_python_blocks_run_as_written(tmp_path, monkeypatch):
    """Each block runs alone, in a fresh namespace, as a reader who copies one would run it,
    and leaves no folder behind but the files it names."""
    monkeypatch.chdir(tmp_path)  # the example writes model.pt
    torch.manual_seed(0)
    spaces = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for block in _python_blocks():
            namespace: dict = {}
            exec(compile(block, str(README), "exec"), namespace)  # noqa: S102
            spaces.append(namespace)
    ours = [
        f"{w.category.__name__}: {w.message}"
        for w in caught
        if issubclass(w.category, (bp.PosteriorCollapseWarning, bp.TrainingInstabilityWarning))
    ]
    assert not ours, ours  # a first run is not told it did something wrong
    assert (tmp_path / "model.pt").exists()
    assert spaces[0]["samples"].shape == (100, 5, 1)
    sklearn_block = next(ns for ns in spaces if "cross_val_score" in ns)
    assert sklearn_block["mean"].shape[0] == 500  # the scikit-learn block's predictions
    assert not [p.name for p in tmp_path.iterdir() if p.is_dir()]  # no checkpoints/ folder


@pytest.mark.parametrize("command", ["make demo", "make test"])
def test_readme_names_the_two_commands(command):
    assert command in README.read_text()


def _update_readme_module():
    import importlib.util

    path = README.parent / "benchmarks" / "update_readme.py"
    spec = importlib.util.spec_from_file_location("update_readme", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_results_are_the_benchmark_outputs():
    """Every results block of the README and the Results page equals what
    benchmarks/update_readme.py builds from results/; the README keeps the suite's time and the
    demo's, the Results page has every benchmark's (the README also the GPU run's)."""
    module = _update_readme_module()
    assert [Path(p) for p in module.PAGES] == [README, RESULTS_PAGE]
    readme, page = README.read_text(), RESULTS_PAGE.read_text()
    assert [m.group("name") for m in module.BLOCK.finditer(readme)] == [
        "suite_time",
        "demo",
        "gpu",
    ]
    assert set(m.group("name") for m in module.BLOCK.finditer(page)) == {
        "step_time",
        "pyro_path",
        "gpu",
        "local_reparam",
        "methods",
        "laplace_kron",
        "sgmcmc_defaults",
        "sgmcmc_peers",
        "sgmcmc_large_data",
        "memory",
        "distributed",
        "stacked",
        "stacked_chains",
        "threads",
        "last_layer_cost",
        "ood",
        "no_data",
        "no_data_activations",
        "co2",
        "rotated_digits",
        "uci",
        "uci_projection",
        "uci_intervals",
        "uci_gap",
        "uci_dev",
        "uci_laplace",
    }
    for text in (readme, page):
        assert module.render(text) == text, "run python benchmarks/update_readme.py"


def test_update_readme_rewrites_a_stale_block():
    module = _update_readme_module()
    stale = "x\n<!-- results:local_reparam -->\nold table\n<!-- /results:local_reparam -->\ny\n"
    fresh = module.render(stale)
    assert "old table" not in fresh
    assert "HiddenLayer: construction" in fresh  # a heading of local_reparam.md, demoted
    assert fresh.startswith("x\n") and fresh.endswith("<!-- /results:local_reparam -->\ny\n")


def _prose(text: str) -> str:
    """The README as typed by hand, tables included: less its results blocks, code (blocks and
    spans), images and version numbers (``Pyro 1.9``)."""
    text = re.sub(r"<!-- results:(\w+) -->.*?<!-- /results:\1 -->", "", text, flags=re.S)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    text = re.sub(r"\b(Pyro|pyro|torch|Python) \d+(\.\d+)+", "", text)
    return "\n".join(line for line in text.splitlines() if not line.startswith("!["))


@pytest.mark.parametrize("page", [README, RESULTS_PAGE], ids=["README", "results page"])
def test_readme_prose_quotes_no_measured_figure(page):
    """Measured figures (times, speed-ups, log-likelihoods) live only in the results blocks,
    which the scripts write; the prose points at them."""
    prose = _prose(page.read_text())
    patterns = [
        r"\d\s*(×|x\b)",  # speed-ups and ratios: 2.07×, 35x
        r"\d\s*(ms|µs|s)\b",  # times: 15 s, 0.34 ms
        r"[−-]\d+\.\d",  # log-likelihoods: -2.35
        r"\d+\.\d+",  # any other decimal
        r"\b20\d\d-\d\d-\d\d\b",  # dates of runs
        r"\d\s*%",  # percentages
    ]
    found = [m.group(0) for p in patterns for m in re.finditer(p, prose)]
    assert not found, found


def test_the_readme_names_every_method():
    """The method table and the scikit-learn paragraph list every name of ``bp.METHODS``, so a
    method added to the registry shows up in the README or fails here."""

    text = README.read_text()
    table = text.split("### Every method, one contract")[1].split("\n\n")[1]
    sklearn = text.split("pass scikit-learn's estimator checks")[1].split("\n\n")[0]
    for name in bp.METHODS:
        assert f"`{name}`" in table, f"{name} is missing from the method table"
        assert f"`{name}`" in sklearn, f"{name} is missing from the scikit-learn paragraph"
