"""``fit_stacked`` with one data set per model ``(K, N, D)``: every family refuses a count of
sets (inputs, targets, validation inputs) that is not the number of models, naming which,
before any model changes (the sets used to be taken in order and the rest dropped)."""

from __future__ import annotations

import pytest
import torch

import bnn_pyro as bp

X = torch.randn(3, 20, 2, generator=torch.Generator().manual_seed(0))
Y = X.sum(-1)

MAKERS = {
    "vi": lambda: bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1)),
    "dropout": lambda: bp.MCDropout(bp.nn.mlp(2, [4], 1, dropout=0.1), likelihood="regression"),
    "sgld": lambda: bp.make("sgld", bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1)),
}

CASES = {
    "inputs": ((X, Y[:2]), None, r"^X holds 3 sets \(K, N, D\) for 2 models: pass one set per"),
    "targets": ((X[:2], Y), None, r"^y holds 3 sets for the 2 sets of X: one set of targets"),
    "validation": ((X[:2], Y[:2]), (X, Y), r"^x_val holds 3 sets \(K, N, D\) for 2 models"),
    "validation targets": (
        (X[:2], Y[:2]),
        (X[:2], Y),
        r"^y_val holds 3 sets for the 2 sets of x_val",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("family", list(MAKERS))
def test_a_count_of_sets_other_than_the_models_is_refused(family, case):
    (x, y), validation, message = CASES[case]
    models = [MAKERS[family]() for _ in range(2)]
    before = [[p.detach().clone() for p in m.parameters()] for m in models]
    with pytest.raises(ValueError, match=message):
        bp.fit_stacked(
            models, x, y, seeds=[0, 1], epochs=1, progress=False, validation_data=validation
        )
    for m, old in zip(models, before, strict=True):
        assert all(torch.equal(p, q) for p, q in zip(m.parameters(), old, strict=True))


@pytest.mark.parametrize("family", list(MAKERS))
def test_one_set_per_model_trains_each_on_its_own(family):
    history = bp.fit_stacked(
        [MAKERS[family]() for _ in range(3)], X, Y, seeds=[0, 1, 2], epochs=1, progress=False,
        validation_data=(X[:, :5], Y[:, :5]),
    )  # fmt: skip
    assert len(history["member_loss"][-1]) == 3
    key = "member_val_loss" if family == "dropout" else "member_val_nll"
    assert len(history[key][-1]) == 3


@pytest.mark.parametrize(
    "y, sets",
    [(torch.tensor(1.0), 0), (torch.zeros(3), 3), (torch.zeros(1, 20), 1)],
    ids=["a scalar", "a vector of 3", "one set"],
)
def test_targets_are_counted_as_sets_whatever_their_shape(y, sets):
    from bnn_pyro.training.stacked_batches import check_member_sets

    with pytest.raises(ValueError, match=rf"^y holds {sets} sets for the 2 sets of X: "):
        check_member_sets(X[:2], y, 2)


@pytest.mark.parametrize("validation", [(X, Y, Y), "ab"], ids=["three items", "a string"])
def test_validation_data_that_is_not_a_pair_is_named_by_the_fit(validation):
    with pytest.raises(ValueError, match=r"^validation_data must be a pair \(x_val, y_val\)"):
        bp.fit_stacked(
            [MAKERS["dropout"]() for _ in range(2)], X[:2], Y[:2], seeds=[0, 1], epochs=1,
            progress=False, validation_data=validation,
        )  # fmt: skip
