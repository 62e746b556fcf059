"""``fit_stacked`` of ``VariationalBNN`` models takes what their own ``fit`` takes besides:
validation data, ``shuffle``, an iterate average and a resume file; each does for every member
what it does in that member's own ``fit``, and ``EarlyStopping(restore_best=True)`` leaves the
members at their best epoch.

The oracle, as in ``test_stacked_fit_values.py``, is each member's own ``fit`` with the same
arguments: a stacked fit ends where the one-by-one fits end, up to float round-off.
"""

from __future__ import annotations

import pytest
import torch
from stacked_vi_helpers import assert_same_fits, small_data, small_models

import bnn_pyro as bp
import bnn_pyro.training.resume as resume_module

FIT = {"epochs": 3, "batch_size": 16, "progress": False}


def _alone(X, y, **options) -> tuple[list, list]:
    models, histories = small_models(), []
    for i, bnn in enumerate(models):
        histories.append(bnn.fit(X, y, seed=i, **FIT, **options))
    return models, histories


@pytest.mark.parametrize("per_member", [False, True], ids=["shared set", "own sets"])
def test_validation_scores_each_member_as_its_own_fit(per_member):
    X, y = small_data()
    xv, yv = small_data(12, members=2 if per_member else None)
    models, histories = small_models(), []
    for i, bnn in enumerate(models):
        pair = (xv[i], yv[i]) if per_member else (xv, yv)
        histories.append(bnn.fit(X, y, seed=i, validation_data=pair, **FIT))
    together = small_models()
    history = bp.fit_stacked(together, X, y, seeds=[0, 1], validation_data=(xv, yv), **FIT)
    assert_same_fits(models, together)
    for epoch in range(FIT["epochs"]):
        expected = [h["val_nll"][epoch] for h in histories]
        # the members' guides match to round-off (above), and the score is a 20-draw
        # predictive under one seed: round-off again
        assert history["member_val_nll"][epoch] == pytest.approx(expected, rel=1e-4)
        assert history["val_nll"][epoch] == pytest.approx(sum(expected) / 2, rel=1e-4)


@pytest.mark.parametrize(
    "option, gap",
    # how far the default run ends from the one with the option (what a dropped option shows)
    [({"shuffle": False}, 1e-3), ({"average": 0.5}, 1e-4)],
    ids=["unshuffled", "iterate average"],
)
def test_an_option_does_for_each_member_what_its_own_fit_does(option, gap):
    X, y = small_data()
    alone, _ = _alone(X, y, **option)
    together = small_models()
    bp.fit_stacked(together, X, y, seeds=[0, 1], **option, **FIT)
    assert_same_fits(alone, together)
    default = small_models()
    bp.fit_stacked(default, X, y, seeds=[0, 1], **FIT)
    diff = default[0].guide.locs["net__0__weight"] - together[0].guide.locs["net__0__weight"]
    assert diff.abs().max() > gap


def test_restore_best_leaves_the_best_epoch():
    """A loss that never improves by 1e9 stops after one more epoch and restores the first:
    the members end as a one-epoch run."""
    X, y = small_data()
    constant = {**FIT, "lr_schedule": "constant"}
    stop = bp.EarlyStopping("loss", patience=1, min_delta=1e9, restore_best=True)
    restored = small_models()
    bp.fit_stacked(restored, X, y, seeds=[0, 1], callbacks=[stop], **{**constant, "epochs": 5})
    assert stop.best_epoch == 0
    one, two = small_models(), small_models()
    bp.fit_stacked(one, X, y, seeds=[0, 1], **{**constant, "epochs": 1})
    bp.fit_stacked(two, X, y, seeds=[0, 1], **{**constant, "epochs": 2})
    for a, b, c in zip(restored, one, two, strict=True):
        for p, q, r in zip(a.parameters(), b.parameters(), c.parameters(), strict=True):
            assert torch.equal(p, q)
            assert not torch.equal(p, r)


class Interrupted(Exception):
    """Raised by a callback to stop a run as a crash would."""


@pytest.mark.parametrize("batch_size", [16, 64], ids=["minibatches", "the whole set"])
def test_an_interrupted_run_resumes_to_the_uninterrupted_numbers(tmp_path, monkeypatch, batch_size):
    """Minibatches or one batch of the whole set (where the members' noise generators are all
    the run's state besides the guides): the resumed run ends where the unbroken one ends."""
    monkeypatch.setattr(resume_module, "SAVE_SECONDS", 0.0)  # a file after every epoch
    X, y = small_data()
    path = tmp_path / "run.pt"
    options = dict(FIT, epochs=5, init="map", map_epochs=2, batch_size=batch_size)
    calls = []

    def interrupt(models, epoch, history):
        calls.append(epoch)
        if len(calls) == 3:
            raise Interrupted

    full = small_models()
    expected = bp.fit_stacked(full, X, y, seeds=[0, 1], callbacks=[lambda *a: None], **options)
    with pytest.raises(Interrupted):
        bp.fit_stacked(
            small_models(), X, y, seeds=[0, 1], callbacks=[interrupt], resume=path, **options
        )
    resumed = small_models()
    history = bp.fit_stacked(
        resumed, X, y, seeds=[0, 1], callbacks=[interrupt], resume=path, **options
    )
    assert calls == [0, 1, 2, 2, 3, 4]  # epoch 2's file was not written: it runs again
    assert history["member_loss"] == expected["member_loss"]
    for a, b in zip(full, resumed, strict=True):
        for p, q in zip(a.parameters(), b.parameters(), strict=True):
            assert torch.equal(p, q)
    with pytest.raises(ValueError, match="seeds"):  # another run's file is refused
        bp.fit_stacked(small_models(), X, y, seeds=[5, 6], resume=path, **options)


@pytest.mark.parametrize(
    "option, error, message",
    [
        ({"shuffle": "yes"}, TypeError, r"^shuffle must be a bool, got str \('yes'\)$"),
        ({"lr_schedule": "bogus"}, ValueError, r"^lr_schedule must be one of \("),
        ({"average": 2.0}, ValueError, r"^average must be a fraction of the epochs in \(0, 1\]"),
    ],
    ids=["shuffle", "lr_schedule", "average"],
)
def test_a_bad_option_is_refused_by_name_before_any_work(option, error, message):
    from bnn_pyro.methods.vi.stacked_fit import fit_stacked_vi

    X, y = small_data()
    models = small_models()
    with pytest.raises(error, match=message):
        fit_stacked_vi(models, X, y, seeds=[0, 1], **option, **FIT)
    assert not any(b.is_fitted() for b in models)
    with pytest.raises(ValueError, match=r"^X must have at least 2 dimension\(s\)"):
        fit_stacked_vi(models, X[:, 0], y, seeds=[0, 1], **FIT)


def test_a_validation_monitor_may_stop_the_run_and_none_is_recorded_without_data():
    X, y = small_data()
    stop = bp.EarlyStopping("val_nll", patience=1, min_delta=1e9)
    history = bp.fit_stacked(
        small_models(), X, y, seeds=[0, 1], validation_data=(X, y), callbacks=[stop],
        **{**FIT, "epochs": 5},
    )  # fmt: skip
    assert len(history["val_nll"]) == 2  # epoch 0 the best, epoch 1 no better by 1e9: stop
    plain = bp.fit_stacked(small_models(), X, y, seeds=[0, 1], **FIT)
    assert "val_nll" not in plain and "member_val_nll" not in plain


def test_a_finished_resume_file_is_not_extended_nor_taken_for_other_seeds(tmp_path):
    X, y = small_data()
    path = tmp_path / "run.pt"
    options = {**FIT, "lr_schedule": "constant"}  # a run a single fit could extend
    bp.fit_stacked(small_models(), X, y, seeds=[0, 1], resume=path, **options)
    with pytest.raises(ValueError, match="epochs=3, this fit has epochs=4"):
        bp.fit_stacked(small_models(), X, y, seeds=[0, 1], resume=path, **{**options, "epochs": 4})
    with pytest.raises(ValueError, match=r"with seeds=\[0, 1\], this fit has seeds=\[5, 6\]"):
        bp.fit_stacked(small_models(), X, y, seeds=[5, 6], resume=path, **options)
