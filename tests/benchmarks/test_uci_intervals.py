"""The UCI interval benchmark: a smoke run of the command on a toy data set, and its parts
against independent computations."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks.uci import write_uci_folder
from benchmarks.uci.interval_report import LABELS, interval_targets
from benchmarks.uci.intervals import FrozenPredictive, interval_record, mace, main
from benchmarks.uci.method import DatasetInfo
from benchmarks.uci.registry import get_method
from bnn_pyro.metrics import calibration_errors, gaussian_mixture_cdf

pytest.importorskip("mapie")


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    """Two splits x two methods of a toy set, run through the command (3 epochs, 10 samples)."""
    root = tmp_path_factory.mktemp("intervals")
    g = torch.Generator().manual_seed(0)
    X = torch.randn(150, 2, generator=g)
    (root / "data").mkdir()
    write_uci_folder(root / "data" / "toy", X, X[:, 0] + 0.3 * torch.randn(150, generator=g))
    info = DatasetInfo("toy", 100, 2)
    runs = [
        {"dataset": "toy", "split": k, "method": m, "config": get_method(m).grid(info, True)[0]}
        for k in (0, 1)
        for m in ("ensemble", "laplace")
    ]
    (root / "uci.json").write_text(json.dumps({"methods": {"ensemble": {}, "laplace": {}},
                                               "runs": runs}))  # fmt: skip
    argv = ["--runs", str(root / "uci.json"), "--data", str(root / "data"), "--out",
            str(root / "out"), "--readme", str(root / "readme.md"), "--epochs", "3",
            "--samples", "10"]  # fmt: skip
    assert main(argv) == 0
    return root, argv


def test_the_command_writes_every_kind_and_the_targets(toy_run):
    root, _ = toy_run
    records = json.loads((root / "out" / "intervals.json").read_text())["records"]
    assert [(r["split"], r["method"]) for r in records] == [
        (0, "ensemble"), (1, "ensemble"), (0, "laplace"), (1, "laplace")]  # fmt: skip
    full = (root / "out" / "intervals.md").read_text()
    for label in LABELS.values():
        assert label in full
    for section in ("90% intervals: coverage", "95% intervals: mean width", "Winkler", "MACE"):
        assert section in full
    readme = (root / "readme.md").read_text()
    assert "## Targets" in readme and "equals MAPIE" in readme and "intervals.md" in readme


def test_a_second_run_resumes_without_refitting(toy_run):
    root, argv = toy_run
    before = (root / "out" / "intervals.jsonl").read_text()
    assert main(argv) == 0
    assert (root / "out" / "intervals.jsonl").read_text() == before


def test_mace_from_the_pit_is_the_library_mace():
    """The benchmark's MACE of the raw predictive, computed from its PIT values, equals
    bnn_pyro.metrics.calibration_errors on the same mixture (tested there against
    uncertainty-toolbox)."""
    g = torch.Generator().manual_seed(2)
    locs = torch.randn(5, 300, 1, generator=g, dtype=torch.float64)
    scales, y = 0.4, 1.5 * torch.randn(300, 1, generator=g, dtype=torch.float64)
    ours = mace(gaussian_mixture_cdf(locs, scales, y))
    assert ours == pytest.approx(calibration_errors(locs, scales, y).mace, abs=1e-12)


def test_the_frozen_predictive_answers_only_for_its_own_rows():
    x = torch.zeros(3, 1)
    frozen = FrozenPredictive([(x, (torch.ones(1, 3, 1), 1.0))])
    assert frozen.predictive_gaussian(x)[1] == 1.0
    with pytest.raises(KeyError):
        frozen.predictive_gaussian(x.clone())  # equal values, other rows


def test_scaled_intervals_are_the_closed_form():
    """The scaled kind is μ ± z s σ with s² the mean squared standardised calibration residual
    (one Gaussian per point here, so μ and σ are the model's own)."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(400, 1, generator=g, dtype=torch.float64)
    y = x + torch.randn(400, 1, generator=g, dtype=torch.float64)
    cal = (x[:200], y[:200], (x[None, :200], 0.5))
    test = (x[200:], y[200:], (x[None, 200:], 0.5))
    record = interval_record(cal, test, y_std=3.0)
    s = float(((y[:200] - x[:200]) / 0.5).pow(2).mean().sqrt())
    assert record["scale_factor"] == pytest.approx(s, rel=1e-12)
    width = 2 * 1.6448536269514722 * s * 0.5 * 3.0  # in original units (y_std 3)
    assert record["intervals"]["0.1"]["scaled"]["width"] == pytest.approx(width, rel=1e-9)


def _summary(coverage: float, norm_width: float, n_cal: float = 99.0) -> dict:
    summary = {f"0.1/{kind}/coverage": (coverage, 0.0) for kind in LABELS}
    summary |= {
        "0.1/conformal_abs/width": (1.0, 0.0),
        "0.1/conformal_norm/width": (norm_width, 0.0),
    }
    summary |= {"n_cal": (n_cal, 0.0), "nll/raw": (1.0, 0.1), "nll/scaled": (1.05, 0.0)}
    return summary | {"max": {"mapie_gap": 0.0}}


def test_the_targets_use_their_bounds():
    """Coverage 0.92 with n_cal 99 is inside [0.90, 0.90 + 0.01 + 0.01]; 0.921 is not; the
    normalised interval narrower on 2 of 4 sets misses ">= 3 of 4"."""
    summary = {(d, "vi"): _summary(0.92, 0.9 if d in "ab" else 1.1) for d in "abcd"}
    summary[("d", "vi")] = _summary(0.921, 1.1)
    rows = interval_targets(summary)
    coverage = [r["met"] for r in rows if r["target"].startswith("conformal coverage")]
    assert coverage == [True] * 9 + [False] * 3
    narrower = [r for r in rows if r["target"].startswith("normalised narrower")]
    assert [(r["figure"], r["met"]) for r in narrower] == [("2 of 4", False)]
    nll = [r["met"] for r in rows if r["target"].startswith("scaled NLL")]
    assert nll == [True] * 4  # 1.05 <= 1.0 + 0.1


def test_a_committed_run_renders_again_from_its_json(toy_run):
    """The records file (JSON lines) is not committed; the JSON is, and re-rendering from it
    refits nothing and writes the same report."""
    root, argv = toy_run
    before = (root / "out" / "intervals.md").read_text()
    (root / "out" / "intervals.jsonl").unlink()
    assert main(argv) == 0
    assert (root / "out" / "intervals.md").read_text() == before
