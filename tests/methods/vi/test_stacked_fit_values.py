"""``fit_stacked_vi`` (the VI branch of ``fit_stacked``): its defaults are ``fit``'s, it leaves
each model in the mode it found it, and its refusals name what is wrong, word for word.

The oracle for the defaults is the members' own ``fit`` with the same arguments left out: a
stacked fit ends where the one-by-one fits end, up to float round-off
(``test_stacked_vi.py``).
"""

from __future__ import annotations

import pytest
import torch
from stacked_vi_helpers import assert_same_fits, small_data, small_models

import bnn_pyro as bp
from bnn_pyro.exceptions import TrainingDivergedError
from bnn_pyro.methods.vi.stacked_fit import fit_stacked_vi
from bnn_pyro.stacking import fit_stacked

K = 2


def test_lr_and_batch_size_default_to_fits_own():
    """Left out, lr and batch_size are fit's (1e-2 and 128, here more than the 40 rows: one
    full batch per epoch): the members end where their own fits with the defaults end. A
    stacked lr of 1e-3 ends elsewhere, so the test sees the learning rate."""
    X, y = small_data()
    alone = small_models()
    for i, bnn in enumerate(alone):
        bnn.fit(X, y, epochs=3, seed=i, progress=False)
    together = small_models()
    fit_stacked(together, X, y, seeds=list(range(K)), epochs=3, progress=False)
    assert_same_fits(alone, together)
    slow = small_models()
    fit_stacked(slow, X, y, seeds=list(range(K)), epochs=3, lr=1e-3, progress=False)
    moved = slow[0].guide.locs["net__0__weight"] - together[0].guide.locs["net__0__weight"]
    assert moved.abs().max() > 1e-3


def test_a_map_phase_with_a_batch_larger_than_the_data_is_fits_own():
    """init="map" with batch_size above the rows: the MAP phase's minibatches are all rows,
    as in fit, and the members end where their own fits end."""
    X, y = small_data()
    fit = dict(epochs=2, batch_size=1000, lr=1e-2, init="map", map_epochs=2)
    alone = small_models(lambda: bp.Gaussian("learned"))
    for i, bnn in enumerate(alone):
        bnn.fit(X, y, seed=i, progress=False, **fit)
    together = small_models(lambda: bp.Gaussian("learned"))
    fit_stacked(together, X, y, seeds=list(range(K)), progress=False, **fit)
    for a, b in zip(alone, together, strict=True):
        assert a.map_history["loss"] == b.map_history["loss"]
    assert_same_fits(alone, together)


@pytest.mark.parametrize("k", [1, 2])
def test_init_map_without_map_epochs_takes_fits_default(k):
    """init="map" alone: a quarter of the epochs of MAP first (here 1 of 4), as each model's
    own fit(init="map"); one model is a stack too. Round-off as above."""
    X, y = small_data()
    fit = dict(epochs=4, batch_size=16, init="map")
    alone = small_models(lambda: bp.Gaussian("learned"), k=k)
    for i, bnn in enumerate(alone):
        bnn.fit(X, y, seed=i, progress=False, **fit)
    together = small_models(lambda: bp.Gaussian("learned"), k=k)
    fit_stacked_vi(together, X, y, seeds=list(range(k)), progress=False, **fit)
    for a, b in zip(alone, together, strict=True):
        assert len(a.map_history["loss"]) == 1
        assert a.map_history["loss"] == b.map_history["loss"]
    assert_same_fits(alone, together)


@pytest.mark.parametrize("modes", [(True, False), (False, True)])
def test_each_model_is_left_in_the_mode_it_was_in(modes):
    """fit_stacked trains in training mode and gives each model back its own mode."""
    X, y = small_data()
    models = small_models()
    for bnn, mode in zip(models, modes, strict=True):
        bnn.train(mode)
    fit_stacked(models, X, y, seeds=[0, 1], epochs=1, progress=False)
    assert tuple(bnn.training for bnn in models) == modes
    assert tuple(bnn.net.training for bnn in models) == modes


def test_a_diverging_stacked_fit_names_its_lr_and_members():
    """Targets of size 1e30 make every member's loss infinite in the first step: the error
    names the run by its lr and lists the members (1-based) whose loss is not finite."""
    X, y = small_data()
    models = small_models()
    with pytest.raises(TrainingDivergedError) as info:
        fit_stacked(models, X, y * 1e30, seeds=[0, 1], epochs=2, lr=0.5, progress=False)
    assert str(info.value).startswith(
        "fit_stacked (lr=0.5): the loss of member(s) [1, 2] of 2 is not finite at epoch 0, step 0"
    )


def test_the_progress_bar_is_on_by_default_and_names_the_stackedsmall_models(capsys):
    """Unless progress=False, a bar names the method and the number of models (on stderr)."""
    X, y = small_data()
    fit_stacked_vi(small_models(k=3), X, y, seeds=[0, 1, 2], epochs=1)
    assert "VariationalBNN, 3 models stacked" in capsys.readouterr().err
    fit_stacked_vi(small_models(k=3), X, y, seeds=[0, 1, 2], epochs=1, progress=False)
    assert "models stacked" not in capsys.readouterr().err


def test_epochs_and_batch_size_default_to_fits_own():
    """Left out, epochs and batch_size are fit's (100 and 128; 130 rows make two minibatches
    of 128 and 2 rows per epoch, where 129 would make two others): the members end where
    their own default fits end, after 100 epochs. Round-off as above, over 200 steps."""
    X, y = small_data(n=130)
    alone = small_models()
    for i, bnn in enumerate(alone):
        bnn.fit(X, y, seed=i, progress=False)
    together = small_models()
    history = fit_stacked_vi(together, X, y, seeds=list(range(K)), progress=False)
    assert len(history["loss"]) == 100
    assert_same_fits(alone, together)


def test_bad_arrays_are_refused_by_their_names():
    """fit_stacked_vi, called directly, checks X (numeric, at least 2-D) and y by name."""
    models, (X, y) = small_models(), small_data()
    with pytest.raises(TypeError) as info:
        fit_stacked_vi(models, "rows", y, seeds=[0, 1], progress=False)
    assert str(info.value) == "X must be numeric, got an array of dtype <U4"
    with pytest.raises(TypeError) as info:
        fit_stacked_vi(models, X, "rows", seeds=[0, 1], progress=False)
    assert str(info.value) == "y must be numeric, got an array of dtype <U4"
    with pytest.raises(ValueError) as info:
        fit_stacked_vi(models, X[:, 0], y, seeds=[0, 1], progress=False)
    assert str(info.value) == (
        "X must have at least 2 dimension(s), got shape (40,) (for one feature use "
        "x.reshape(-1, 1))"
    )


def test_each_members_own_rows_and_history_come_back():
    """Per-member data (K, N, D): member k trains on X[k] alone (its own fit on X[k]); the
    history has one row per epoch with each member's loss."""
    X, y = small_data(members=K)
    alone = small_models()
    own = [bnn.fit(X[i], y[i], epochs=2, batch_size=16, seed=i, progress=False)
           for i, bnn in enumerate(alone)]  # fmt: skip
    together = small_models()
    history = fit_stacked(together, X, y, seeds=[0, 1], epochs=2, batch_size=16, progress=False)
    assert_same_fits(alone, together)
    assert len(history["loss"]) == 2
    for i in range(K):
        got = [row[i] for row in history["member_loss"]]
        assert got == pytest.approx(own[i]["loss"], rel=1e-4)
    assert [b.dataset_size for b in together] == [40, 40]


def test_refusals_name_the_problem():
    """Each refusal, word for word, before any model changes."""
    X, y = small_data()

    def refused(models, match_all: str, **kw):
        with pytest.raises(ValueError) as info:
            fit_stacked(models, X, y, seeds=kw.pop("seeds", [0, 1]), progress=False, **kw)
        assert str(info.value) == match_all
        assert not any(bnn.is_fitted() for bnn in models)

    refused(
        small_models(),
        "weight_decay applies to MCDropout, SWAG and Laplace (VI has its prior)",
        weight_decay=0.1,
    )
    refused(
        small_models(),
        "fit_stacked takes elbo='trace', 'stl' or 'meanfield' (one particle) or 'alpha' (any "
        "num_particles), got elbo='renyi', num_particles=1",
        elbo="renyi",
    )
    refused(
        small_models(),
        "fit_stacked takes elbo='trace', 'stl' or 'meanfield' (one particle) or 'alpha' (any "
        "num_particles), got elbo='meanfield', num_particles=2",
        elbo="meanfield",
        num_particles=2,
    )
    refused(
        small_models(local_reparameterization=True),
        "elbo='alpha' is stacked for the weight-space estimator only",
        elbo="alpha",
    )
    refused(
        [small_models()[0], bp.VariationalBNN(bp.nn.mlp(3, [7], 1), bp.Gaussian(0.3))],
        "fit_stacked: the models differ in their nets or their Bayesian sites",
    )
    refused(small_models(), "seeds must give one seed per model (2), got 3", seeds=[0, 1, 2])
    refused(
        [bp.VariationalBNN(bp.nn.mlp(3, [6], 1, dropout=0.1), bp.Gaussian(0.3))],
        "elbo='alpha' is not stacked for nets with dropout (the members would not draw the "
        "masks their own fits draw): fit them one by one, or stacked with elbo='trace'",
        elbo="alpha",
        seeds=[0],
    )
    refused(
        small_models(),
        "num_particles must be an int >= 1, got 0",
        elbo="alpha",
        num_particles=0,
    )
    refused(
        small_models(),
        "fit_stacked needs an elementwise optimizer, got <class 'torch.optim.lbfgs.LBFGS'>",
        optimizer=torch.optim.LBFGS,
    )


def test_a_kl_weight_of_zero_is_taken_and_a_negative_one_refused():
    """kl_weight=0 is a valid beta (the members' own fits take it); -0.1 is refused up front
    by check_float's message (not the per-epoch one, ``... >= 0, got -0.1 at epoch 0``)."""
    X, y = small_data()
    alone = small_models()
    for i, bnn in enumerate(alone):
        bnn.fit(X, y, epochs=2, batch_size=16, kl_weight=0.0, seed=i, progress=False)
    together = small_models()
    fit = dict(epochs=2, batch_size=16, kl_weight=0.0, progress=False)
    history = fit_stacked(together, X, y, seeds=[0, 1], **fit)
    assert_same_fits(alone, together)
    assert history["kl_weight"] == [0.0, 0.0]
    models = small_models()
    with pytest.raises(ValueError) as info:
        fit_stacked_vi(models, X, y, seeds=[0, 1], progress=False, kl_weight=-0.1)
    assert str(info.value) == "kl_weight must be a finite float >= 0.0, got -0.1"
    assert not list(models[0].parameters())  # refused before any guide was set up


def test_a_schedule_is_checked_at_epoch_0_before_the_run():
    """A kl_weight schedule is called once for epoch 0 before anything is set up (a bad one is
    refused there), then once at the start of each epoch: epochs 0, 0, 1, 2 for 3 epochs."""
    X, y = small_data()
    asked = []

    def schedule(epoch: int) -> float:
        asked.append(epoch)
        return 1.0

    fit_stacked_vi(small_models(), X, y, seeds=[0, 1], epochs=3, kl_weight=schedule, progress=False)
    assert asked == [0, 0, 1, 2]
