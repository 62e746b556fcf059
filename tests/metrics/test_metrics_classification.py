"""Classification metrics against scikit-learn and brute-force loops."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.metrics import accuracy_score, brier_score_loss, log_loss

from bnn_pyro.metrics import (
    accuracy,
    brier_score,
    expected_calibration_error,
    nll,
    reliability_curve,
)


def _random_probs(seed: int, n: int = 200, c: int = 4):
    g = torch.Generator().manual_seed(seed)
    logits = 2.0 * torch.randn(n, c, generator=g, dtype=torch.float64)
    probs = torch.softmax(logits, dim=1)
    labels = torch.multinomial(probs, 1, generator=g).squeeze(1)  # roughly calibrated labels
    return probs, labels


def test_nll_accuracy_brier_match_sklearn():
    probs, labels = _random_probs(0)
    p, t = probs.numpy(), labels.numpy()
    classes = list(range(4))
    # float64 throughout; sklearn clips at float64 eps ~ 2e-16, far below every p here.
    assert nll(probs, labels) == pytest.approx(log_loss(t, p, labels=classes), rel=1e-12)
    assert accuracy(probs, labels) == accuracy_score(t, p.argmax(axis=1))
    expected_brier = brier_score_loss(t, p, labels=classes, scale_by_half=False)
    assert brier_score(probs, labels) == pytest.approx(expected_brier, rel=1e-12)


def test_binary_brier_is_twice_the_binary_form():
    probs, labels = _random_probs(1, c=2)
    binary = brier_score_loss(labels.numpy(), probs[:, 1].numpy())
    assert brier_score(probs, labels) == pytest.approx(2 * binary, rel=1e-12)


def test_float32_softmax_rows_are_accepted():
    probs, labels = _random_probs(2, c=10)
    got = nll(probs.float(), labels)
    # float32 probabilities: log differs by ~1e-7 relative.
    assert got == pytest.approx(log_loss(labels.numpy(), probs.numpy(), labels=range(10)), rel=1e-5)


def test_nll_clips_zero_probability_of_the_true_label():
    probs = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    labels = torch.tensor([1, 0])
    assert nll(probs, labels) == pytest.approx((-math.log(1e-12) - math.log(0.5)) / 2)
    assert nll(probs, labels, eps=1e-3) == pytest.approx((-math.log(1e-3) - math.log(0.5)) / 2)


def _brute_force_bins(probs: np.ndarray, labels: np.ndarray, n_bins: int):
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    conf, pred = probs.max(axis=1), probs.argmax(axis=1)
    rows = []
    for b in range(n_bins):
        members = [
            i
            for i in range(len(conf))
            if edges[b] < conf[i] <= edges[b + 1] or (b == 0 and conf[i] == 0)
        ]
        if members:
            c = float(np.mean([conf[i] for i in members]))
            a = float(np.mean([pred[i] == labels[i] for i in members]))
        else:
            c = a = math.nan
        rows.append((c, a, len(members)))
    return rows


@pytest.mark.parametrize("n_bins", [1, 5, 15])
def test_reliability_curve_and_ece_match_a_brute_force_loop(n_bins):
    probs, labels = _random_probs(3, n=150, c=3)
    rows = _brute_force_bins(probs.numpy(), labels.numpy(), n_bins)
    curve = reliability_curve(probs, labels, n_bins=n_bins)
    np.testing.assert_allclose(curve.confidences.numpy(), [r[0] for r in rows], rtol=1e-12)
    np.testing.assert_allclose(curve.accuracies.numpy(), [r[1] for r in rows], rtol=1e-12)
    assert curve.counts.tolist() == [r[2] for r in rows]
    ece = sum(r[2] / 150 * abs(r[1] - r[0]) for r in rows if r[2])
    assert expected_calibration_error(probs, labels, n_bins=n_bins) == pytest.approx(ece, rel=1e-12)


def test_bins_are_closed_on_the_right():
    # Confidences exactly on an edge (0.5 and 0.75 are exact in binary) go to the lower bin,
    # confidence 1 to the last one: bin b is (b / B, (b + 1) / B].
    probs = torch.tensor([[0.5, 0.5], [0.25, 0.75], [1.0, 0.0]])
    curve = reliability_curve(probs, torch.tensor([0, 1, 0]), n_bins=4)
    assert curve.counts.tolist() == [0, 1, 1, 1]
    assert curve.confidences[1:].tolist() == [0.5, 0.75, 1.0]


def test_ece_extremes():
    # Always certain and always wrong: accuracy 0 at confidence 1, so ECE = 1.
    probs = torch.tensor([[1.0, 0.0]] * 4)
    assert expected_calibration_error(probs, torch.ones(4, dtype=torch.long)) == 1.0
    # Labels drawn from the predicted probabilities: calibrated by construction. With 20k
    # points over 15 bins the sampling error of the ECE is ~0.01; 0.03 leaves room.
    probs, labels = _random_probs(4, n=20_000, c=3)
    assert expected_calibration_error(probs, labels) < 0.03
    # Sharpened probabilities (temperature 1/3) are overconfident for the same labels.
    sharp = torch.softmax(3 * probs.log(), dim=1)
    assert expected_calibration_error(sharp, labels) > 0.1


_P, _T = torch.tensor([[0.2, 0.8], [0.6, 0.4]]), torch.tensor([1, 0])


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: nll(_P.numpy(), _T), TypeError, "probs must be a torch.Tensor"),
        (lambda: nll(_P, _T.float()), TypeError, "labels must be an integer tensor"),
        (lambda: nll(_P, [1, 0]), TypeError, "labels must be a torch.Tensor"),
        (lambda: nll(_P[:, 1], _T), ValueError, r"torch.stack\(\[1 - p, p\]"),
        (lambda: nll(_P[:, :1], _T), ValueError, "C >= 2"),
        (lambda: nll(_P.log(), _T), ValueError, "probabilities, not logits"),
        (lambda: nll(_P * 0.5, _T), ValueError, "sum to 1"),
        (lambda: nll(_P, torch.tensor([1, 2])), ValueError, r"labels must lie in \[0, 2\)"),
        (lambda: nll(_P, _T[:1]), ValueError, r"labels must have shape \(2,\)"),
        (lambda: nll(_P, _T, eps=0.0), ValueError, "eps"),
        (lambda: accuracy(_P, -_T), ValueError, "labels must lie"),
        (lambda: brier_score(_P.int(), _T), TypeError, "floating-point"),
        (lambda: reliability_curve(_P, _T, n_bins=0), ValueError, "n_bins must be >= 1"),
        (lambda: reliability_curve(_P, _T, n_bins=2.0), TypeError, "n_bins must be an int"),
        (lambda: expected_calibration_error(_P[None], _T), ValueError, r"\(N, C\)"),
    ],
)
def test_bad_arguments_raise_clear_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_the_default_is_fifteen_bins():
    """Confidences 0.61 (right) and 0.65 (wrong) share the 15-bin bin (9/15, 10/15] =
    (0.6, 0.667]: accuracy 1/2 at mean confidence 0.63, ECE |0.5 - 0.63| = 0.13. (With 16 bins
    they would split at 10/16 = 0.625 and the ECE be (0.39 + 0.65) / 2 = 0.52.)"""
    probs = torch.tensor([[0.61, 0.39], [0.65, 0.35]], dtype=torch.float64)
    labels = torch.tensor([0, 1])
    assert reliability_curve(probs, labels).counts.tolist() == [0] * 9 + [2] + [0] * 5
    assert expected_calibration_error(probs, labels) == pytest.approx(0.13, abs=1e-12)


def test_a_confidence_just_below_an_edge_stays_in_the_lower_bin():
    """0.69999999 < 0.7 lies in (0.6, 0.7], bin 6 of 10, though it is above 0.7 rounded to
    float32 (0.699999988): the edges are float64. Its one point is right: accuracy 1."""
    probs = torch.tensor([[0.69999999, 0.30000001]], dtype=torch.float64)
    curve = reliability_curve(probs, torch.tensor([0]), n_bins=10)
    assert curve.counts.tolist() == [0] * 6 + [1] + [0] * 3
    assert curve.accuracies[6].item() == 1.0 and curve.confidences[6].item() == 0.69999999


def test_empty_top_bins_are_still_returned():
    """Four classes, uniform probabilities: confidence 1/4 falls in (0, 1/4], bin 0 of 4; the
    three bins above are empty but present, with count 0 and NaN confidence and accuracy."""
    curve = reliability_curve(torch.full((1, 4), 0.25), torch.tensor([2]), n_bins=4)
    assert curve.counts.tolist() == [1, 0, 0, 0]
    assert curve.accuracies[0].item() == 0.0 and curve.confidences[0].item() == 0.25
    assert bool(curve.accuracies[1:].isnan().all()) and bool(curve.confidences[1:].isnan().all())


@pytest.mark.parametrize("eps", [1.0, 1.5, "0.1", None, True])
def test_eps_must_be_a_number_strictly_between_zero_and_one(eps):
    with pytest.raises(ValueError, match=rf"^eps must be a float in \(0, 1\), got {eps!r}$"):
        nll(_P, _T, eps=eps)


def test_an_eps_just_below_one_clips_every_probability_below_it():
    """eps = 0.9 lifts both picked probabilities (0.8 and 0.6) to 0.9: NLL = -log 0.9."""
    assert nll(_P, _T, eps=0.9) == pytest.approx(-math.log(0.9), rel=1e-12)
