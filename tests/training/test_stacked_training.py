"""K models trained as one stacked model give the numbers of training them one by one."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import bnn_pyro as bp
from bnn_pyro.training.stacked import StackedModels, elementwise_optimizer, stackable
from bnn_pyro.training.stacked_batches import shuffled_member_batches, stacked_batches


def _data(task: str, n: int = 96):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(n, 5, generator=g)
    y = X[:, :2].sum(-1, keepdim=True) + 0.1 * torch.randn(n, 1, generator=g)
    if task == "classification":
        return X, (y[:, 0] > 0).long() + (y[:, 0] > 1).long()
    return X, y


def _net(out: int = 1, dropout: float = 0.0) -> nn.Module:
    if dropout:
        return nn.Sequential(
            nn.Dropout(dropout), nn.Linear(5, 8), nn.ReLU(), nn.Dropout(dropout), nn.Linear(8, out)
        )
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, out))


def test_stacked_forward_is_each_members_forward():
    torch.manual_seed(0)
    nets = [_net(3) for _ in range(4)]
    stacked = StackedModels(nets, torch.randn(6, 5))
    x = torch.randn(4, 7, 5)
    expected = torch.stack([net(x[k]) for k, net in enumerate(nets)])
    assert torch.allclose(stacked(x), expected, atol=1e-6)


def test_write_back_gives_each_member_its_slice():
    nets = [_net() for _ in range(3)]
    stacked = StackedModels(nets, torch.randn(6, 5))
    with torch.no_grad():
        for p in stacked.parameters():
            p.mul_(2.0)
    before = [[p.clone() for p in net.parameters()] for net in nets]
    stacked.write_back(nets)
    for net, old in zip(nets, before, strict=True):
        for p, q in zip(net.parameters(), old, strict=True):
            assert torch.equal(p, 2.0 * q)


@pytest.mark.parametrize(
    ("nets", "reason"),
    [
        ([nn.Linear(2, 1)], "fewer than two"),
        ([nn.Linear(2, 1), nn.Linear(3, 1)], "differ"),
        ([nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)) for _ in range(2)], "buffers"),
        ([nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.1)) for _ in range(2)], "dropout"),
        (
            [nn.Linear(2, 1), nn.Linear(2, 1)],
            "hooks",
        ),
    ],
)
def test_what_cannot_be_stacked_is_named(nets, reason):
    if reason == "hooks":
        nets[1].register_forward_pre_hook(lambda module, inputs: None)
    assert reason in stackable(nets)
    with pytest.raises(ValueError, match=reason):
        StackedModels(nets, torch.randn(4, 2))


def test_optimizers_are_stacked_only_when_elementwise():
    assert elementwise_optimizer(None) and elementwise_optimizer(torch.optim.AdamW)
    assert not elementwise_optimizer(torch.optim.LBFGS)
    assert not elementwise_optimizer(lambda params: torch.optim.Adam(params))


def test_each_member_gets_the_order_of_its_own_seeded_run():
    x = torch.arange(10.0).unsqueeze(-1)
    gens = [torch.Generator().manual_seed(s) for s in (3, 4)]
    blocks = list(stacked_batches(x, x, 4, gens)())
    for k, seed in enumerate((3, 4)):
        torch.manual_seed(seed)  # what permuted_batches draws in member k's seeded run
        order = torch.randperm(10)
        got = torch.cat([xb[k, :, 0] for xb, _ in blocks]).long()
        assert torch.equal(got, order)


CASES = {
    "regression, adam": dict(likelihood="regression"),
    "classification, adam": dict(likelihood="classification", out=3),
    "gaussian nll": dict(likelihood="regression", gaussian_nll=True, out=2),
    "dropout members": dict(likelihood="regression", dropout=0.2),
    "sgd, weight decay, cosine": dict(
        likelihood="regression", fit=dict(optimizer="sgd", weight_decay=1e-2, lr_schedule="cosine")
    ),
}


def _ensemble_fit(case: str, stacked: bool, epochs: int = 3):
    spec = dict(CASES[case])
    out, fit, p = spec.pop("out", 1), spec.pop("fit", {}), spec.pop("dropout", 0.0)
    X, y = _data(spec["likelihood"])
    torch.manual_seed(0)
    ens = bp.DeepEnsemble(lambda: _net(out, p), num_models=3, **spec)
    history = ens.fit(
        X, y, epochs=epochs, batch_size=20, progress=False, seed=7, stacked=stacked, **fit
    )
    return ens, history


@pytest.mark.parametrize("case", sorted(CASES))
def test_stacked_ensemble_fit_equals_members_trained_one_by_one(case):
    alone, alone_history = _ensemble_fit(case, stacked=False)
    together, together_history = _ensemble_fit(case, stacked=True)
    # 15 steps of the same arithmetic, batched differently: float32 rounding only
    for a, b in zip(alone.parameters(), together.parameters(), strict=True):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
    for a, b in zip(alone_history["member_loss"], together_history["member_loss"], strict=True):
        assert a == pytest.approx(b, rel=1e-5)
    assert alone_history["loss"] == pytest.approx(together_history["loss"], rel=1e-5)
    if alone.likelihood.homoscedastic:
        assert alone.noise_scale == pytest.approx(together.noise_scale, rel=1e-5)


def test_the_members_keep_their_own_weights():
    X, y = _data("regression")
    torch.manual_seed(0)
    ens = bp.DeepEnsemble(lambda: _net(), num_models=3, likelihood="regression")
    history = ens.fit(X, y, epochs=2, batch_size=20, progress=False, seed=0)
    assert len(history["member_loss"][0]) == 3
    w = [m[0].weight for m in ens.models]
    assert not torch.equal(w[0], w[1])  # own initial weights and own minibatch orders


def test_stacked_true_names_why_it_cannot():
    X, y = _data("regression")
    ens = bp.DeepEnsemble(lambda: _net(), num_models=2, likelihood="regression")
    with pytest.raises(ValueError, match="not elementwise"):
        ens.fit(X, y, epochs=1, progress=False, stacked=True, optimizer=torch.optim.LBFGS)
    dropout = bp.DeepEnsemble(
        lambda: nn.Sequential(nn.Linear(5, 4), nn.AlphaDropout(0.2), nn.Linear(4, 1)),
        num_models=2,
        likelihood="regression",
    )
    with pytest.raises(ValueError, match="dropout"):
        dropout.fit(X, y, epochs=1, progress=False, stacked=True)
    dropout.fit(X, y, epochs=1, progress=False)  # the default falls back to one by one
    with pytest.raises(TypeError, match="stacked must be a bool"):
        ens.fit(X, y, epochs=1, progress=False, stacked="yes")


def test_a_diverging_member_is_named():
    X, y = _data("regression")
    torch.manual_seed(0)
    ens = bp.DeepEnsemble(lambda: _net(), num_models=3, likelihood="regression")
    with torch.no_grad():
        ens.models[1][0].weight.fill_(float("nan"))
    with pytest.raises(bp.TrainingDivergedError, match=r"member\(s\) \[2\] of 3"):
        ens.fit(X, y, epochs=2, progress=False, seed=0, stacked=True)


def test_callbacks_and_validation_see_the_members_as_trained_so_far():
    X, y = _data("regression")
    val = (X[:30], y[:30])
    runs = {}
    for stacked in (False, True):
        torch.manual_seed(0)
        ens = bp.DeepEnsemble(lambda: _net(), num_models=3, likelihood="regression")
        seen = []

        def callback(method, epoch, history, seen=seen, ens=ens):
            assert method is ens
            seen.append(float(method.models[2][0].weight.detach().sum()))

        history = ens.fit(
            X, y, epochs=3, batch_size=20, progress=False, seed=1, stacked=stacked,
            callbacks=[callback], validation_data=val,
        )  # fmt: skip
        runs[stacked] = (history, seen)
    (alone, seen_alone), (together, seen_together) = runs[False], runs[True]
    # one by one, the callback runs 3 times per member; stacked, once per epoch for all: the
    # last member's weights at each of its epochs are what the stacked run shows at that epoch
    assert seen_together == pytest.approx(seen_alone[-3:], rel=1e-5)
    assert together["val_loss"] == pytest.approx(alone["val_loss"], rel=1e-5)
    assert len(together["member_val_loss"][0]) == 3


def _classic(kind: str, task: str = "regression"):
    if kind == "dropout":
        return bp.MCDropout(_net(1, 0.2), num_samples=20, likelihood=task)
    if kind == "swag":
        return bp.SWAG(_net(1 if task == "regression" else 3), max_num_models=3, likelihood=task)
    return bp.LaplaceApproximation(_net(1), task, hessian="ggn", hessian_structure="full")


def _posterior_state(model) -> list[torch.Tensor]:
    """What a fit leaves besides the net: SWAG's moments, Laplace's mean and precision."""
    if isinstance(model, bp.SWAG):
        return [model.swag_mean, model.swag_m2, model.deviations]
    if isinstance(model, bp.LaplaceApproximation):
        return [model._mean, model.posterior_precision]
    return []


@pytest.mark.parametrize("kind", ["dropout", "swag", "laplace"])
@pytest.mark.parametrize("per_member", [False, True], ids=["shared data", "own data"])
def test_classic_fits_stacked_equal_their_own_fits(kind, per_member):
    X, y = _data("regression")
    if per_member:  # three different "splits" of equal size
        X = torch.stack([X, X.flip(0), X.roll(7, 0)])
        y = torch.stack([y, y.flip(0), y.roll(7, 0)])

    def models():
        out = []
        for k in range(3):
            torch.manual_seed(10 + k)
            out.append(_classic(kind))
        return out

    # SWAG: 6 epochs, snapshots from epoch 3 on (3 of them, the low-rank part has k = 3)
    fit = dict(epochs=6 if kind == "swag" else 3, batch_size=20, lr=1e-2, weight_decay=1e-3)
    alone = models()
    for k, m in enumerate(alone):
        m.fit(X[k] if per_member else X, y[k] if per_member else y, seed=k, progress=False, **fit)
    together = models()
    history = bp.fit_stacked(together, X, y, seeds=[0, 1, 2], progress=False, **fit)
    assert len(history["member_loss"][-1]) == 3
    # 15-30 steps, each member's masks and order from its own stream: float32 round-off only
    for a, b in zip(alone, together, strict=True):
        for p, q in zip(a.parameters(), b.parameters(), strict=True):
            assert torch.allclose(p, q, rtol=1e-5, atol=1e-6)
        for p, q in zip(_posterior_state(a), _posterior_state(b), strict=True):
            # float32 round-off of the weights carried through the curvature: relative to the
            # largest entry (small entries of a GGN are sums of cancelling terms)
            assert torch.allclose(p, q, rtol=0.0, atol=1e-5 * float(p.abs().max()))
        assert a.noise_scale == pytest.approx(b.noise_scale, rel=1e-5)
        x_new = X[0, :4] if per_member else X[:4]
        assert torch.allclose(a.predict(x_new, seed=3)[0], b.predict(x_new, seed=3)[0], atol=1e-6)


def test_swag_stacked_collects_one_snapshot_per_epoch_of_the_second_half():
    X, y = _data("classification")
    models = [_classic("swag", "classification") for _ in range(2)]
    bp.fit_stacked(models, X, y, seeds=[0, 1], epochs=5, progress=False)
    # epochs 2, 3, 4 are collected; the members moved apart, so their means differ
    assert [m.n_models for m in models] == [3, 3]
    assert not torch.allclose(models[0].swag_mean, models[1].swag_mean)


def test_mixed_classic_methods_are_refused():
    X, y = _data("regression")
    with pytest.raises(ValueError, match="of one of MCDropout, SWAG, LaplaceApproximation"):
        bp.fit_stacked([_classic("swag"), _classic("laplace")], X, y, seeds=[0, 1])


def test_member_batches_are_shuffled_unless_told_not_to():
    x = torch.arange(12.0).view(2, 6)
    gens = lambda: [torch.Generator().manual_seed(s) for s in (0, 1)]  # noqa: E731
    first = [xb for xb, _ in shuffled_member_batches(x, x, 3, gens())()]
    assert not torch.equal(torch.cat(first, 1), x)  # the default draws each member's order
    plain = [xb for xb, _ in shuffled_member_batches(x, x, 3, gens(), shuffle=False)()]
    assert torch.equal(torch.cat(plain, 1), x)


def test_a_generator_state_of_the_wrong_size_is_refused_by_name():
    batches = stacked_batches(torch.zeros(4, 1), torch.zeros(4), 2, [torch.Generator()])
    with pytest.raises(ValueError, match=r"^a state of 3 bytes for generators of \[\d+\]$"):
        batches.generator.set_state(torch.zeros(3, dtype=torch.uint8))


def test_nets_whose_buffers_stack_train_each_with_its_own():
    """A spectral bound's vectors (``stacks_buffers``) are stacked per member, not refused: the
    stacked pass is each member's own, in training mode too (its power iteration), and
    ``write_back`` hands each member its own vectors."""
    from torch.nn.utils import parametrize

    from bnn_pyro.methods.sngp import SpectralBound

    nets = []
    for k in range(3):
        torch.manual_seed(k)
        net = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 1))
        bound = SpectralBound(net[0].weight, 0.5)
        parametrize.register_parametrization(net[0], "weight", bound)
        nets.append(net)
    assert stackable(nets) is None
    stacked = StackedModels(nets, torch.randn(4, 2))
    x = torch.randn(3, 5, 2)
    stacked.train(True)
    got = stacked(x)
    expected = torch.stack([net(x[k]) for k, net in enumerate(nets)])  # one iteration each too
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    own_u = [net[0].parametrizations.weight[0]._u.clone() for net in nets]
    with torch.no_grad():
        for net in nets:
            net[0].parametrizations.weight[0]._u.zero_()
    stacked.write_back(nets)
    for net, u in zip(nets, own_u, strict=True):
        torch.testing.assert_close(net[0].parametrizations.weight[0]._u, u, rtol=1e-5, atol=1e-6)
