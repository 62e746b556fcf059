"""benchmarks/ood.py: one ``--quick`` run (its report: every shift, every contender, the
targets), and its helpers on small inputs whose answers can be checked by hand (the problems and
shifts in benchmarks/ood_data.py, the targets and markdown in benchmarks/ood_report.py).

The quick run's numbers mean nothing (two epochs) and are never compared with figures: what is
checked is that each cell the report promises is there and is a number of the right range.
"""

from __future__ import annotations

import doctest
import math
import re
import sys
from pathlib import Path

import pytest
import torch

import bnn_pyro as bp
from tests.benchmarks.in_process import run_main

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def ood_data(ood):
    """benchmarks/ood_data.py (the problems and their shifts), the module ``ood`` runs on."""
    return sys.modules[ood.Problem.__module__]


@pytest.fixture(scope="module")
def ood_report(ood):
    """benchmarks/ood_report.py (the targets and the markdown), the module ``ood`` runs on."""
    return sys.modules[ood.render.__module__]


@pytest.fixture(scope="module")
def quick(ood, tmp_path_factory) -> tuple[str, str]:
    """``ood.py --quick --out <tmp>``, once: (what it printed, what it wrote). Its ``main`` runs
    in this process (the script as ``ood`` loaded it; a fresh interpreter's start and imports
    cost more CPU-s than the quick run's own training), its random generators put back after."""
    out = tmp_path_factory.mktemp("ood") / "ood.md"
    return run_main(ood.main, ["--quick", "--out", str(out)]), out.read_text(encoding="utf-8")


def _sections(text: str) -> dict[str, str]:
    """``## heading`` -> the text under it."""
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def _rows(section: str) -> dict[str, list[str]]:
    """A markdown table's rows by their first cell (header and rule left out)."""
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    return {cells[0]: cells[1:] for cells in (_cells(line) for line in lines[1:])}


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _expected_rows(ood, ood_report) -> list[str]:
    return [
        ood_report.PLAIN,
        *(label for label, _, _ in ood.contenders()),
        ood_report.LAPLACE_TORCH,
    ]


# --- the quick run --------------------------------------------------------------------------
def test_quick_run_reports_every_shift_and_every_contender(ood, ood_report, quick):
    printed, written = quick
    assert printed.rstrip("\n") + "\n" == written  # publish: the text printed, and written
    assert written.startswith("# ") and "command: `python benchmarks/ood.py --quick --out " in (
        written
    )
    sections = _sections(written)
    assert list(sections) == [*ood_report.SHIFTS, "Targets"]
    methods = [label for label, _, _ in ood.contenders()]
    classifiers = {n for n in bp.METHODS if bp.registry.method_spec(n).classifies}
    assert set(methods) >= classifiers and "dkl" not in methods  # every classifier's name
    for shift in ood_report.SHIFTS:
        rows = _rows(sections[shift])
        assert list(rows) == _expected_rows(ood, ood_report), shift
        for name in [ood_report.PLAIN, *methods]:
            best, auroc, aupr, fpr, *per_score, acc = rows[name]
            assert best in ood_report.SCORES
            for cell in (auroc, aupr, fpr, acc):
                assert 0.0 <= float(cell) <= 1.0, (shift, name, cell)
            values = [float(c) for c in per_score if c != "—"]
            # the best score's AUROC is the largest of the row's AUROCs (3 decimals)
            assert math.isclose(float(auroc), max(values), abs_tol=1e-9), (shift, name)
            assert per_score[ood_report.SCORES.index("entropy")] != "—"


def test_quick_run_has_a_target_line_per_method_and_per_shift(ood, quick):
    targets = _sections(quick[1])["Targets"]
    lines = [_cells(line) for line in targets.splitlines() if line.startswith("| ")][1:]
    first = [cells[1] for cells in lines if cells[0].startswith("held-out classes")]
    second = [cells[1].split(": ")[0] for cells in lines if cells[0].startswith("best method")]
    assert first == [label for label, _, _ in ood.contenders()]
    assert second == ["held-out classes", "permuted pixels", "uniform noise", "moons"]
    assert all(cells[-1] in {"yes", "**no**", "n/a"} for cells in lines)


def test_quick_run_laplace_torch_rows_have_numbers(ood_report, quick):
    pytest.importorskip(
        "laplace", reason="laplace-torch, the peer, is not installed: pip install -e '.[ood]'"
    )
    sections = _sections(quick[1])
    for shift in ood_report.SHIFTS:
        best, auroc, *_ = _rows(sections[shift])[ood_report.LAPLACE_TORCH]
        assert best in ood_report.SCORES and 0.0 <= float(auroc) <= 1.0
    assert "| n/a |" not in sections["Targets"]


# --- the helpers ----------------------------------------------------------------------------
def test_ring_puts_points_at_the_asked_radius(ood_data):
    centre = torch.tensor([0.5, 0.25])
    points = ood_data.ring(400, radius=5.0, width=1.0, centre=centre.tolist(), seed=3)
    r = (points - centre).norm(dim=1)
    assert points.shape == (400, 2)
    assert float(r.min()) >= 5.0 - 1e-5 and float(r.max()) <= 6.0 + 1e-5
    angle = torch.atan2(points[:, 1] - centre[1], points[:, 0] - centre[0])
    assert torch.histc(angle, bins=4, min=-math.pi, max=math.pi).min() > 50  # all the way round
    thin = ood_data.ring(50, radius=2.0, width=0.0, centre=(0.0, 0.0), seed=0)
    assert torch.allclose(thin.norm(dim=1), torch.full((50,), 2.0))
    assert torch.equal(points, ood_data.ring(400, 5.0, 1.0, centre.tolist(), seed=3))
    assert not torch.equal(points, ood_data.ring(400, 5.0, 1.0, centre.tolist(), seed=4))
    with pytest.raises(ValueError, match="radius"):
        ood_data.ring(10, radius=0.0, width=1.0, centre=(0.0, 0.0), seed=0)


def test_pixel_permutation_is_a_seeded_permutation(ood_data):
    perm = ood_data.pixel_permutation(64, seed=0)
    assert sorted(perm.tolist()) == list(range(64))
    assert not torch.equal(perm, torch.arange(64))
    assert torch.equal(perm, ood_data.pixel_permutation(64, seed=0))
    assert not torch.equal(perm, ood_data.pixel_permutation(64, seed=1))
    with pytest.raises(ValueError, match="n_pixels"):
        ood_data.pixel_permutation(1, seed=0)


def test_uniform_noise_lies_in_the_asked_range_and_is_seeded(ood_data):
    x = ood_data.uniform_noise(300, 64, seed=5, low=-1.0, high=3.0)
    assert x.shape == (300, 64) and float(x.min()) >= -1.0 and float(x.max()) < 3.0
    assert abs(float(x.mean()) - 1.0) < 0.05  # the middle of [-1, 3)
    assert torch.equal(x, ood_data.uniform_noise(300, 64, seed=5, low=-1.0, high=3.0))
    with pytest.raises(ValueError, match="below"):
        ood_data.uniform_noise(3, 3, seed=0, low=1.0, high=1.0)


def test_digits_problem_splits_classes_and_permutes_the_in_distribution_images(ood_data):
    problem = ood_data.digits_problem(0)
    assert int(problem.y_train.max()) == 4 and int(problem.y_in.max()) == 4
    assert problem.classes == 5
    permuted = problem.shifts["permuted pixels"]
    perm = ood_data.pixel_permutation(64, 0)
    assert torch.equal(permuted, problem.X_in[:, perm])
    # the same pixels, moved: every image keeps its multiset of values
    assert torch.equal(permuted.sort(dim=1).values, problem.X_in.sort(dim=1).values)


def test_scores_from_has_mutual_information_only_for_several_samples_and_energy_with_logits(
    ood, ood_report
):
    logits = torch.tensor([[[2.0, 0.0]], [[0.0, 2.0]]])
    probs = logits.softmax(-1)
    both = ood.scores_from(probs, logits)
    assert set(both) == set(ood_report.SCORES)
    # two confident, opposite samples: the mean is flat, so entropy log 2, 1 - max p = 1/2
    assert math.isclose(float(both["entropy"]), math.log(2), rel_tol=1e-6)
    assert math.isclose(float(both["max-prob"]), 0.5, rel_tol=1e-6)
    assert float(both["mutual information"]) > 0
    assert "mutual information" not in ood.scores_from(probs[:1])
    assert "energy" not in ood.scores_from(probs)


def _row(**aurocs: float) -> dict:
    """A constructed table row: one AUROC per score (AUPR and FPR95 beside, unused here)."""
    names = {"mutual_information": "mutual information", "max_prob": "max-prob"}
    scores = {names.get(k, k): {"auroc": v, "aupr": v, "fpr95": 1 - v} for k, v in aurocs.items()}
    return {"scores": scores, "accuracy": 0.9}


def test_best_score_takes_the_highest_auroc_and_breaks_ties_in_score_order(ood_report):
    assert ood_report.best_score(_row(entropy=0.7, mutual_information=0.9)["scores"]) == (
        "mutual information"
    )
    assert ood_report.best_score(_row(energy=0.8, entropy=0.8)["scores"]) == "entropy"


def test_held_out_target_marks_met_and_unmet_methods(ood_report):
    shift = {
        ood_report.PLAIN: _row(entropy=0.90, energy=0.99),  # the threshold reads entropy: 0.92
        "a": _row(entropy=0.91, mutual_information=0.93),  # best 0.93: met
        "b": _row(entropy=0.915, max_prob=0.91),  # best 0.915: not met
        "c": "not installed",  # no numbers: no line
    }
    targets = ood_report.held_out_targets({"held-out classes": shift}, ["a", "b", "c"])
    assert [(t["method"], t["score"], t["met"]) for t in targets] == [
        ("a", "mutual information", True),
        ("b", "entropy", False),
    ]
    assert all(math.isclose(t["threshold"], 0.92) for t in targets)


def test_laplace_target_takes_the_best_method_per_shift(ood_report):
    results = {
        "held-out classes": {"a": _row(entropy=0.80), "b": _row(entropy=0.95),
                             ood_report.LAPLACE_TORCH: _row(entropy=0.955)},  # 0.95 >= 0.945: met
        "permuted pixels": {"a": _row(entropy=0.90), "b": _row(entropy=0.85),
                            ood_report.LAPLACE_TORCH: _row(entropy=0.93)},  # 0.90 < 0.92: unmet
        "uniform noise": {"a": _row(entropy=0.5), ood_report.LAPLACE_TORCH: "not installed"},
    }  # fmt: skip
    targets = ood_report.laplace_targets(results, ["a", "b"])
    assert [(t["shift"], t["method"], t["met"]) for t in targets] == [
        ("held-out classes", "b", True),
        ("permuted pixels", "a", False),
        ("uniform noise", "a", None),
    ]
    assert ood_report.every_shift({k: results[k] for k in list(results)[:1]}, ["a", "b"]) == ["b"]
    assert ood_report.every_shift(results, ["a", "b"]) == []  # "a" misses one, "b" lacks one


def test_report_without_laplace_torch_says_how_to_install_it(ood_report):
    not_installed = f"not installed (`{ood_report.INSTALL}`)"
    results = {
        shift: {ood_report.PLAIN: _row(entropy=0.8), "a": _row(entropy=0.9),
                ood_report.LAPLACE_TORCH: not_installed}
        for shift in ood_report.SHIFTS
    }  # fmt: skip
    text = ood_report.render(results, ["a"], ["a header line"])
    assert text.count(not_installed) == len(ood_report.SHIFTS)
    assert 'pip install ".[ood]"' in _sections(text)["Targets"]
    targets = [_cells(x) for x in _sections(text)["Targets"].splitlines() if x.startswith("| ")]
    assert [cells[-1] for cells in targets[1:]] == ["yes", "n/a", "n/a", "n/a", "n/a"]


def test_laplace_class_is_none_where_laplace_torch_cannot_be_imported(ood, monkeypatch):
    monkeypatch.setitem(sys.modules, "laplace", None)  # import laplace raises ImportError
    assert ood.laplace_class() is None


def test_the_examples_in_the_docstrings_run(ood, ood_data, ood_report):
    results = [
        doctest.testmod(m, optionflags=doctest.ELLIPSIS) for m in (ood, ood_data, ood_report)
    ]
    assert all(result.attempted > 0 for result in results)
    assert sum(result.attempted for result in results) > 5
    assert all(result.failed == 0 for result in results)
