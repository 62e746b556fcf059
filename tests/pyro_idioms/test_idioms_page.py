"""The "Pyro idioms" page runs as written: every Python block, each alone in a fresh namespace,
as a reader who copies one would run it; and what each block shows holds."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pyro
import pytest
import torch

PAGE = Path(__file__).resolve().parents[2] / "docs" / "pyro-idioms.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)


def _first_line(block: str) -> str:
    return next(ln for ln in block.splitlines() if ln.strip() and not ln.startswith("import"))


@pytest.mark.parametrize("block", _blocks(), ids=lambda b: _first_line(b)[:40])
def test_each_block_runs_as_written(block: str) -> None:
    torch.manual_seed(0)
    pyro.set_rng_seed(0)
    before = sorted(pyro.get_param_store().keys())
    namespace: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # JIT's tracer warnings, short fits' collapse checks
        exec(compile(block, str(PAGE), "exec"), namespace)  # noqa: S102
    assert sorted(pyro.get_param_store().keys()) == before  # no block leaves params behind
    if "draws" in namespace and "obs" in namespace["draws"]:
        assert namespace["draws"]["obs"].shape == (50, 8, 1)
    if "mean" in namespace:
        rows = 20 if "mcmc" in namespace else 5
        assert namespace["mean"].shape == (rows, 1)
        assert bool(torch.isfinite(namespace["mean"]).all())
    if "mcmc" in namespace:  # NUTS's draws, read by predict: the least-squares line, which
        # the posterior mean is under a N(0, 1) prior on 20 rows (the shrinkage moves it ~1e-3);
        # the Monte Carlo error of 200 draws of a line with posterior sd ~0.03 is ~0.005
        X, y = namespace["X"], namespace["y"]
        phi = torch.cat([X, torch.ones_like(X)], 1)
        ols = phi @ torch.linalg.lstsq(phi, y[:, None]).solution
        torch.testing.assert_close(namespace["mean"], ols, atol=0.03, rtol=0)


def test_the_page_is_in_the_site_navigation() -> None:
    nav = (PAGE.parents[1] / "mkdocs.yml").read_text(encoding="utf-8")
    assert "pyro-idioms.md" in nav
