"""A deep ensemble's stacked fit (``bnn_pyro/methods/ensemble/stacked.py``) against the one-by-one
fit of the same members (its reference: each member ends as its own seeded run), value by
value: with dropout members (train mode and each member's masks while training, eval mode
while validating), an iterate average, callbacks, the bar and the refusals."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import bnn_pyro as bp
from bnn_pyro.methods.classic.training import check_fit_args
from bnn_pyro.methods.ensemble import stacked as ensemble_stacked
from bnn_pyro.methods.ensemble.stacked import _member_seeds, why_not_stacked
from bnn_pyro.training import distributed

G = torch.Generator().manual_seed(0)
X = torch.randn(24, 3, generator=G)
Y = X.sum(-1, keepdim=True) + 0.1 * torch.randn(24, 1, generator=G)
XV, YV = X[:6] + 0.5, Y[:6]


def _ensemble(dropout: float = 0.5) -> bp.DeepEnsemble:
    torch.manual_seed(0)
    return bp.DeepEnsemble(
        lambda: nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Dropout(dropout), nn.Linear(8, 1)),
        2,
        likelihood="regression",
    )


def _fit(stacked: bool, **kw) -> tuple[bp.DeepEnsemble, dict]:
    ens = _ensemble()
    options = {"epochs": 3, "batch_size": 8, "lr": 0.01, "seed": 5, "progress": False, **kw}
    history = ens.fit(X, Y, stacked=stacked, **options)
    return ens, history


def _weights(ens: bp.DeepEnsemble) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in ens.parameters()])


def test_dropout_members_train_stacked_as_one_by_one():
    """Dropout is on while training (each member's own masks) in both paths: the losses and the
    trained weights agree to float rounding (float32 sums over 8-row batches: 1e-5)."""
    one, h_one = _fit(stacked=False)
    many, h_many = _fit(stacked=True)
    torch.testing.assert_close(_weights(many), _weights(one), rtol=1e-5, atol=1e-5)
    assert h_many["loss"] == pytest.approx(h_one["loss"], rel=1e-5)
    # the masks matter: without dropout the same fit ends elsewhere
    ens = _ensemble(dropout=0.0)
    ens.fit(X, Y, stacked=True, epochs=3, batch_size=8, lr=0.01, seed=5, progress=False)
    assert not torch.allclose(_weights(ens), _weights(many), atol=1e-3)


def test_the_validation_loss_is_each_members_eval_mode_loss():
    """``member_val_loss`` is each trained member's mean squared error on the validation rows
    with dropout off (after one epoch the members hold the weights it was scored with)."""
    ens, history = _fit(stacked=True, epochs=1, validation_data=(XV, YV))
    with torch.no_grad():
        expected = [float(((m.eval()(XV) - YV) ** 2).mean()) for m in ens.models]
    assert history["member_val_loss"][0] == pytest.approx(expected, rel=1e-5)
    assert history["val_loss"][0] == pytest.approx(sum(expected) / 2, rel=1e-5)


def test_an_iterate_average_ends_as_one_by_one():
    one, _ = _fit(stacked=False, average=0.5)
    many, _ = _fit(stacked=True, average=0.5)
    plain, _ = _fit(stacked=True)
    torch.testing.assert_close(_weights(many), _weights(one), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(_weights(many), _weights(plain), atol=1e-4)


def test_callbacks_see_the_ensemble_in_training_mode_each_epoch_and_the_history_so_far():
    seen = []
    ens = _ensemble()
    ens.fit(
        X, Y, stacked=True, epochs=2, batch_size=8, lr=0.01, seed=5, progress=False,
        callbacks=[lambda m, epoch, h: seen.append((m, epoch, len(h["loss"]), m.training))],
    )  # fmt: skip
    # the members are in training mode while they train, as in the one-by-one fit
    assert [(m is ens, *rest) for m, *rest in seen] == [(True, 0, 1, True), (True, 1, 2, True)]


def test_the_bar_and_a_divergence_name_the_stacked_run(capsys):
    _fit(stacked=True, epochs=1, progress=True)
    assert "DeepEnsemble, 2 members stacked" in capsys.readouterr().err
    ens = _ensemble(dropout=0.0)
    with pytest.raises(FloatingPointError, match=r"DeepEnsemble \(lr=1000000.0\)"):
        ens.fit(X, Y * 1e30, stacked=True, epochs=3, lr=1e6, seed=0, progress=False)


def test_drawn_member_seeds_span_the_whole_range():
    """Without a seed each member's is drawn from ``[0, 2**62)``: 50 draws below ``2**32``
    would have probability ``2**-1500``."""
    torch.manual_seed(0)
    seeds = _member_seeds(None, 50)
    assert len(set(seeds)) == 50 and max(seeds) >= 2**32 and min(seeds) >= 0
    assert _member_seeds(7, 3) == [7, 8, 9]


def test_under_torch_distributed_the_members_train_one_at_a_time(monkeypatch):
    settings = check_fit_args(1, 8, 1e-3, 0.0, None, False, 0)
    members = [nn.Linear(2, 1), nn.Linear(2, 1)]
    assert why_not_stacked(members, settings) is None
    monkeypatch.setattr(distributed, "active", lambda: True)
    assert ensemble_stacked.why_not_stacked(members, settings) == (
        "torch.distributed trains one model at a time"
    )
