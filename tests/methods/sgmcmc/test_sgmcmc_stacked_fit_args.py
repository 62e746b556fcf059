"""``fit_stacked_sgmcmc`` called directly (it is public): its checks of its own arguments, its
defaults, and what it passes on to each chain (the friction, the measured step, the callbacks,
the progress bar), each against the chain's own ``fit`` or the documented value."""

from __future__ import annotations

import pytest
import torch

import bnn_pyro as bp
from bnn_pyro.methods.sgmcmc.stacked import fit_stacked_sgmcmc

# float64, as in test_sgmcmc_stacked.py: a stacked chain and its own fit differ by round-off
# (about 1e-16 per step) over these few dozen steps; a wrong friction or step moves the samples
# by far more than 1e-9.
TOL = 1e-9


def _data(chains: int = 2, rows: int = 24):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(chains, rows, 2, generator=g, dtype=torch.float64)
    return X, X.sum(-1) + 0.3 * torch.randn(chains, rows, generator=g, dtype=torch.float64)


def _models(name: str = "sghmc", chains: int = 2, **options):
    torch.manual_seed(1)
    return [
        bp.make(name, bp.nn.mlp(2, [4], 1).double(), bp.Gaussian(scale=0.3), **options)
        for _ in range(chains)
    ]


def _raised(call) -> str:
    with pytest.raises((ValueError, TypeError)) as caught:
        call()
    return str(caught.value)


def test_its_own_arguments_are_refused_with_their_names():
    """What ``bp.fit_stacked`` would catch first is checked here too, under the same names."""
    X, y = _data()
    models = _models()

    def fit(models=models, X=X, y=y, **options):
        options = {"seeds": [0, 1], "epochs": 1, "progress": False, **options}
        return lambda: fit_stacked_sgmcmc(models, X, y, **options)

    # the data first: a 1-D X is named before the bad epochs given with it
    assert _raised(fit(X=[1.0, 2.0], epochs=0)) == (
        "X must have at least 2 dimension(s), got shape (2,) (for one feature use x.reshape(-1, 1))"
    )
    assert _raised(fit(y="abc")) == "y must be numeric, got an array of dtype <U3"
    assert _raised(fit(models=[], seeds=[])) == "fit_stacked needs at least one chain"
    assert _raised(fit(epochs=0)) == "epochs must be an int >= 1, got 0"
    assert _raised(fit(lr=0.0)) == "lr must be a finite float > 0.0, got 0.0"
    assert _raised(fit(lr=-1.0)) == "lr must be a finite float > 0.0, got -1.0"
    assert _raised(fit(batch_size=0)) == "batch_size must be an int >= 1, got 0"
    assert _raised(fit(shuffle="yes")) == "shuffle must be a bool, got str ('yes')"
    # validation targets are named as such, not as the training targets
    xv, yv = _data(rows=10)
    assert _raised(fit(validation_data=(xv[0], yv[0, :7]))) == (
        "X and y_val must have the same number of rows, got 10 and 7"
    )


def test_nested_lists_are_taken_as_tensors():
    """``X`` and ``y`` as nested lists: the same chains as the tensors give."""
    X, y = _data()
    fit = {"seeds": [0, 1], "epochs": 2, "batch_size": 12, "lr": 0.05, "progress": False}
    a, b = _models(), _models()
    fit_stacked_sgmcmc(a, X, y, **fit)
    fit_stacked_sgmcmc(b, X.tolist(), y.tolist(), **fit)
    for m, n in zip(a, b, strict=True):
        torch.testing.assert_close(m.kept_samples, n.kept_samples, rtol=0, atol=TOL)


def test_the_default_run_is_100_epochs_with_a_progress_bar(capsys):
    """``epochs=100`` and ``progress=True`` by default (as ``SGMCMC.fit``): 100 full-batch
    steps, and a bar labelled with the sampler and the number of chains."""
    X, y = _data(rows=8)
    models = _models("sgld")
    fit_stacked_sgmcmc(models, X, y, seeds=[0, 1], lr=1e-3)
    assert [m.last_run["steps"] for m in models] == [100, 100]
    assert "SGLD, 2 chains stacked" in capsys.readouterr().err
    fit_stacked_sgmcmc(_models("sgld"), X, y, seeds=[0, 1], lr=1e-3, epochs=2, progress=False)
    assert capsys.readouterr().err == ""  # progress=False: no bar


def test_the_chains_friction_is_their_own():
    """Chains with ``mdecay=0.05`` step with it, as their own fits do (not the default)."""
    X, y = _data()
    fit = {"epochs": 3, "batch_size": 12, "progress": False}
    stacked = _models(mdecay=0.05)
    fit_stacked_sgmcmc(stacked, X, y, seeds=[3, 4], **fit)
    for i, (m, alone) in enumerate(zip(stacked, _models(mdecay=0.05), strict=True)):
        alone.fit(X[i], y[i], seed=3 + i, **fit)
        torch.testing.assert_close(m.kept_samples, alone.kept_samples, rtol=0, atol=TOL)


def test_each_chain_keeps_the_step_it_measured():
    """On the whole data set with no ``lr`` the step is measured per chain: each model's
    ``step_size`` is the one its own fit measures (a float, not ``None``)."""
    X, y = _data()
    fit = {"epochs": 12, "progress": False}
    stacked = _models()
    fit_stacked_sgmcmc(stacked, X, y, seeds=[5, 6], **fit)
    for i, (m, alone) in enumerate(zip(stacked, _models(), strict=True)):
        alone.fit(X[i], y[i], seed=5 + i, **fit)
        assert isinstance(m.step_size, float) and isinstance(alone.step_size, float)
        assert m.step_size == pytest.approx(alone.step_size, rel=1e-9)


def test_callbacks_see_the_models_each_epoch_and_the_history_so_far():
    """``fn(models, epoch, history)`` after each epoch: the caller's models (in order), the
    epoch numbers a single ``fit`` gives its callbacks, and the history with that epoch's row."""
    X, y = _data()
    fit = {"epochs": 3, "batch_size": 12, "lr": 0.05, "progress": False}
    seen, alone_seen = [], []

    def record(models, epoch, history):
        seen.append((list(models), epoch, len(history["loss"]), len(history["member_loss"][-1])))

    models = _models()
    fit_stacked_sgmcmc(models, X, y, seeds=[0, 1], callbacks=[record], **fit)
    alone = _models()[0]
    alone.fit(X[0], y[0], seed=0, callbacks=[lambda m, e, h: alone_seen.append(e)], **fit)
    assert [e for _, e, _, _ in seen] == alone_seen == [0, 1, 2]
    assert all(got[0] is models[0] and got[1] is models[1] for got, _, _, _ in seen)
    assert [(n, k) for _, _, n, k in seen] == [(1, 2), (2, 2), (3, 2)]


@pytest.mark.parametrize("per_chain", [False, True], ids=["shared set", "own sets"])
def test_validation_scores_each_chain_as_its_own_fit(per_chain):
    """``member_val_nll`` is each chain's own fit's ``val_nll``, epoch by epoch: before a chain
    keeps a sample (its position) and after (its last kept samples)."""
    X, y = _data()
    xv, yv = _data(rows=10)
    if not per_chain:
        xv, yv = xv[0], yv[0]
    own = []
    for k, m in enumerate(_models()):
        pair = (xv[k], yv[k]) if per_chain else (xv, yv)
        own.append(m.fit(X[k], y[k], seed=k, epochs=6, batch_size=8, lr=1e-3,
                         validation_data=pair, progress=False))  # fmt: skip
    history = fit_stacked_sgmcmc(
        _models(), X, y, seeds=[0, 1], epochs=6, batch_size=8, lr=1e-3,
        validation_data=(xv, yv), progress=False,
    )  # fmt: skip
    for epoch in range(6):
        expected = [h["val_nll"][epoch] for h in own]
        assert history["member_val_nll"][epoch] == pytest.approx(expected, rel=TOL)
        assert history["val_nll"][epoch] == pytest.approx(sum(expected) / 2, rel=TOL)
    assert history["member_val_nll"][0] != history["member_val_nll"][-1]


def test_an_unshuffled_run_is_each_chains_own():
    X, y = _data()
    options = dict(epochs=3, batch_size=8, lr=1e-3, progress=False)
    alone = _models()
    for k, m in enumerate(alone):
        m.fit(X[k], y[k], seed=k, shuffle=False, **options)
    together, shuffled = _models(), _models()
    fit_stacked_sgmcmc(together, X, y, seeds=[0, 1], shuffle=False, **options)
    fit_stacked_sgmcmc(shuffled, X, y, seeds=[0, 1], **options)
    for a, b, c in zip(alone, together, shuffled, strict=True):
        for site, value in a.samples().items():
            assert torch.allclose(value, b.samples()[site], rtol=TOL, atol=TOL)
            assert not torch.allclose(value, c.samples()[site], rtol=TOL, atol=TOL)


def test_a_callback_that_needs_validation_runs_with_it_and_is_refused_without():
    """``EarlyStopping("val_nll")`` is checked against the run before any work: refused by its
    own check without validation data, run (and stopping the run) with it."""
    X, y = _data()
    xv, yv = _data(rows=10)
    options = {"seeds": [0, 1], "epochs": 6, "batch_size": 8, "lr": 1e-3, "progress": False}
    stop = bp.training.EarlyStopping("val_nll", patience=1, min_delta=1e9)
    with pytest.raises(ValueError, match="val_nll"):
        fit_stacked_sgmcmc(_models(), X, y, callbacks=[stop], **options)
    stop = bp.training.EarlyStopping("val_nll", patience=1, min_delta=1e9)
    history = fit_stacked_sgmcmc(
        _models(), X, y, callbacks=[stop], validation_data=(xv[0], yv[0]), **options
    )
    assert len(history["loss"]) == 2  # no epoch improves by 1e9: stopped after patience 1


def test_a_run_without_validation_data_records_no_validation_score():
    X, y = _data()
    history = fit_stacked_sgmcmc(_models(), X, y, seeds=[0, 1], epochs=2, progress=False)
    assert "val_nll" not in history and "member_val_nll" not in history
    assert len(history["loss"]) == 2
