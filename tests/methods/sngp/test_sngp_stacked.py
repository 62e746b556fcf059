"""``bp.fit_stacked`` of ``SNGP`` models: the bodies (spectral bounds included, each member's
power iteration its own) trained as one stacked net, the random-feature heads and noises beside
them under ``vmap``; each member ends as its own ``fit`` with its seed (float rounding), its
Laplace posterior included."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import bnn_pyro as bp
import bnn_pyro.training.resume as resume_module

# float64: in float32, Adam's steps on the bounded layers' near-zero gradients turn the stacked
# arithmetic's round-off (1e-7) into differences of up to 3e-5 after 12 steps; in float64 the
# members agree to 1e-15, so the comparison below can be tight
G = torch.Generator().manual_seed(0)
X = torch.randn(48, 3, generator=G, dtype=torch.float64)
Y = X[:, :2].sum(-1, keepdim=True) + 0.1 * torch.randn(48, 1, generator=G, dtype=torch.float64)
LABELS = (X[:, 0] > 0).long() + (X[:, 2] > 1).long()
SEEDS = [0, 1, 2]
FIT = {"epochs": 4, "batch_size": 16, "lr": 1e-2, "weight_decay": 1e-3, "progress": False}


def _models(task: str = "regression", bound: float | None = 0.95) -> list[bp.SNGP]:
    out = []
    for k in range(len(SEEDS)):
        torch.manual_seed(10 + k)  # each member its own weights and random features
        net = nn.Sequential(
            nn.Linear(3, 8), nn.Tanh(), nn.Dropout(0.1), nn.Linear(8, 8), nn.Tanh(),
            nn.Linear(8, 3 if task == "classification" else 1),
        ).double()  # fmt: skip
        likelihood = bp.Gaussian(scale="learned") if task == "regression" else task
        out.append(bp.SNGP(net, likelihood, num_features=64, spectral_bound=bound))
    return out


def _same(a: bp.SNGP, b: bp.SNGP) -> None:
    """Every parameter and buffer (the power iteration's vectors, the Laplace factor) alike."""
    for (name, p), q in zip(
        [*a.named_parameters(), *a.named_buffers()], [*b.parameters(), *b.buffers()], strict=True
    ):
        # 12 steps one by one against stacked (batched matmuls, vmap): float64 round-off,
        # relative to the tensor's largest entry (the Laplace factor's entries reach ~10)
        scale = float(p.detach().abs().max()) or 1.0
        torch.testing.assert_close(p, q, rtol=0.0, atol=1e-12 * scale, msg=name)


@pytest.mark.parametrize("task", ["regression", "classification"])
@pytest.mark.parametrize("bound", [0.95, None], ids=["bounded", "unbounded"])
@pytest.mark.parametrize("per_member", [False, True], ids=["shared data", "own data"])
def test_each_member_ends_as_its_own_fit(task, bound, per_member):
    y = Y if task == "regression" else LABELS
    x = torch.stack([X, X.flip(0), X.roll(7, 0)]) if per_member else X
    y = torch.stack([y, y.flip(0), y.roll(7, 0)]) if per_member else y
    alone = _models(task, bound)
    for k, m in enumerate(alone):
        m.fit(x[k] if per_member else x, y[k] if per_member else y, seed=SEEDS[k], **FIT)
    together = _models(task, bound)
    history = bp.fit_stacked(together, x, y, seeds=SEEDS, **FIT)
    assert len(history["member_loss"][-1]) == 3
    for a, b in zip(alone, together, strict=True):
        _same(a, b)
        mean_a, var_a = a.predict(X[:5], seed=3)
        mean_b, var_b = b.predict(X[:5], seed=3)
        torch.testing.assert_close(mean_a, mean_b, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(var_a, var_b, rtol=1e-10, atol=1e-12)
    if bound is not None:  # each member's own power iteration moved its own vectors
        u = [dict(m.model.named_buffers())["0.parametrizations.weight.0._u"] for m in together]
        assert not torch.allclose(u[0], u[1])


@pytest.mark.parametrize("option", [
    {"average": 0.5},
    {"validation_data": (X[:12] + 0.5, Y[:12])},
])  # fmt: skip
def test_an_option_does_for_each_member_what_its_own_fit_does(option):
    alone = _models()
    own = [m.fit(X, Y, seed=SEEDS[k], **FIT, **option) for k, m in enumerate(alone)]
    together = _models()
    history = bp.fit_stacked(together, X, Y, seeds=SEEDS, **FIT, **option)
    for a, b in zip(alone, together, strict=True):
        _same(a, b)
    if "validation_data" in option:
        got = torch.tensor(history["member_val_loss"])
        expected = torch.tensor([h["val_loss"] for h in own]).T
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


class Interrupted(Exception):
    """Raised by a callback to stop a run as a crash would."""


def test_an_interrupted_run_resumes_to_the_uninterrupted_numbers(tmp_path, monkeypatch):
    """The resume file holds the power iteration's stacked vectors with the parameters: a run
    resumed from it is the run never interrupted, bit for bit."""
    monkeypatch.setattr(resume_module, "SAVE_SECONDS", 0.0)  # a file after every epoch
    path = tmp_path / "run.pt"
    calls = []

    def interrupt(models, epoch, history):
        calls.append(epoch)
        if len(calls) == 2:
            raise Interrupted

    full = _models()
    expected = bp.fit_stacked(full, X, Y, seeds=SEEDS, **FIT)
    with pytest.raises(Interrupted):
        bp.fit_stacked(_models(), X, Y, seeds=SEEDS, callbacks=[interrupt], resume=path, **FIT)
    resumed = _models()
    history = bp.fit_stacked(resumed, X, Y, seeds=SEEDS, resume=path, **FIT)
    assert history["member_loss"] == expected["member_loss"]
    for a, b in zip(full, resumed, strict=True):
        mine, theirs = [*a.parameters(), *a.buffers()], [*b.parameters(), *b.buffers()]
        for p, q in zip(mine, theirs, strict=True):
            assert torch.equal(p, q)
