"""UCI figures re-derived by re-running the committed run's final fits (no search).

``benchmarks/results/uci/uci.json`` keeps every split's chosen configuration; the final fit of
a split is trained again from it (:func:`benchmarks.uci.bundle.refit_final_group`: the splits
the run trained together in one stacked model, each with its own seed and rows) and scored by
today's protocol, and its test log-likelihood and RMSE are compared with the committed ones at
the printed precision of ``uci.md``'s tables (two decimals: within 0.005). One final fit per
data set (UCI row), chosen among those that reproduce on another machine: a fit whose training
amplifies float round-off (the deep ensembles at learning rate 1e-2, the 400-epoch Laplace
groups, energy's VI and dropout) lands up to 0.18 nats from the committed figure on a machine
other than the one that ran it. Measured here: within 3e-6 of the committed figures but
energy's SWAG group (1.4e-3).

Beside them: one split of the Laplace comparison with laplace-torch (``laplace_peer.json``),
a record of the interval benchmark (``intervals.json``) and a final fit of the tuned DKL row
of the dev report (``uci_dev_runs.jsonl``) re-run: bostonHousing's split 1, the one of the
sixteen measured on an Intel Xeon (made on an AMD EPYC) that reproduces (to 1e-6); the others
land 0.007-0.67 nats apart in test log-likelihood (yacht's splits 0-7, concrete's 0-2,
bostonHousing's 0 and 2-4), their exact GPs' training amplifying the CPUs' round-off.

The full list of what CI re-derives and what it cannot is in
``test_results_rederived.py``'s docstring.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import pytest

from benchmarks.uci.bundle import refit_final_group
from benchmarks.uci.runner import BenchmarkSettings

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "uci"
DATA = ROOT / "benchmarks" / "uci" / "data"
#: half a unit of the last digit uci.md prints (test log-likelihood and RMSE: two decimals)
PRINTED = 0.005


@pytest.fixture(scope="module")
def committed() -> dict:
    return json.loads((RESULTS / "uci.json").read_text())


def _settings(payload: dict) -> BenchmarkSettings:
    keep = ("quick", "validation_fraction", "validation_samples", "test_samples")
    return BenchmarkSettings(**{k: payload["settings"][k] for k in keep})


@pytest.mark.parametrize(
    ("dataset", "method", "split"),
    [
        ("bostonHousing", "laplace", 12),
        ("bostonHousing", "swag", 3),  # the final group of splits 3 and 17: ~2 s
        ("bostonHousing", "ensemble", 1),  # not stacked, lr 1e-3: < 1 s
        ("concrete", "dropout", 9),  # a group of one, 400 epochs: ~5 s
        ("energy", "swag", 0),  # the group of splits 0, 1, 3, 6, 12, 14, 16: ~7 s
        ("yacht", "swag", 10),  # a group of one: ~1 s
    ],
)
def test_a_committed_final_fit_gives_the_committed_scores(committed, dataset, method, split):
    records = [r for r in committed["runs"] if r["dataset"] == dataset and r["method"] == method]
    with warnings.catch_warnings():  # the methods' training notes are not what is tested
        warnings.simplefilter("ignore")
        scores = refit_final_group(str(DATA / dataset), records, split, _settings(committed))
    assert split in scores
    by_split = {r["split"]: r for r in records}
    for k, got in scores.items():
        record = by_split[k]
        for metric in ("test_ll", "rmse"):
            assert abs(got[metric] - record[metric]) <= PRINTED, (k, metric, got, record)
        if "coverage_95" in record:  # one test row may cross the interval's edge
            assert abs(got["coverage_95"] - record["coverage_95"]) <= 1 / record["n_test"]


@pytest.mark.parametrize(("dataset", "split"), [("bostonHousing", 1)])
def test_a_dev_rows_final_fit_gives_the_committed_scores(dataset, split):
    """A DKL record of ``uci_dev_runs.jsonl`` (tuned, trained alone) refitted from its chosen
    configuration, scored at the dev report's precision (two decimals)."""
    lines = (RESULTS.parent / "uci_dev_runs.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    records = [r for r in records if r["dataset"] == dataset and r["method"] == "dkl"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scores = refit_final_group(str(DATA / dataset), records, split, BenchmarkSettings())
    record = next(r for r in records if r["split"] == split)
    for metric in ("test_ll", "rmse"):
        assert abs(scores[split][metric] - record[metric]) <= PRINTED, (metric, scores, record)


@pytest.fixture(scope="module")
def peer_split(committed) -> tuple[dict, dict]:
    """bostonHousing split 12 of laplace_peer.json, re-run (~5 s): ``(committed, re-run)``."""
    pytest.importorskip("laplace", reason="laplace-torch, the peer: pip install -e '.[ood]'")
    from benchmarks.uci.laplace_peer import run_split

    payload = json.loads((RESULTS / "laplace_peer.json").read_text())
    want = next(r for r in payload["runs"] if r["dataset"] == "bostonHousing" and r["split"] == 12)
    harness = next(
        r
        for r in committed["runs"]
        if (r["dataset"], r["split"], r["method"]) == ("bostonHousing", 12, "laplace")
    )
    assert want["committed_test_ll"] == harness["test_ll"]  # the two files agree
    settings = BenchmarkSettings(**payload["settings"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = run_split(DATA / "bostonHousing", 12, settings, committed["runs"])
    return want, got


def test_a_laplace_peer_split_gives_the_committed_figures(peer_split):
    """The MAP net from uci.json's chosen configuration, our GLM, KFAC and sampled posteriors
    and laplace-torch's, each one's test log-likelihood, RMSE (the page prints 3 decimals:
    within 5e-4), coverage and prior precision (3 significant digits: 0.5% relative)."""
    want, got = peer_split
    assert got["config"] == want["config"] and got["seed"] == want["seed"]
    assert sorted(got["contenders"]) == sorted(want["contenders"])
    for name, ours in got["contenders"].items():
        theirs = want["contenders"][name]
        for metric in ("test_ll", "rmse"):
            assert abs(ours[metric] - theirs[metric]) <= 5e-4, (name, metric, ours, theirs)
        assert math.isclose(ours["prior_precision"], theirs["prior_precision"], rel_tol=5e-3)
        assert ours["coverage_95"] == theirs["coverage_95"], name


def test_a_laplace_peer_split_gives_the_committed_harness_score(peer_split):
    """The harness's score of the same net (the page's line "Ours closed-form GLM − the
    harness's score"), within 5e-4."""
    want, got = peer_split
    assert abs(got["harness_test_ll"] - want["harness_test_ll"]) <= 5e-4


def _numbers(record: dict, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in record.items():
        if isinstance(value, dict):
            out.update(_numbers(value, f"{prefix}{key}."))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[prefix + key] = float(value)
    return out


# Laplace's split is one of its 100-epoch MAP fits: its 400-epoch fits carry the CPU's own
# round-off into the intervals (split 12 on an AMD EPYC: raw 90% width 12.475 against the
# committed 12.514, 0.3%, the same code), while the 100-epoch records of bostonHousing (splits 1,
# 7, 16, 18) reproduce there within 2e-6 relative.
@pytest.mark.parametrize(("method", "split"), [("swag", 12), ("laplace", 7)])
def test_a_committed_interval_record_is_refitted_to_its_figures(method, split):
    """intervals.json's bostonHousing record of ``method`` on ``split`` re-fitted (~2 s): every
    interval's coverage, width and Winkler score, the scale factor, MACE and NLL. The pages
    print three decimals at most; each figure within 5e-4 (relative for those above 1)."""
    from benchmarks.uci.intervals import interval_task

    payload = json.loads((RESULTS / "intervals.json").read_text())
    want = next(
        r
        for r in payload["records"]
        if (r["dataset"], r["split"], r["method"]) == ("bostonHousing", split, method)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = interval_task(
            "bostonHousing", str(DATA / "bostonHousing"), split, method, want["config"], 1000
        )
    ours, theirs = _numbers(got), _numbers(want)
    del ours["seconds"], theirs["seconds"]
    assert sorted(ours) == sorted(theirs) and len(ours) > 40
    for key, value in theirs.items():
        assert math.isclose(ours[key], value, rel_tol=5e-4, abs_tol=5e-4), (key, ours[key], value)
