"""``bp.fit_stacked`` of MC dropout, SWAG and Laplace takes what their own ``fit`` takes
(validation data, an iterate average, callbacks, a resume file, a compiled loss), and each does
for every member what it does in that member's own fit; ``EarlyStopping(restore_best=True)``
is honoured by a stacked run (the stacked ensemble's included)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import bnn_pyro as bp
import bnn_pyro.training.resume as resume_module
from bnn_pyro.methods.classic import engine
from bnn_pyro.training.compiled import compile_loss

G = torch.Generator().manual_seed(0)
X = torch.randn(60, 3, generator=G)
Y = X[:, :2].sum(-1, keepdim=True) + 0.1 * torch.randn(60, 1, generator=G)
XV, YV = X[:15] + 0.5, Y[:15]
SEEDS = [0, 1, 2]
FIT = {"epochs": 4, "batch_size": 16, "lr": 1e-2, "progress": False}


def _net(dropout: float = 0.1) -> nn.Module:
    return nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Dropout(dropout), nn.Linear(8, 1))


def _models(kind: str = "dropout") -> list:
    out = []
    for k in range(len(SEEDS)):
        torch.manual_seed(10 + k)
        if kind == "dropout":
            out.append(bp.MCDropout(_net(), likelihood="regression"))
        else:
            out.append(bp.SWAG(_net(0.0), likelihood="regression"))
    return out


def _weights(m) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in m.model.parameters()])


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    # 4 epochs x 4 steps of one-by-one against stacked arithmetic: float32 round-off only
    return bool(torch.allclose(a, b, rtol=1e-5, atol=1e-6))


@pytest.mark.parametrize("per_member", [False, True], ids=["shared set", "own sets"])
def test_validation_scores_each_member_as_its_own_fit(per_member):
    xv = torch.stack([XV, XV.flip(0), XV * 2]) if per_member else XV
    yv = torch.stack([YV, YV.flip(0), YV * 2]) if per_member else YV
    alone = _models()
    own = [
        m.fit(X, Y, seed=s, validation_data=(xv[k], yv[k]) if per_member else (xv, yv), **FIT)
        for k, (m, s) in enumerate(zip(alone, SEEDS, strict=True))
    ]
    history = bp.fit_stacked(_models(), X, Y, seeds=SEEDS, validation_data=(xv, yv), **FIT)
    for epoch in range(FIT["epochs"]):
        expected = [h["val_loss"][epoch] for h in own]
        assert history["member_val_loss"][epoch] == pytest.approx(expected, rel=1e-5)
        assert history["val_loss"][epoch] == pytest.approx(sum(expected) / 3, rel=1e-5)
    # the members' own sets differ, so their scores do
    assert len(set(history["member_val_loss"][-1])) == 3


@pytest.mark.parametrize(
    "option", [{"average": 0.5}, {"lr_schedule": "cosine"}], ids=["average", "lr schedule"]
)
def test_an_option_does_for_each_member_what_its_own_fit_does(option):
    alone, together = _models("swag"), _models("swag")
    for m, s in zip(alone, SEEDS, strict=True):
        m.fit(X, Y, seed=s, **option, **FIT)
    bp.fit_stacked(together, X, Y, seeds=SEEDS, **option, **FIT)
    default = _models("swag")
    bp.fit_stacked(default, X, Y, seeds=SEEDS, **FIT)
    for a, b, c in zip(alone, together, default, strict=True):
        assert _close(_weights(a), _weights(b))
        assert not _close(_weights(b), _weights(c))  # the option changed the run


def test_the_defaults_are_each_models_own_fits():
    """No options: each member is its own ``fit`` with the class's defaults (100 epochs of
    minibatches of 32 rows, Adam at 1e-3), on a set larger than one minibatch."""
    x, y = torch.cat([X, X[:10]]), torch.cat([Y, Y[:10]])  # 70 rows: 3 minibatches of 32
    alone, together = _models(), _models()
    for m, s in zip(alone, SEEDS, strict=True):
        m.fit(x, y, seed=s, progress=False)
    bp.fit_stacked(together, x, y, seeds=SEEDS, progress=False)
    for a, b in zip(alone, together, strict=True):
        assert torch.allclose(_weights(a), _weights(b), rtol=1e-4, atol=1e-5)  # 300 steps


def test_a_validation_monitor_may_stop_the_run():
    stop = bp.EarlyStopping("val_loss", patience=1, min_delta=1e9)
    history = bp.fit_stacked(
        _models(), X, Y, seeds=SEEDS, validation_data=(XV, YV), callbacks=[stop], **FIT
    )
    assert len(history["val_loss"]) == 2  # epoch 0 the best, epoch 1 no better by 1e9: stop


def test_a_diverging_run_names_the_method():
    with pytest.raises(bp.TrainingDivergedError, match=r"MCDropout \(lr=1000000.0\)"):
        bp.fit_stacked(_models(), X, Y * 1e30, seeds=SEEDS, **{**FIT, "lr": 1e6})


def test_callbacks_see_the_models_as_trained_so_far_and_can_stop_them():
    seen: list[list[float]] = []

    def callback(models, epoch, history):
        assert isinstance(models, nn.ModuleList) and len(models) == 3
        seen.append([float(_weights(m).sum()) for m in models])
        return epoch == 1  # stop after the second epoch

    together = _models()
    history = bp.fit_stacked(together, X, Y, seeds=SEEDS, callbacks=[callback], **FIT)
    assert len(history["loss"]) == 2 and len(seen) == 2
    for k, s in enumerate(SEEDS):
        one = _models()[k]
        one.fit(X, Y, seed=s, **{**FIT, "epochs": 1})
        assert seen[0][k] == pytest.approx(float(_weights(one).sum()), rel=1e-5)
        two = _models()[k]
        two.fit(X, Y, seed=s, **{**FIT, "epochs": 2})
        assert _close(_weights(together[k]), _weights(two))


def test_one_model_takes_every_option_of_its_own_fit():
    """K = 1 is the model's own fit; its callbacks see the models too."""
    seen = []
    options = dict(FIT, average=0.5, validation_data=(XV, YV))
    (one,) = _models()[:1]
    history = bp.fit_stacked(
        [one], X, Y, seeds=[0], callbacks=[lambda m, e, h: seen.append(type(m))], **options
    )
    (own,) = _models()[:1]
    expected = own.fit(X, Y, seed=0, **options)
    assert torch.equal(_weights(one), _weights(own))
    assert history["val_loss"] == expected["val_loss"]
    assert seen == [nn.ModuleList] * FIT["epochs"]


@pytest.mark.parametrize("how", ["stacked fit", "stacked ensemble"])
def test_restore_best_leaves_the_best_epoch(how):
    """A loss that never improves by 1e9 stops after one more epoch and restores the first:
    the models end as a one-epoch run."""

    def run(epochs: int, callbacks=()):
        if how == "stacked fit":
            models = _models()
            bp.fit_stacked(
                models, X, Y, seeds=SEEDS, callbacks=callbacks, **{**FIT, "epochs": epochs}
            )
            return [_weights(m) for m in models]
        torch.manual_seed(0)
        ens = bp.DeepEnsemble(lambda: _net(0.0), 3, likelihood="regression")
        ens.fit(X, Y, seed=0, stacked=True, callbacks=callbacks, **{**FIT, "epochs": epochs})
        return [torch.cat([p.detach().reshape(-1) for p in m.parameters()]) for m in ens.models]

    stop = bp.EarlyStopping("loss", patience=1, min_delta=1e9, restore_best=True)
    best = run(4, [stop])
    assert stop.best_epoch == 0
    for got, expected, last in zip(best, run(1), run(2), strict=True):
        assert torch.equal(got, expected)
        assert not torch.equal(got, last)


class Interrupted(Exception):
    """Raised by a callback to stop a run as a crash would."""


def test_an_interrupted_run_resumes_to_the_uninterrupted_numbers(tmp_path, monkeypatch):
    monkeypatch.setattr(resume_module, "SAVE_SECONDS", 0.0)  # a file after every epoch
    path = tmp_path / "run.pt"
    options = dict(FIT, epochs=6)
    calls = []

    def interrupt(models, epoch, history):
        calls.append(epoch)
        if len(calls) == 3:
            raise Interrupted

    full = _models("swag")
    expected = bp.fit_stacked(full, X, Y, seeds=SEEDS, callbacks=[lambda *a: None], **options)
    with pytest.raises(Interrupted):
        bp.fit_stacked(
            _models("swag"), X, Y, seeds=SEEDS, callbacks=[interrupt], resume=path, **options
        )
    resumed = _models("swag")
    history = bp.fit_stacked(
        resumed, X, Y, seeds=SEEDS, callbacks=[interrupt], resume=path, **options
    )
    assert calls == [0, 1, 2, 2, 3, 4, 5]  # epoch 2's file was not written: it runs again
    assert history["member_loss"] == expected["member_loss"]
    for a, b in zip(full, resumed, strict=True):
        assert torch.equal(_weights(a), _weights(b))
        assert torch.equal(a.swag_mean, b.swag_mean) and a.n_models == b.n_models == 3
    with pytest.raises(ValueError, match=r"with seeds=\[0, 1, 2\], this fit has seeds=\[5, 6, 7\]"):
        bp.fit_stacked(_models("swag"), X, Y, seeds=[5, 6, 7], resume=path, **options)
    # a finished stacked run does not go on to more epochs (SWAG's snapshots are planned
    # over the run's epochs): refused, as for an ensemble's own fit
    with pytest.raises(ValueError, match="epochs=6, this fit has epochs=8"):
        bp.fit_stacked(_models("swag"), X, Y, seeds=SEEDS, resume=path, **{**options, "epochs": 8})


def test_a_compiled_stacked_fit_follows_the_eager_one(monkeypatch):
    compiled_losses = []

    def spy(loss):  # the engine's compile_loss, counted
        compiled_losses.append(loss)
        return compile_loss(loss)

    monkeypatch.setattr(engine, "compile_loss", spy)
    eager, compiled = _models(), _models()
    a = bp.fit_stacked(eager, X, Y, seeds=SEEDS, **FIT)
    assert compiled_losses == []  # the eager fit compiles nothing
    b = bp.fit_stacked(compiled, X, Y, seeds=SEEDS, compile=True, **FIT)
    assert len(compiled_losses) == 1
    # the compiled graph sums in another order: float32 round-off over 16 steps
    got, expected = torch.tensor(b["member_loss"]), torch.tensor(a["member_loss"])
    assert torch.allclose(got, expected, rtol=1e-4)
    for m, n in zip(eager, compiled, strict=True):
        assert torch.allclose(_weights(m), _weights(n), rtol=1e-4, atol=1e-5)


def test_a_models_own_epoch_callbacks_see_the_history_so_far():
    """What a method runs after each epoch of its fit (SWAG's snapshot collector) is run per
    member with the stacked run's history."""
    seen = []
    models = _models("swag")
    for k, m in enumerate(models):
        own = m.epoch_callbacks

        def callbacks(epochs, own=own, k=k):
            def record(method, epoch, history, k=k):
                assert method is models[k]
                seen.append((k, len(history["loss"])))

            return [*own(epochs), record]

        m.epoch_callbacks = callbacks
    bp.fit_stacked(models, X, Y, seeds=SEEDS, **FIT)
    assert seen == [(k, e) for e in range(1, 5) for k in range(3)]
    assert [m.n_models for m in models] == [2, 2, 2]  # SWAG's own callbacks ran too


def test_one_model_hands_resume_compile_progress_and_its_validation_set_to_its_fit(
    tmp_path, monkeypatch, capsys
):
    compiled = []
    monkeypatch.setattr(engine, "compile_loss", lambda loss: compiled.append(loss) or loss)
    path = tmp_path / "one.pt"
    (one,) = _models()[:1]
    history = bp.fit_stacked(
        [one], X[None], Y[None], seeds=[0], resume=path, compile=True,
        validation_data=(XV[None], YV[None]), **FIT,
    )  # fmt: skip
    assert path.exists() and len(compiled) == 1 and capsys.readouterr().err == ""
    (own,) = _models()[:1]
    expected = own.fit(X, Y, seed=0, validation_data=(XV, YV), **FIT)
    assert history["val_loss"] == expected["val_loss"]


def test_no_models_is_refused_by_the_stacked_fit_itself():
    from bnn_pyro.methods.classic.stacked import fit_classic_stacked

    with pytest.raises(ValueError, match="^fit_stacked trains models of one of MCDropout"):
        fit_classic_stacked([], X, Y, seeds=[])
