"""CV+ pinned by hand-worked values (Barber, Candès, Ramdas & Tibshirani 2021): the fold sizes,
each row's out-of-fold residual, the ranks ``floor(alpha (n + 1))`` and
``ceil((1 - alpha)(n + 1))``, the options passed on, the dtypes, and each refusal's whole
message.

The stub "method" predicts, at every ``x``, the mean of the targets it was fitted on (one
sample, unit noise), so fold ``k``'s model is a known constant ``c_k``.
"""

from __future__ import annotations

import pytest
import torch

import bnn_pyro.calibration.cv_plus as cv_plus
from bnn_pyro.calibration import CVPlus
from bnn_pyro.exceptions import NotFittedError

ALPHA_MESSAGE = r"^alpha must be a finite float in \(0.0, 1.0\), got {}$"


class _Constant:
    """Fitted: predicts the mean of its training targets (rounded to the training rows' dtype)
    at every row, in ``x``'s dtype.
    Records what each fit saw (rows by ``X[:, 0]``, seed, options) and each prediction's
    options."""

    def __init__(self) -> None:
        self.fits: list[dict] = []
        self.predicted_with: list[dict] = []

    def fit(self, X: torch.Tensor, y: torch.Tensor, seed: int | None = None, **options):
        self.fits.append({"rows": X[:, 0].tolist(), "seed": seed, **options})
        self.value = y.double().mean(0).reshape(-1).to(X.dtype)  # (O,), in the fit's dtype
        return self

    def predictive_gaussian(self, x: torch.Tensor, **options):
        self.predicted_with.append(options)
        locs = self.value.to(x.dtype).expand(len(x), -1).unsqueeze(0)  # (1, N, O)
        return locs, torch.ones((), dtype=x.dtype)


class _OtherConstant(_Constant):
    pass


def _rows(n: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``(n, 1)`` inputs whose value is the row's index (what a fit saw names its rows)."""
    return torch.arange(n, dtype=dtype).unsqueeze(-1)


Y4 = torch.tensor([0.0, 2.0, 4.0, 10.0], dtype=torch.float64)


def test_the_interval_ends_are_the_ranked_out_of_fold_candidates():
    """n = 4 rows, 2 contiguous folds (seed=None): rows 0, 1 form fold 0 and rows 2, 3 fold 1.
    y = (0, 2, 4, 10): c_0 = mean(4, 10) = 7, c_1 = mean(0, 2) = 1, residuals
    R = (|0 - 7|, |2 - 7|, |4 - 1|, |10 - 1|) = (7, 5, 3, 9). Lower candidates c - R:
    (0, 2, -2, -8), sorted (-8, -2, 0, 2); upper c + R: (14, 12, 4, 10), sorted (4, 10, 12, 14).
    alpha = 0.4: ranks floor(0.4 * 5) = 2 and ceil(0.6 * 5) = 3, so [-2, 12].
    alpha = 0.35: ranks floor(1.75) = 1 and ceil(3.25) = 4 (= n, still allowed), so [-8, 14]."""
    cv = CVPlus(_Constant, folds=2, seed=None).fit(_rows(4), Y4)
    assert [m.fits[0]["rows"] for m in cv.methods] == [[2.0, 3.0], [0.0, 1.0]]
    x = torch.zeros(3, 1, dtype=torch.float64)
    for alpha, (low, high) in ((0.4, (-2.0, 12.0)), (0.35, (-8.0, 14.0))):
        lower, upper = cv.predict_interval(x, alpha=alpha)
        assert lower.tolist() == [[low]] * 3 and upper.tolist() == [[high]] * 3


def test_each_output_column_gets_its_own_residuals_and_ranks():
    """y of shape (4, 2), the second column ten times the first: every candidate scales by 10,
    so at alpha = 0.4 the interval is [-2, 12] in the first column and [-20, 120] in the
    second."""
    cv = CVPlus(_Constant, folds=2, seed=None).fit(_rows(4), torch.stack([Y4, 10 * Y4], 1))
    lower, upper = cv.predict_interval(torch.zeros(1, 1, dtype=torch.float64), alpha=0.4)
    assert lower.tolist() == [[-2.0, -20.0]] and upper.tolist() == [[12.0, 120.0]]


def test_uneven_folds_give_the_first_folds_one_extra_row():
    """n = 5 rows in 2 contiguous folds: sizes 3 and 2 (as KFold), so fold 0's model trains on
    rows 3, 4 and fold 1's on rows 0, 1, 2, both unseeded, with the fit options passed on."""
    cv = CVPlus(_Constant, folds=2, seed=None, epochs=7).fit(_rows(5), torch.zeros(5))
    assert not cv.stacked
    assert [m.fits for m in cv.methods] == [
        [{"rows": [3.0, 4.0], "seed": None, "epochs": 7}],
        [{"rows": [0.0, 1.0, 2.0], "seed": None, "epochs": 7}],
    ]


def test_as_many_folds_as_rows_is_the_jackknife_plus():
    """folds = n = 4 is allowed (n >= folds): each model leaves out one row. With
    y = (0, 2, 4, 10) the leave-one-out means are (16/3, 14/3, 4, 2) and the residuals
    (16/3, 8/3, 0, 8); at alpha = 0.2 (ranks 1 and 4) the interval is the smallest lower and
    the largest upper candidate: min(0, 2, 4, -6) = -6 and max(32/3, 22/3, 4, 10) = 32/3."""
    cv = CVPlus(_Constant, folds=4, seed=None).fit(_rows(4), Y4)
    lower, upper = cv.predict_interval(torch.zeros(1, 1, dtype=torch.float64), alpha=0.2)
    assert lower.item() == pytest.approx(-6.0) and upper.item() == pytest.approx(32 / 3)


def test_the_default_seed_is_zero_for_the_shuffle_and_the_fits():
    """seed defaults to 0: fold k holds block k of randperm(6) under a generator seeded 0, and
    model k is fitted on the other rows with seed 0 + k."""
    cv = CVPlus(_Constant, folds=3)
    assert cv.seed == 0 and cv.methods == [] and cv.stacked is False
    cv.fit(_rows(6), torch.zeros(6))
    order = torch.randperm(6, generator=torch.Generator().manual_seed(0)).tolist()
    for k, method in enumerate(cv.methods):
        left_out = set(order[2 * k : 2 * k + 2])
        assert method.fits == [
            {"rows": [float(i) for i in range(6) if i not in left_out], "seed": k}
        ]


def test_the_predict_options_reach_the_residuals_and_the_interval():
    options = {"num_samples": 3, "seed": 5}
    cv = CVPlus(_Constant, folds=2, seed=None, predict_options=options).fit(_rows(4), Y4)
    cv.predict_interval(torch.zeros(1, 1, dtype=torch.float64), alpha=0.4)
    assert all(m.predicted_with == [options, options] for m in cv.methods)


def test_the_stacking_choice_asks_about_the_built_models(monkeypatch):
    """Equal folds and a seed: whether to stack is asked of the K built models (an answer
    naming why not fits them one by one)."""
    asked = []

    def why_not(methods):
        asked.append([type(m) for m in methods])
        return "they differ"

    monkeypatch.setattr(cv_plus, "why_not_stacked", why_not)
    classes = iter([_Constant, _OtherConstant])
    cv = CVPlus(lambda: next(classes)(), folds=2, seed=0).fit(_rows(4), Y4)
    assert asked == [[_Constant, _OtherConstant]] and not cv.stacked


def test_targets_are_rounded_to_the_predictions_dtype_before_the_residual():
    """float32 rows, float64 targets (1, 1, 1 + 2^-30, 1): each model predicts its mean rounded
    to float32, 1, and y = 1 + 2^-30 rounds to 1 in float32, so every residual is 0 (not
    2^-30) and the float64 interval at alpha = 0.2 is exactly [1, 1]."""
    y = torch.tensor([1.0, 1.0, 1.0 + 2.0**-30, 1.0], dtype=torch.float64)
    cv = CVPlus(_Constant, folds=2, seed=None).fit(_rows(4, torch.float32), y)
    lower, upper = cv.predict_interval(torch.zeros(1, 1, dtype=torch.float64), alpha=0.2)
    assert lower.item() == upper.item() == 1.0


def test_the_interval_keeps_the_dtype_of_the_rows_it_is_asked_at():
    cv = CVPlus(_Constant, folds=2, seed=None).fit(_rows(4), Y4)
    lower, upper = cv.predict_interval(torch.zeros(1, 1, dtype=torch.float32), alpha=0.4)
    assert lower.dtype == upper.dtype == torch.float32
    assert (lower.item(), upper.item()) == (-2.0, 12.0)


def test_too_few_rows_for_alpha_are_refused_with_the_rows_needed():
    """The ranks need floor(alpha (n + 1)) >= 1, i.e. n >= 1 / alpha - 1: 9 rows for
    alpha = 0.1 (and 9 are enough: ranks 1 and 9), 3 for alpha = 0.25. With alpha = 1/49 and
    48 rows, (1/49) * 49 rounds below 1 in floats: the low rank is 0 (the high one 48 = n),
    which is refused too."""
    cv = CVPlus(_Constant, folds=2, seed=None).fit(_rows(4), Y4)
    x = torch.zeros(1, 1, dtype=torch.float64)
    message = r"^4 rows are too few for alpha=0.1: CV\+ needs at least 9 \(or a larger alpha\)$"
    with pytest.raises(ValueError, match=message):
        cv.predict_interval(x, alpha=0.1)
    with pytest.raises(ValueError, match=r"^2 rows .* alpha=0.25: CV\+ needs at least 3 \("):
        CVPlus(_Constant, folds=2, seed=None).fit(_rows(2), Y4[:2]).predict_interval(x, 0.25)
    y9 = torch.arange(9, dtype=torch.float64)
    lower, upper = CVPlus(_Constant, folds=3, seed=None).fit(_rows(9), y9).predict_interval(x)
    assert lower.item() < upper.item()
    cv48 = CVPlus(_Constant, folds=2, seed=None).fit(_rows(48), torch.zeros(48))
    with pytest.raises(ValueError, match=r"^48 rows are too few for alpha=0.0204.*least 49 \("):
        cv48.predict_interval(x, alpha=1 / 49)
    # alpha = 1/3: (1 - alpha) / alpha is 2.0000000000000004, yet 2 rows give ranks 1 and 2
    cv1 = CVPlus(_Constant, folds=2, seed=None).fit(_rows(2), Y4[:2])
    lower, upper = cv1.predict_interval(x, alpha=1 / 3)
    assert lower.item() <= upper.item()


def test_bad_arguments_are_refused_with_their_whole_message():
    with pytest.raises(TypeError, match=r"^make_method must be callable, got int$"):
        CVPlus(5)
    with pytest.raises(ValueError, match=r"^folds must be an int >= 2, got 1$"):
        CVPlus(_Constant, folds=1)
    assert CVPlus(_Constant, folds=2).folds == 2
    with pytest.raises(ValueError, match=r"^seed must be an int >= 0, got -1$"):
        CVPlus(_Constant, seed=-1)
    cv = CVPlus(_Constant, folds=2, seed=None)
    x_message = r"^X must have at least 2 dimension\(s\), got shape \(4,\) \(for one feature use"
    with pytest.raises(ValueError, match=x_message):
        cv.fit(torch.zeros(4), torch.zeros(4))
    with pytest.raises(ValueError, match=r"^y must be finite, got 1 NaN or infinite value\(s\)$"):
        cv.fit(torch.zeros(4, 1), torch.tensor([0.0, float("nan"), 0.0, 0.0]))
    with pytest.raises(ValueError, match=r"^X and y must have the same rows, got 4 and 3$"):
        cv.fit(torch.zeros(4, 1), torch.zeros(3))
    message = r"^CVPlus is not fitted: call fit\(\) first$"
    with pytest.raises(NotFittedError, match=message):
        cv.predict_interval(torch.zeros(1, 1))


def test_alpha_outside_the_open_unit_interval_is_refused_by_name():
    cv = CVPlus(_Constant, folds=2, seed=None).fit(_rows(4), Y4)
    for bad in (0.0, -0.5, 1.0, 1.5):
        with pytest.raises(ValueError, match=ALPHA_MESSAGE.format(bad)):
            cv.predict_interval(torch.zeros(1, 1, dtype=torch.float64), alpha=bad)
