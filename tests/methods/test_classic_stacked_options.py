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
from bnn_pyro.methods.classic import stacked_engine
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


def test_an_iterate_average_is_each_members_own():
    alone, together = _models("swag"), _models("swag")
    for m, s in zip(alone, SEEDS, strict=True):
        m.fit(X, Y, seed=s, average=0.5, **FIT)
    bp.fit_stacked(together, X, Y, seeds=SEEDS, average=0.5, **FIT)
    last = _models("swag")
    bp.fit_stacked(last, X, Y, seeds=SEEDS, **FIT)
    for a, b, c in zip(alone, together, last, strict=True):
        assert _close(_weights(a), _weights(b))
        assert not _close(_weights(b), _weights(c))  # the average is not the last iterate


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
    with pytest.raises(ValueError, match="seeds"):  # another run's file is refused
        bp.fit_stacked(_models("swag"), X, Y, seeds=[5, 6, 7], resume=path, **options)


def test_a_compiled_stacked_fit_follows_the_eager_one(monkeypatch):
    compiled_losses = []

    def spy(loss):  # the engine's compile_loss, counted
        compiled_losses.append(loss)
        return compile_loss(loss)

    monkeypatch.setattr(stacked_engine, "compile_loss", spy)
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
            record = lambda method, epoch, history: seen.append((k, len(history["loss"])))  # noqa: E731
            return [*own(epochs), record]

        m.epoch_callbacks = callbacks
    bp.fit_stacked(models, X, Y, seeds=SEEDS, **FIT)
    assert seen == [(k, e) for e in range(1, 5) for k in range(3)]
    assert [m.n_models for m in models] == [2, 2, 2]  # SWAG's own callbacks ran too
