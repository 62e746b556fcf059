"""The classic family's one engine (``methods/classic/engine.py``), value by value: one net
(``train_epochs``) and K stacked (``train_stacked``) through the same ``train_nets``; its
validation score, callbacks, progress bar, divergence message and iterate average."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from bnn_pyro.exceptions import TrainingDivergedError
from bnn_pyro.methods.classic.engine import train_epochs, train_nets, train_stacked
from bnn_pyro.methods.classic.training import check_fit_args
from bnn_pyro.training.batches import permuted_batches

OK = dict(
    epochs=3, batch_size=8, lr=0.1, weight_decay=0.0, optimizer=None, progress=False, seed=None
)


def _settings(**kw):
    return check_fit_args(**{**OK, "epochs": 2, "batch_size": 4, **kw})


def _mse(net):
    return lambda xb, yb: ((net(xb) - yb) ** 2).mean()


def test_the_validation_loss_is_scored_in_eval_mode_and_callbacks_see_the_owner():
    """train_epochs scores validation_data in eval mode (dropout off: the loss of the net as
    it predicts), and each callback gets (owner, epoch, history so far)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 8), nn.Dropout(0.5), nn.Linear(8, 1))
    owner = nn.Linear(1, 1)  # e.g. the ensemble a member belongs to
    x, y = torch.randn(16, 2), torch.randn(16, 1)
    xv, yv = torch.randn(8, 2), torch.randn(8, 1)
    seen = []
    history = train_epochs(
        net.parameters(), _mse(net), (x, y), _settings(), module=net, owner=owner,
        name="probe run", seed=0, validation=(xv, yv),
        callbacks=[lambda m, epoch, h: seen.append((m, epoch, list(h["loss"])))],
    )  # fmt: skip
    net.eval()
    with torch.no_grad():
        eval_loss = float(((net(xv) - yv) ** 2).mean())
    assert history["val_loss"][-1] == pytest.approx(eval_loss, rel=1e-6)
    assert "member_val_loss" not in history and "member_loss" not in history
    assert [(m is owner, e) for m, e, _ in seen] == [(True, 0), (True, 1)]
    assert [rows for _, _, rows in seen] == [history["loss"][:1], history["loss"][:2]]


def test_the_bar_names_the_run_and_a_divergence_names_its_lr(capsys):
    """progress=True shows a bar labelled with the run's name; a non-finite loss is refused
    naming it and the learning rate."""
    net = nn.Linear(2, 1)
    x, y = torch.randn(8, 2), torch.randn(8, 1)
    loss = _mse(net)
    train_epochs(net.parameters(), loss, (x, y), _settings(progress=True), module=net,
                 owner=net, name="my run")  # fmt: skip
    assert "my run" in capsys.readouterr().err
    train_epochs(net.parameters(), loss, (x, y), _settings(), module=net, owner=net, name="my run")
    assert "my run" not in capsys.readouterr().err
    with pytest.raises(TrainingDivergedError, match=r"^my run \(lr=0.1\): the loss is inf"):
        train_epochs(net.parameters(), lambda xb, yb: loss(xb, yb) * float("inf"), (x, y),
                     _settings(), module=net, owner=net, name="my run")  # fmt: skip


def test_an_iterate_average_ends_at_the_mean_of_the_last_share_of_steps():
    """average=0.5 over 4 full-batch epochs (one step each): the parameters end at the mean of
    their values after the steps of the last 2 epochs (read by a callback after each)."""
    torch.manual_seed(0)
    net = nn.Linear(2, 1)
    x, y = torch.randn(8, 2), torch.randn(8, 1)
    after = []
    train_epochs(
        net.parameters(), _mse(net), (x, y), _settings(epochs=4, batch_size=8, average=0.5),
        module=net, owner=net, name="avg", seed=0,
        callbacks=[lambda m, epoch, h: after.append((m, net.weight.detach().clone()))],
    )  # fmt: skip
    assert all(m is net for m, _ in after)
    after = [w for _, w in after]
    torch.testing.assert_close(net.weight.detach(), (after[2] + after[3]) / 2)
    assert not torch.allclose(after[2], after[3])  # the average is not one of them


def test_each_stacked_member_is_its_own_seeded_run():
    """The same engine under both calls: two nets trained by ``train_stacked`` with seeds 5 and
    6 end where each trained alone by ``train_epochs`` with its seed ends (its rows and dropout
    masks drawn in the same order from one stream), and each member's ``member_loss`` is its
    own run's ``loss``. Up to float rounding: the stacked pass is a batched matmul (1e-5 is a
    few hundred float32 ulps of weights of order 1 after 9 Adam steps)."""
    torch.manual_seed(0)
    make = lambda: nn.Sequential(nn.Linear(2, 8), nn.Dropout(0.3), nn.Tanh(), nn.Linear(8, 1))  # noqa: E731
    nets = [make(), make()]
    alone = [make(), make()]
    for a, b in zip(alone, nets, strict=True):
        a.load_state_dict(b.state_dict())
    x, y = torch.randn(20, 2), torch.randn(20, 1)
    settings = _settings(epochs=3, batch_size=7, lr_schedule="cosine")
    runs = [
        train_epochs(
            net.parameters(),
            _mse(net),
            (x, y),
            settings,
            module=net,
            owner=net,
            name="one",
            seed=seed,
        )  # fmt: skip
        for net, seed in zip(alone, (5, 6), strict=True)
    ]
    mse = lambda out, yb: ((out - yb) ** 2).mean((1, 2))  # noqa: E731
    stack = train_stacked(nets, mse, (x, y), settings, [5, 6], owner=nets[0], name="k", desc="k")
    for one, net in zip(alone, nets, strict=True):
        for a, b in zip(one.parameters(), net.parameters(), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        assert not torch.equal(one[0].weight, make()[0].weight)
    for k, run in enumerate(runs):
        assert run["loss"] == pytest.approx([m[k] for m in stack["member_loss"]], rel=1e-5)
    assert not torch.allclose(nets[0][0].weight, nets[1][0].weight)


def test_stacked_members_are_written_back_for_callbacks_and_read_after_them():
    """K=2: callbacks (the method's, then the user's, each ``fn(owner, epoch, history)``) see
    the members as trained so far; what a callback puts in a member is what the stack goes on
    from; the validation row has each member's eval-mode loss and their mean; a ``True``
    from the user's callback stops the run."""
    torch.manual_seed(0)
    nets = [nn.Linear(2, 1) for _ in range(2)]
    owner = nn.ModuleList(nets)
    x, y = torch.randn(12, 2), torch.randn(12, 1)
    xv, yv = torch.randn(5, 2), torch.randn(5, 1)
    order, weights = [], []

    def zero_member_2(m, epoch, history):
        order.append(("method", m is owner, epoch))
        weights.append(nets[0].weight.detach().clone())
        with torch.no_grad():
            nets[1].weight.zero_()

    def user(m, epoch, history):
        order.append(("user", m is owner, epoch))
        return epoch == 1

    settings = _settings(epochs=5, lr=1e-9, callbacks=[user])  # a tiny lr: the zeros stay
    mse = lambda out, yb: ((out - yb) ** 2).mean((1, 2))  # noqa: E731
    h = train_stacked(nets, mse, (x, y), settings, [0, 1], owner=owner, name="k", desc="k",
                      validation=(xv.expand(2, 5, 2), yv.expand(2, 5, 1)),
                      callbacks=[zero_member_2])  # fmt: skip
    assert order == [("method", True, 0), ("user", True, 0), ("method", True, 1),
                     ("user", True, 1)]  # fmt: skip
    # zeroed after each epoch and read back into the stack: one more epoch moves it by ~lr only
    assert nets[1].weight.abs().max() < 1e-7
    assert weights[1].abs().min() > 1e-3  # the other member was not touched
    with torch.no_grad():
        own = [float(((net(xv) - yv) ** 2).mean()) for net in nets]
    assert h["member_val_loss"][-1] == pytest.approx(own, rel=1e-6)
    assert h["val_loss"][-1] == pytest.approx(sum(own) / 2, rel=1e-6)
    assert len(h["loss"]) == 2


def test_train_nets_takes_any_module_and_compiles_only_when_asked(monkeypatch):
    """``train_nets`` minimises the loss it is given over the batches it is given; the loss
    goes through ``compile_loss`` exactly when ``settings.compile``."""
    from bnn_pyro.methods.classic import engine

    compiled = []
    monkeypatch.setattr(engine, "compile_loss", lambda f: compiled.append(f) or f)
    torch.manual_seed(0)
    net = nn.Linear(2, 1)
    x = torch.randn(16, 2)
    y = x @ torch.tensor([[1.0], [-2.0]])
    for compile in (False, True):
        settings = _settings(epochs=30, compile=compile)
        h = train_nets(net, net.parameters(), _mse(net), permuted_batches(x, y, 8), settings,
                       owner=net, name="n", desc="n")  # fmt: skip
        assert h["loss"][-1] < 0.1 * h["loss"][0] or compile
    assert len(compiled) == 1


def _dropout_nets(count):
    torch.manual_seed(3)
    return [
        nn.Sequential(nn.Linear(2, 16), nn.Dropout(0.5), nn.Tanh(), nn.Linear(16, 1))
        for _ in range(count)
    ]


def _weights(nets):
    return torch.cat([p.detach().reshape(-1) for net in nets for p in net.parameters()])


def test_nets_handed_in_eval_mode_train_with_their_dropout_and_get_their_mode_back():
    """A fit trains in train mode whatever mode the nets come in (dropout on, as the method's
    own fit): nets handed over in eval mode end where nets in train mode end, not where a run
    without dropout ends, and are handed back in eval mode. One net and two stacked."""
    x, y = torch.randn(24, 2), torch.randn(24, 1)
    settings = _settings(epochs=3, batch_size=8)
    mse = lambda out, yb: ((out - yb) ** 2).mean((1, 2))  # noqa: E731
    ends = {}
    for mode in ("train", "eval", "no dropout"):
        one, pair = _dropout_nets(1)[0], _dropout_nets(2)
        for net in (one, *pair):
            net.train(mode == "train")
            if mode == "no dropout":
                net[1].p = 0.0
        train_epochs(one.parameters(), _mse(one), (x, y), settings, module=one,
                     owner=one, name="one", seed=1)  # fmt: skip
        train_stacked(pair, mse, (x, y), settings, [1, 2], owner=pair[0], name="k", desc="k")
        ends[mode] = (_weights([one]), _weights(pair))
        assert all(m.training == (mode == "train") for net in (one, *pair) for m in net.modules())
    for i in (0, 1):
        torch.testing.assert_close(ends["eval"][i], ends["train"][i], rtol=0, atol=0)
        assert not torch.allclose(ends["eval"][i], ends["no dropout"][i], atol=1e-4)


def test_scoring_validation_data_leaves_the_training_run_as_it_was():
    """The validation score runs in eval mode, between epochs: the epochs after it train as
    before (dropout back on), so a run with validation data ends where one without ends."""
    x, y = torch.randn(24, 2), torch.randn(24, 1)
    settings = _settings(epochs=3, batch_size=8)
    mse = lambda out, yb: ((out - yb) ** 2).mean((1, 2))  # noqa: E731
    ends = []
    for validation in (None, (x[:6], y[:6])):
        one, pair = _dropout_nets(1)[0], _dropout_nets(2)
        h = train_epochs(one.parameters(), _mse(one), (x, y), settings, module=one,
                         owner=one, name="one", seed=1, validation=validation)  # fmt: skip
        stacked_val = (
            None if validation is None else tuple(t.expand(2, *t.shape) for t in validation)
        )
        hk = train_stacked(pair, mse, (x, y), settings, [1, 2], owner=pair[0], name="k",
                           desc="k", validation=stacked_val)  # fmt: skip
        assert ("val_loss" in h and "member_val_loss" in hk) == (validation is not None)
        ends.append((_weights([one]), _weights(pair)))
    for before, after in zip(*ends, strict=True):
        assert torch.equal(before, after)
