"""``benchmarks/sgmcmc_large_data.py``: its quick run, its doctests, and a row of the committed
table re-derived."""

from __future__ import annotations

import doctest
import os
import re
import sys

import pytest

from tests.benchmarks.in_process import BENCHMARKS, generators_kept, run_script

RESULTS = os.path.join(BENCHMARKS, "results", "sgmcmc_large_data.md")


def _rows(text: str) -> dict[tuple[str, str], list[str]]:
    """The table's rows by (rows, how): their cells."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("| ") and line[2].isdigit():
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[(cells[0], cells[1])] = cells[2:]
    return rows


@pytest.fixture(scope="module")
def script():
    sys.path.insert(0, BENCHMARKS)
    try:
        import sgmcmc_large_data

        yield sgmcmc_large_data
    finally:
        sys.path.remove(BENCHMARKS)
        sys.modules.pop("sgmcmc_large_data", None)


def test_the_scripts_doctests_pass(script):
    with generators_kept():
        result = doctest.testmod(script, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 3 and result.failed == 0


def test_the_quick_run_warns_where_the_chain_runs_hot_and_not_on_the_whole_data_set():
    text = run_script("sgmcmc_large_data.py", "--quick")
    rows = _rows(text)
    assert len(rows) == 6
    # at 4,000 rows the default minibatch step heats the chain (about 4-fold at batch 128)
    hot = rows[("4,000", "minibatches of 128, default step")]
    assert hot[4] == "yes" and float(hot[3]) >= 2
    full = rows[("4,000", "whole data set per step (the default)")]
    # an exact chain: its mean kinetic temperature over 150 steps of 4 coordinates is 1 within
    # a few of its sds (about 0.06 at the chain's correlation time)
    assert full[4] == "no" and abs(float(full[3]) - 1) < 0.2
    assert text.rstrip().endswith(": met")


def test_the_committed_table_meets_its_check_and_its_hot_row_is_re_derived(script):
    text = open(RESULTS, encoding="utf-8").read()
    assert text.rstrip().endswith(": met")
    rows = _rows(text)
    assert {n for n, _ in rows} == {"1,000", "10,000", "100,000"}
    committed = rows[("10,000", "minibatches of 128, default step")]
    # the row whose warning the page is about, fitted again (a linear model: its chain forgets
    # a last-bit difference instead of amplifying it, so the printed figures repeat)
    with generators_kept():
        row = script.run_one(10_000, script.WAYS["minibatches of 128, default step"],
                             script.MINIBATCH_STEPS, script.FULL_STEPS)  # fmt: skip
    low, high = (float(v) for v in re.split("–", committed[1]))
    assert (row["ratio_min"], row["ratio_max"]) == pytest.approx((low, high), abs=0.006)
    assert row["heat"] == pytest.approx(float(committed[3]), abs=0.006)
    assert row["hot"] and committed[4] == "yes" and float(committed[3]) >= 2
