"""``bp.fit_stacked`` of ``VBLL`` models: the bodies trained as one stacked net and the ``q``'s
beside them under ``vmap``; each member ends as its own ``fit`` with its seed (float rounding),
with every option of that fit, and what cannot train stacked is refused by name before any
work."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import bnn_pyro as bp
import bnn_pyro.training.resume as resume_module

G = torch.Generator().manual_seed(0)
X = torch.randn(48, 3, generator=G)
Y = X[:, :2].sum(-1, keepdim=True) + 0.1 * torch.randn(48, 1, generator=G)
LABELS = (X[:, 0] + X[:, 1] > 0).long() + (X[:, 2] > 1).long()
SEEDS = [0, 1, 2]
FIT = {"epochs": 4, "batch_size": 16, "lr": 1e-2, "weight_decay": 1e-3, "progress": False}


def _models(task: str = "regression", covariance: str = "dense", **options) -> list[bp.VBLL]:
    out = []
    for k in range(len(SEEDS)):
        torch.manual_seed(10 + k)  # each member its own initial weights
        net = nn.Sequential(
            nn.Linear(3, 8),
            nn.Tanh(),
            nn.Dropout(0.1),
            nn.Linear(8, 3 if task == "classification" else 1),
        )
        likelihood = bp.Gaussian(scale="learned") if task == "regression" else task
        out.append(bp.VBLL(net, likelihood, covariance=covariance, **options))
    return out


def _state(m: bp.VBLL) -> list[torch.Tensor]:
    return [p.detach().clone() for p in m.parameters()]


def _same(a: bp.VBLL, b: bp.VBLL) -> None:
    # 4 epochs x 3 steps, one by one against stacked (batched matmuls, vmap): float32 round-off
    for p, q in zip(_state(a), _state(b), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def _data(task: str, per_member: bool) -> tuple[torch.Tensor, torch.Tensor]:
    y = Y if task == "regression" else LABELS
    if not per_member:
        return X, y
    return torch.stack([X, X.flip(0), X.roll(7, 0)]), torch.stack([y, y.flip(0), y.roll(7, 0)])


@pytest.mark.parametrize("task", ["regression", "classification"])
@pytest.mark.parametrize("covariance", ["dense", "diagonal"])
@pytest.mark.parametrize("per_member", [False, True], ids=["shared data", "own data"])
def test_each_member_ends_as_its_own_fit(task, covariance, per_member):
    x, y = _data(task, per_member)
    alone = _models(task, covariance)
    for k, m in enumerate(alone):
        m.fit(x[k] if per_member else x, y[k] if per_member else y, seed=SEEDS[k], **FIT)
    together = _models(task, covariance)
    history = bp.fit_stacked(together, x, y, seeds=SEEDS, **FIT)
    assert len(history["member_loss"][-1]) == 3
    for a, b in zip(alone, together, strict=True):
        _same(a, b)
        if task == "regression":  # the learned noise, handed to noise_scale after the fit
            assert a.noise_scale == pytest.approx(b.noise_scale, rel=1e-5)
        mean_a, var_a = a.predict(X[:5], seed=3)  # a classifier samples its softmax
        mean_b, var_b = b.predict(X[:5], seed=3)
        torch.testing.assert_close(mean_a, mean_b, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(var_a, var_b, rtol=1e-5, atol=1e-6)
    # the members moved apart (their own seeds and starts): the check above could fail
    assert not torch.allclose(together[0].head.mean, together[1].head.mean)


@pytest.mark.parametrize("option", [
    {"average": 0.5},
    {"validation_data": (X[:12] + 0.5, Y[:12])},
    {"lr_schedule": "cosine", "optimizer": "sgd"},
])  # fmt: skip
def test_an_option_does_for_each_member_what_its_own_fit_does(option):
    alone = _models()
    own = [m.fit(X, Y, seed=SEEDS[k], **FIT, **option) for k, m in enumerate(alone)]
    together = _models()
    history = bp.fit_stacked(together, X, Y, seeds=SEEDS, **FIT, **option)
    for a, b in zip(alone, together, strict=True):
        _same(a, b)
    if "validation_data" in option:  # each member scored as its own fit scores it
        got = torch.tensor(history["member_val_loss"])
        expected = torch.tensor([h["val_loss"] for h in own]).T
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_a_fixed_noise_stays_each_members_own():
    """A fixed noise is a value of the head (not trained): members with their own fixed noise
    train stacked, each under its own."""
    alone, together = _models(), _models()
    for models in (alone, together):
        for k, m in enumerate(models):
            m.noise_scale = 0.2 * (k + 1)
    for k, m in enumerate(alone):
        m.fit(X, Y, seed=SEEDS[k], **FIT)
    bp.fit_stacked(together, X, Y, seeds=SEEDS, **FIT)
    for k, (a, b) in enumerate(zip(alone, together, strict=True)):
        _same(a, b)
        assert b.noise_scale == pytest.approx(0.2 * (k + 1))


class Interrupted(Exception):
    """Raised by a callback to stop a run as a crash would."""


def test_an_interrupted_run_resumes_to_the_uninterrupted_numbers(tmp_path, monkeypatch):
    """The resume file holds the stacked heads with the stacked bodies."""
    monkeypatch.setattr(resume_module, "SAVE_SECONDS", 0.0)  # a file after every epoch
    path = tmp_path / "run.pt"
    calls = []

    def interrupt(models, epoch, history):
        calls.append(epoch)
        if len(calls) == 2:
            raise Interrupted

    full = _models()
    expected = bp.fit_stacked(full, X, Y, seeds=SEEDS, callbacks=[lambda *a: None], **FIT)
    with pytest.raises(Interrupted):
        bp.fit_stacked(_models(), X, Y, seeds=SEEDS, callbacks=[interrupt], resume=path, **FIT)
    resumed = _models()
    history = bp.fit_stacked(resumed, X, Y, seeds=SEEDS, callbacks=[interrupt], resume=path, **FIT)
    assert calls == [0, 1, 1, 2, 3]  # epoch 1's file was not written: it runs again
    assert history["member_loss"] == expected["member_loss"]
    for a, b in zip(full, resumed, strict=True):
        for p, q in zip(_state(a), _state(b), strict=True):
            assert torch.equal(p, q)


def test_a_callback_that_changes_a_head_is_what_training_goes_on_from():
    """After each epoch the heads are written back before the callbacks and read back after:
    what a callback puts in a member's ``q`` is where that member goes on from, as in its own
    fit with the same callback."""

    def zero(head: nn.Module, epoch: int) -> None:
        if epoch == 1:
            with torch.no_grad():
                head.mean.zero_()

    own = _models()[1]
    own.fit(X, Y, seed=SEEDS[1], callbacks=[lambda m, epoch, h: zero(m.head, epoch)], **FIT)
    models = _models()
    bp.fit_stacked(
        models, X, Y, seeds=SEEDS, callbacks=[lambda ms, epoch, h: zero(ms[1].head, epoch)], **FIT
    )
    _same(own, models[1])
    untouched = _models()[1]
    untouched.fit(X, Y, seed=SEEDS[1], **FIT)
    assert not torch.allclose(untouched.head.mean, models[1].head.mean, atol=1e-3)


def test_different_settings_are_refused_by_name():
    models = _models()
    models[2] = _models(prior_scale=2.0)[2]
    with pytest.raises(ValueError, match=r"^the models' prior_scale differ \(1.0 and 2.0\)"):
        bp.fit_stacked(models, X, Y, seeds=SEEDS, **FIT)
    # refused before any work: the nets are as they were, their last layers back in place
    assert all(isinstance(m.model[3], nn.Linear) for m in models)


class Twice(nn.Module):
    """Applies its last layer twice: the features it reads are not the body's output."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(3, 3)
        self.head = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.head(self.body(x))))


def test_a_net_that_calls_its_last_layer_twice_is_refused_by_name():
    models = []
    for k in range(2):
        torch.manual_seed(k)
        models.append(bp.VBLL(Twice(), "regression"))
    y = torch.randn(48, 3, generator=G)
    with pytest.raises(ValueError, match=r"^VBLL's net does not end with one call of its last"):
        bp.fit_stacked(models, X, y, seeds=[0, 1], **FIT)
    assert all(isinstance(m.model.head, nn.Linear) for m in models)


def test_a_net_that_is_its_last_layer_alone_is_refused_by_name():
    models = [bp.VBLL(nn.Linear(3, 1), "regression") for _ in range(2)]
    with pytest.raises(ValueError, match=r"^VBLL's net is its last nn.Linear alone"):
        bp.fit_stacked(models, X, Y, seeds=[0, 1], **FIT)


def test_callbacks_see_each_model_whole():
    """The stacked fit trains each net's body without touching the net: a callback sees the
    nets with their last layers, whose outputs it can use (the layer holds the start of ``q``'s
    mean until the fit ends)."""
    models = _models()
    shapes = []

    def look(ms, epoch, history):
        shapes.append([tuple(m.model(X[:4]).shape) for m in ms])
        shapes.append([tuple(m.predict(X[:4])[0].shape) for m in ms])

    bp.fit_stacked(models, X, Y, seeds=SEEDS, callbacks=[look], **FIT)
    assert shapes == [[(4, 1)] * 3] * (2 * FIT["epochs"])
    assert all(isinstance(m.model[3], nn.Linear) for m in models)


def test_a_kl_weight_and_a_last_layer_without_bias_stack_as_they_fit():
    """The member's own loss in the stack: its ``kl_weight``, and features without the bias's
    column of ones where the last layer has no bias."""
    x, y = _data("regression", per_member=False)

    def models() -> list[bp.VBLL]:
        out = []
        for k in range(2):
            torch.manual_seed(10 + k)
            net = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1, bias=False))
            out.append(bp.VBLL(net, bp.Gaussian(scale="learned"), kl_weight=0.25))
        return out

    alone, together = models(), models()
    for k, m in enumerate(alone):
        m.fit(x, y, seed=SEEDS[k], **FIT)
    bp.fit_stacked(together, x, y, seeds=SEEDS[:2], **FIT)
    for a, b in zip(alone, together, strict=True):
        _same(a, b)
    assert together[0].head.mean.shape == (1, 8)  # no bias column
