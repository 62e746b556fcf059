"""DeepEnsemble's edges: its refusals word for word, members whose layers differ (predicted in
the loop, trained one by one), the one-by-one fit's history, ``train_member``, the old
``return_all`` alias, and a save/load round trip."""

from __future__ import annotations

import itertools
import math
import re
import warnings

import pytest
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import bnn_pyro as bp
from bnn_pyro.exceptions import TrainingDivergedError
from bnn_pyro.methods import DeepEnsemble

torch.manual_seed(0)
X = torch.randn(24, 2)
Y = X.sum(-1, keepdim=True)


def _net(activation=nn.Tanh, width=4) -> nn.Module:
    return nn.Sequential(nn.Linear(2, width), activation(), nn.Linear(width, 1))


def _exactly(message: str) -> str:
    return "^" + re.escape(message) + "$"


# ---------------------------------------------------------------------- construction
def test_the_constructor_refusals_word_for_word():
    cases = [
        (
            dict(model_fn=nn.Linear(2, 1)),
            TypeError,
            "model_fn must be a factory that builds one member, got a net (Linear); pass "
            "lambda: MyNet(...), or DeepEnsemble.from_net(net, likelihood, num_models=...) (or "
            "make('ensemble', net)) for re-initialised copies of a net",
        ),
        (dict(model_fn=3), TypeError, "model_fn must be callable, got int"),
        (
            dict(model_fn=lambda: 3),
            TypeError,
            "model_fn must return a torch.nn.Module, got int (member 0)",
        ),
        (dict(model_fn=_net, num_models=0), ValueError, "num_models must be an int >= 1, got 0"),
        (
            dict(model_fn=_net, gaussian_nll=1),
            TypeError,
            "gaussian_nll must be a bool, got int (1)",
        ),
    ]
    for kwargs, exc, message in cases:
        with pytest.raises(exc, match=_exactly(message)):
            DeepEnsemble(**kwargs)


def test_the_defaults_and_a_given_noise_scale():
    ens = DeepEnsemble(_net, likelihood="regression", noise_scale=0.3)
    assert ens.num_models == 5 == len(ens.models) == ens.num_samples
    ens.fit(X, Y, epochs=2, progress=False, seed=0)
    assert float(ens.noise_scale) == 0.3  # the user's, not re-estimated by fit
    copies = DeepEnsemble.from_net(_net(), "regression", num_models=3)
    assert copies.num_models == 3  # the options reach the constructor


def test_forward_runs_one_member_or_averages_them():
    ens = DeepEnsemble(_net, 3)
    torch.testing.assert_close(ens(X, model_idx=1), ens.models[1](X))
    torch.testing.assert_close(ens(X), torch.stack([m(X) for m in ens.models]).mean(0))


# ---------------------------------------------------------------------- members of other layers
def _mixed(num_models: int = 2) -> DeepEnsemble:
    # same parameter names and shapes, other activations: one vmapped forward (the first
    # member's) would run the ReLU member through a tanh
    activations = itertools.cycle([nn.Tanh, nn.ReLU])
    torch.manual_seed(0)
    return DeepEnsemble(lambda: _net(next(activations)), num_models, likelihood="regression")


def test_members_with_other_activations_are_predicted_each_by_its_own_forward():
    ens = _mixed()
    x = torch.linspace(-2, 2, 7).unsqueeze(-1).expand(7, 2)
    expected = torch.stack([m(x) for m in ens.models]).detach()
    with pytest.warns(RuntimeWarning, match=r"\(the members differ in their layers\).*loop"):
        _, _, samples = ens.predict(x, return_samples=True)
    assert torch.equal(samples, expected)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the loop asked for: nothing to warn about
        _, _, looped = ens.predict(x, return_samples=True, vectorize=False)
    assert torch.equal(looped, expected)


def test_members_with_other_activations_train_one_by_one():
    ens, alone = _mixed(), _mixed()
    with pytest.warns(RuntimeWarning, match="loop"):  # the noise estimate predicts
        stacked = ens.fit(X, Y, epochs=3, progress=False, seed=0)
        one_by_one = alone.fit(X, Y, epochs=3, progress=False, seed=0, stacked=False)
    assert stacked["member_loss"] == one_by_one["member_loss"]
    with pytest.raises(
        ValueError,
        match=_exactly(
            "stacked=True: the members cannot train stacked: the members differ in their "
            "layers (an activation, a dropout rate, ...)"
        ),
    ):
        _mixed().fit(X, Y, epochs=1, progress=False, stacked=True)


def test_members_of_the_same_layers_are_predicted_at_once_without_a_warning():
    ens = DeepEnsemble(_net, 3, likelihood="regression")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, _, samples = ens.predict(X, return_samples=True)
    torch.testing.assert_close(samples, torch.stack([m(X) for m in ens.models]).detach())


class Scale(nn.Module):
    """A layer whose repr does not show its size: members of one repr, other shapes."""

    def __init__(self, size: int):
        super().__init__()
        self.w = nn.Parameter(torch.ones(size))

    def forward(self, x):
        return x.sum(-1, keepdim=True) * self.w.sum()


def test_members_that_cannot_be_stacked_are_predicted_in_the_loop_naming_why():
    sizes = iter([1, 2])
    ens = DeepEnsemble(lambda: Scale(next(sizes)), 2)
    with pytest.warns(RuntimeWarning) as caught:
        _, _, samples = ens.predict(X, return_samples=True, normalize_output=False)
    message = str(caught[0].message)
    assert message.startswith("ensemble members cannot be stacked (") and "None" not in message
    assert message.endswith("); predicting in a loop") and len(message) > 70  # torch's reason
    torch.testing.assert_close(samples, torch.stack([X.sum(-1, keepdim=True) * s for s in (1, 2)]))


def test_the_gaussian_of_variance_head_members_with_other_activations_comes_from_the_loop():
    activations = itertools.cycle([nn.Tanh, nn.ReLU])
    make = lambda: nn.Sequential(nn.Linear(2, 4), next(activations)(), nn.Linear(4, 2))  # noqa: E731
    ens = DeepEnsemble(make, 2, likelihood="regression", gaussian_nll=True)
    with pytest.warns(RuntimeWarning, match="differ in their layers"):
        loc, scale = ens.predictive_gaussian(X)
    heads = torch.stack([m(X) for m in ens.models]).detach()
    torch.testing.assert_close(loc, heads[..., :1])
    assert scale.shape == loc.shape and bool((scale > 0).all())


def test_inputs_of_another_width_are_refused_before_the_members_run():
    ens = DeepEnsemble(_net, 2, likelihood="regression")
    message = "x must have 2 feature(s) per row (shape (N, 2)), got shape (5, 3)"
    with pytest.raises(ValueError, match=_exactly(message)):
        ens.predict(torch.randn(5, 3))


# ---------------------------------------------------------------------- the one-by-one fit
def test_a_one_by_one_fit_reports_every_member_and_the_mean_of_those_that_ran():
    stops = iter([2, 4, 4])  # member 0 stopped after 2 epochs, the others run all 4

    class StopAt:
        def __init__(self):
            self.at = next(stops)

        def __call__(self, method, epoch, history):
            return len(history["loss"]) >= self.at

    callbacks = []

    def callback(method, epoch, history):
        if epoch == 0:
            callbacks.append(StopAt())
        return callbacks[-1](method, epoch, history)

    ens = DeepEnsemble(_net, 3, likelihood="regression")
    history = ens.fit(
        X, Y, epochs=4, progress=False, seed=0, stacked=False, callbacks=[callback],
        validation_data=(X[:8], Y[:8]),
    )  # fmt: skip
    assert history["epoch"] == [0, 1, 2, 3]
    assert [len(row) for row in history["member_loss"]] == [3, 3, 2, 2]
    for row, mean in zip(history["member_loss"], history["loss"], strict=True):
        assert math.isclose(mean, sum(row) / len(row), rel_tol=1e-12)
    assert len(history["val_loss"]) == 4 and all(map(math.isfinite, history["val_loss"]))


def test_a_one_member_ensemble_trains_alone():
    ens = DeepEnsemble(_net, 1, likelihood="regression")
    history = ens.fit(X, Y, epochs=2, progress=False, seed=0)
    assert [len(row) for row in history["member_loss"]] == [1, 1]
    assert history["loss"] == [row[0] for row in history["member_loss"]]


def test_the_one_by_one_bar_names_each_member(capsys):
    DeepEnsemble(_net, 2, likelihood="regression").fit(
        X, Y, epochs=1, progress=True, seed=0, stacked=False
    )
    err = capsys.readouterr().err
    assert "DeepEnsemble member 1/2" in err and "DeepEnsemble member 2/2" in err


def test_stacked_must_be_a_bool():
    with pytest.raises(TypeError, match=_exactly("stacked must be a bool, got int (1)")):
        DeepEnsemble(_net, 2, likelihood="regression").fit(X, Y, epochs=1, stacked=1)


# ---------------------------------------------------------------------- predict
def test_predict_checks_its_options_word_for_word():
    ens = DeepEnsemble(_net, 3, likelihood="regression")
    with pytest.raises(
        ValueError,
        match=_exactly(
            "a DeepEnsemble's samples are its 3 members: num_samples must be None or 3, got 4"
        ),
    ):
        ens.predict(X, num_samples=4)
    with pytest.raises(TypeError, match=_exactly("vectorize must be a bool, got int (1)")):
        ens.predict(X, vectorize=1)
    with pytest.warns(
        DeprecationWarning, match=_exactly("return_all is deprecated; use return_samples")
    ):  # noqa: E501
        assert len(ens.predict(X, return_all=True)) == 3


def test_diversity_is_the_variance_averaged_over_outputs():
    ens = DeepEnsemble(lambda: nn.Linear(2, 3), 4)
    _, variance = ens.predict(X)
    torch.testing.assert_close(ens.diversity(X), variance.mean(-1))
    assert ens.diversity(X).shape == (len(X),)


# ---------------------------------------------------------------------- train_member
class TrainFlag(nn.Module):
    """Records whether it ran in training mode."""

    def __init__(self):
        super().__init__()
        self.seen: list[bool] = []

    def forward(self, x):
        self.seen.append(self.training)
        return x


def test_train_member_trains_in_training_mode_for_ten_epochs_by_default(capsys):
    ens = DeepEnsemble(lambda: nn.Sequential(nn.Linear(2, 1), TrainFlag()), 2)
    ens.eval()
    data = DataLoader(TensorDataset(X, Y), batch_size=8)
    optimizer = torch.optim.SGD(ens.models[1].parameters(), lr=0.01)
    losses = ens.train_member(1, data, optimizer, nn.MSELoss(), device="cpu")
    assert len(losses) == 10 and all(map(math.isfinite, losses))
    assert ens.models[1][1].seen == [True] * 30 and ens.models[0][1].seen == []
    assert not ens.models[1].training  # its mode given back
    assert capsys.readouterr().err == ""  # no bar


def test_train_member_refusals_word_for_word():
    ens = DeepEnsemble(_net, 2)
    data = DataLoader(TensorDataset(X, Y), batch_size=8)
    optimizer = torch.optim.SGD(ens.models[0].parameters(), lr=0.01)
    train = lambda **kw: ens.train_member(**{  # noqa: E731
        "model_idx": 0, "train_loader": data, "optimizer": optimizer,
        "criterion": nn.MSELoss(), **kw,
    })  # fmt: skip
    cases = [
        ({"model_idx": -1}, ValueError, "model_idx must be an int >= 0, got -1"),
        ({"model_idx": 2}, ValueError, "model_idx must be < num_models = 2, got 2"),
        ({"num_epochs": 0}, ValueError, "num_epochs must be an int >= 1, got 0"),
        (
            {"device": 3.5},
            TypeError,
            "device must be a str, int or torch.device such as 'cpu' or 'cuda', got float (3.5)",
        ),
    ]
    for kwargs, exc, message in cases:
        with pytest.raises(exc, match=_exactly(message)):
            train(**kwargs)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="^device"):  # a device this machine lacks
            train(device="cuda")
    with pytest.raises(TrainingDivergedError, match="^train_member: the loss is nan"):
        train(criterion=lambda out, y: (out * math.nan).mean())


# ---------------------------------------------------------------------- checkpoints
def test_a_saved_ensemble_loads_with_its_options(tmp_path):
    ens = DeepEnsemble(_net, 3, likelihood="regression")
    ens.fit(X, Y, epochs=2, progress=False, seed=0)
    ens.save(tmp_path / "e.pt")
    loaded = bp.load(tmp_path / "e.pt", _net())
    assert (loaded.num_models, loaded.gaussian_nll) == (3, False)
    assert repr(loaded.likelihood) == repr(ens.likelihood)
    assert float(loaded.noise_scale) == float(ens.noise_scale)  # the fitted noise
    assert torch.equal(loaded.predict(X)[0], ens.predict(X)[0])
    with pytest.raises(
        ValueError, match=_exactly("loading a DeepEnsemble needs net=: one member's architecture")
    ):
        DeepEnsemble.from_checkpoint_config(None, ens.checkpoint_config())
