"""``fit_stacked_vi``'s options reach each member as its own ``fit`` takes them: the optimizer,
the callbacks' history, the MAP phase's progress flag, and the input shape a fitted model keeps
for its checks.

The oracle is, as in ``test_stacked_fit_values.py``, each member's own ``fit`` with the same
arguments: a stacked fit ends where the one-by-one fits end, up to float round-off.
"""

from __future__ import annotations

import pytest
import torch
from stacked_vi_helpers import assert_same_fits, small_data, small_models

from bnn_pyro.methods.vi.stacked_fit import fit_stacked_vi


def test_a_named_optimizer_is_the_one_each_member_steps():
    """optimizer="sgd" (SGD with momentum 0.9; lr 1e-4, as the loss sums the 40 rows): the
    members end where their own fits with that optimizer end, and not where the default
    (fused Adam) takes them."""
    X, y = small_data()
    fit = dict(epochs=3, batch_size=16, lr=1e-4, progress=False)
    alone = small_models()
    for i, bnn in enumerate(alone):
        bnn.fit(X, y, seed=i, optimizer="sgd", **fit)
    together = small_models()
    fit_stacked_vi(together, X, y, seeds=[0, 1], optimizer="sgd", **fit)
    assert_same_fits(alone, together)
    adam = small_models()
    fit_stacked_vi(adam, X, y, seeds=[0, 1], **fit)
    gap = adam[0].guide.locs["net__0__weight"] - together[0].guide.locs["net__0__weight"]
    assert gap.abs().max() > 1e-3


def test_a_callback_sees_the_models_the_epoch_and_the_history_so_far():
    """Each callback is called as fit calls it, ``cb(models, epoch, history)``: after epoch e
    the history holds e + 1 rows of loss, the last one the epoch just run."""
    X, y = small_data()
    seen = []

    def callback(models, epoch, history):
        seen.append((models, epoch, list(history["loss"])))

    models = small_models()
    history = fit_stacked_vi(
        models, X, y, seeds=[0, 1], epochs=3, callbacks=[callback], progress=False
    )
    assert [epoch for _, epoch, _ in seen] == [0, 1, 2]
    # the models themselves, in a ModuleList (what EarlyStopping's restore_best can copy)
    assert all(isinstance(got, torch.nn.ModuleList) for got, _, _ in seen)
    assert all(list(got) == models for got, _, _ in seen)
    assert [rows for _, _, rows in seen] == [history["loss"][: e + 1] for e in range(3)]


def test_the_map_phase_keeps_quiet_when_asked(capsys):
    """progress=False silences the MAP phase's bar too (init="map"); progress=True shows the
    run's bar (its own fits' MAP phases stay quiet: one bar for the stacked run)."""
    X, y = small_data()
    fit_stacked_vi(small_models(), X, y, seeds=[0, 1], epochs=2, init="map", progress=False)
    assert capsys.readouterr().err == ""
    fit_stacked_vi(small_models(), X, y, seeds=[0, 1], epochs=2, init="map", map_epochs=1)
    err = capsys.readouterr().err
    assert "models stacked" in err
    assert "map" not in err.replace("models stacked", "")


def test_each_member_keeps_the_input_shape_its_own_fit_keeps():
    """A fitted model remembers one row's shape (its own fit sets it): (3,) for (N, 3) inputs,
    for rows shared by all members and for each member's own rows (K, N, 3). Prediction on
    inputs of another width is then refused as after the member's own fit."""
    X, y = small_data()
    alone = small_models(k=1)[0]
    alone.fit(X, y, epochs=1, progress=False, seed=0)
    shared = small_models()
    fit_stacked_vi(shared, X, y, seeds=[0, 1], epochs=1, progress=False)
    own_rows = small_models()
    fit_stacked_vi(own_rows, torch.stack([X, X]), torch.stack([y, y]), seeds=[0, 1], epochs=1,
                   progress=False)  # fmt: skip
    assert alone.input_shape == (3,)
    assert [b.input_shape for b in shared + own_rows] == [(3,)] * 4
    with pytest.raises(ValueError) as expected:
        alone.predict(torch.randn(5, 4), num_samples=2)
    with pytest.raises(ValueError) as got:
        shared[0].predict(torch.randn(5, 4), num_samples=2)
    assert str(got.value) == str(expected.value)


def test_one_model_is_a_stack_for_the_alpha_energy_too():
    """K = 1 with elbo="alpha" (4 particles): the one member ends where its own
    fit(elbo="alpha") ends. Round-off as above."""
    X, y = small_data()
    fit = dict(epochs=2, batch_size=16, elbo="alpha", num_particles=4, progress=False)
    alone = small_models(k=1)
    alone[0].fit(X, y, seed=0, **fit)
    together = small_models(k=1)
    fit_stacked_vi(together, X, y, seeds=[0], **fit)
    assert_same_fits(alone, together)
