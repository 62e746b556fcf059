"""benchmarks/rotated_digits.py: the rotation against ``torch.rot90``, the ECE it reports against
a hand computation, and one ``--quick`` run (its three files, a row per contender and a column per
angle).

The quick run's numbers mean nothing (two epochs) and are never compared with figures: what is
checked is that every cell the report promises is there and is a number of the right range.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import sys
from pathlib import Path

import pytest
import torch

from tests.benchmarks.in_process import run_main

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPT = BENCHMARKS / "rotated_digits.py"


@pytest.fixture(scope="module")
def rd():
    """benchmarks/rotated_digits.py as a module; the modules it loads from its folder (ood.py
    and its siblings) are dropped again afterwards."""
    before = set(sys.modules)
    spec = importlib.util.spec_from_file_location("rotated_digits_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    for name in (spec.name, "ood", "ood_data", "ood_report", "_report"):
        if name not in before:
            sys.modules.pop(name, None)


@pytest.fixture(scope="module")
def quick(rd, tmp_path_factory) -> Path:
    """``rotated_digits.py --quick --out <tmp>``, once: the output folder. Its ``main`` runs in
    this process (the script as ``rd`` loaded it; a fresh interpreter's start and imports cost
    more CPU-s than the quick run's own training), its random generators put back after."""
    out = tmp_path_factory.mktemp("rotated_digits")
    run_main(rd.main, ["--quick", "--out", str(out)])
    return out


# --- the rotation --------------------------------------------------------------------------
def _image(side: int = 8) -> torch.Tensor:
    """Two ``side`` × ``side`` images without any rotational symmetry."""
    g = torch.Generator().manual_seed(0)
    return torch.rand(2, side, side, generator=g)


@pytest.mark.parametrize("degrees, turns", [(90, 1), (180, 2), (270, 3), (-90, -1)])
def test_rotation_by_quarter_turns_is_rot90(rd, degrees, turns):
    images = _image()
    expected = torch.rot90(images, turns, dims=(1, 2))
    assert not torch.allclose(expected, images, atol=1e-3)  # the check can fail
    torch.testing.assert_close(rd.rotate(images, degrees), expected, atol=1e-5, rtol=0)


def test_rotation_by_zero_is_the_identity(rd):
    images = _image(5)
    torch.testing.assert_close(rd.rotate(images, 0), images, atol=1e-6, rtol=0)


def test_rotation_by_45_keeps_the_centre_and_blanks_the_corners(rd):
    images = torch.ones(1, 9, 9)
    out = rd.rotate(images, 45)
    assert out[0, 4, 4].item() == pytest.approx(1.0)  # the centre pixel maps onto itself
    assert out[0, 0, 0].item() == pytest.approx(0.0, abs=1e-6)  # read from outside the image


def test_the_rotated_test_sets_are_the_test_images_rotated(rd):
    problem = rd.digits_problem(0)
    assert list(problem.shifts) == [str(a) for a in rd.ANGLES]
    square = problem.X_in.reshape(-1, 8, 8)
    torch.testing.assert_close(problem.shifts["0"], problem.X_in, atol=1e-6, rtol=0)
    turned = torch.rot90(square, 1, dims=(1, 2)).reshape(len(square), -1)
    torch.testing.assert_close(problem.shifts["90"], turned, atol=1e-5, rtol=0)
    # stratified: every class's share of the test part within one image of its share overall
    y = torch.cat([problem.y_train, problem.y_in])
    for c in range(10):
        whole = (y == c).sum().item() * len(problem.y_in) / len(y)
        assert abs((problem.y_in == c).sum().item() - whole) <= 1


# --- the scores ----------------------------------------------------------------------------
def test_ece_of_three_predictions_in_three_bins_matches_a_hand_computation(rd):
    # confidences 0.9 (right), 0.65 (wrong), 0.7 (right): three of the 15 bins of width 1/15,
    # (0.867, 0.933], (0.6, 0.667] and (0.667, 0.733], one prediction each, so the ECE is the
    # mean of |correct - confidence|: (0.1 + 0.65 + 0.3) / 3
    probs = torch.tensor([[0.9, 0.1], [0.65, 0.35], [0.3, 0.7]])
    labels = torch.tensor([0, 1, 1])
    by_hand = (abs(1 - 0.9) + abs(0 - 0.65) + abs(1 - 0.7)) / 3
    assert rd.metrics(probs, labels)["ece"] == pytest.approx(by_hand, abs=1e-6)


def test_ece_of_a_calibrated_prediction_is_zero(rd):
    # every prediction 0.75 sure of class 0, and class 0 is right for three of four
    probs = torch.tensor([[0.75, 0.25]] * 8)
    labels = torch.tensor([0, 0, 0, 1, 0, 1, 0, 0])
    scores = rd.metrics(probs, labels)
    assert scores["ece"] == pytest.approx(0.0, abs=1e-12)
    assert scores["accuracy"] == pytest.approx(0.75)
    assert scores["nll"] == pytest.approx(-(6 * math.log(0.75) + 2 * math.log(0.25)) / 8)


def test_nll_clamps_a_zero_probability_at_1e_12(rd):
    probs = torch.tensor([[1.0, 0.0]])
    assert rd.metrics(probs, torch.tensor([1]))["nll"] == pytest.approx(-math.log(1e-12))


# --- the quick run -------------------------------------------------------------------------
def test_quick_run_writes_its_three_files(quick):
    names = sorted(p.name for p in quick.iterdir())
    assert names == ["rotated_digits.json", "rotated_digits.md", "rotated_digits.png"]
    assert (quick / "rotated_digits.png").read_bytes()[:4] == b"\x89PNG"


def _tables(text: str) -> dict[str, list[list[str]]]:
    """``## heading`` -> the rows of the markdown table under it, each a list of cells."""
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    out = {}
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = [line for line in body.splitlines() if line.startswith("| ")]
        out[heading.strip()] = [[c.strip() for c in line.strip("| ").split("|")] for line in lines]
    return out


def test_quick_report_has_a_row_per_contender_and_a_column_per_angle(rd, quick):
    text = (quick / "rotated_digits.md").read_text(encoding="utf-8")
    tables = _tables(text)
    rows = [rd.PLAIN, *rd.classifiers()]
    assert "dkl" not in rows and "vi" in rows
    for metric in rd.METRICS:
        head, *body = tables[rd.TITLES[metric]]
        assert head == ["method", *(f"{a}°" for a in rd.ANGLES)]
        assert [cells[0] for cells in body] == rows
        for cells in body:
            values = [float(v) for v in cells[1:]]
            assert len(values) == len(rd.ANGLES)
            upper = -math.log(1e-12) if metric == "nll" else 1.0
            assert all(0.0 <= v <= upper + 1e-3 for v in values), cells
    reading = tables["Reading"]
    assert sorted(cells[0] for cells in reading[1:]) == sorted(rows)
    assert str(quick) not in text and str(BENCHMARKS) not in text  # no absolute paths
    assert "command: `python benchmarks/rotated_digits.py --quick --out <dir>/" in text


def test_quick_json_holds_the_same_rows_and_angles(rd, quick):
    data = json.loads((quick / "rotated_digits.json").read_text(encoding="utf-8"))
    assert data["angles"] == list(rd.ANGLES)
    assert list(data["results"]) == [rd.PLAIN, *rd.classifiers()]
    for by_angle in data["results"].values():
        assert list(by_angle) == [str(a) for a in rd.ANGLES]
        assert all(set(m) == set(rd.METRICS) for m in by_angle.values())
    assert data["settings"]["epochs"] == rd.QUICK.epochs
