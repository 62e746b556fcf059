"""``fit_classic_stacked`` (``bp.fit_stacked`` of MC dropout, SWAG and Laplace), value by value:
one model is its own ``fit`` with every argument handed on (and the same defaults), each
refusal says what is wrong, and the bar follows ``progress``."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import bnn_pyro as bp
from bnn_pyro.methods.classic.stacked import fit_classic_stacked

G = torch.Generator().manual_seed(0)
X = torch.randn(20, 2, generator=G)
Y = X.sum(-1, keepdim=True) + 0.1 * torch.randn(20, 1, generator=G)


def _swag() -> bp.SWAG:
    torch.manual_seed(0)
    return bp.SWAG(
        nn.Sequential(nn.Linear(2, 6), nn.Tanh(), nn.Linear(6, 1)), likelihood="regression"
    )


def _weights(m: bp.SWAG) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in m.model.parameters()])


# every argument away from its default, so that one dropped on the way changes the weights
OPTIONS = {
    "epochs": 6,
    "batch_size": 7,
    "lr": 0.03,
    "weight_decay": 0.1,
    "optimizer": "adam",
    "lr_schedule": "cosine",
}


@pytest.mark.parametrize("per_member", [False, True])
def test_one_model_is_its_own_fit_with_every_argument(per_member):
    one = _swag()
    own = copy.deepcopy(one)
    x, y = (X[None], Y[None]) if per_member else (X, Y)
    fit_classic_stacked([one], x, y, seeds=[7], progress=False, **OPTIONS)
    own.fit(X, Y, seed=7, progress=False, **OPTIONS)
    assert torch.equal(_weights(one), _weights(own))
    assert one.n_models == own.n_models
    # and each argument matters here: a run that drops any of them ends elsewhere
    for name in OPTIONS:
        other = copy.deepcopy(own)
        other.load_state_dict(_swag().state_dict())
        other.fit(X, Y, seed=7, progress=False, **{k: v for k, v in OPTIONS.items() if k != name})
        assert not torch.equal(_weights(other), _weights(own)), name
    seeded = _swag()
    seeded.fit(X, Y, seed=8, progress=False, **OPTIONS)
    assert not torch.equal(_weights(seeded), _weights(own))


def test_one_model_takes_the_fits_defaults():
    """Without options the call is ``fit(epochs=100, batch_size=32, weight_decay=0.0)`` with the
    class's own optimizer and learning rate."""
    one, own = _swag(), _swag()
    fit_classic_stacked([one], X, Y, seeds=[3], progress=False)
    own.fit(X, Y, epochs=100, batch_size=32, weight_decay=0.0, seed=3, progress=False)
    assert torch.equal(_weights(one), _weights(own))


def test_progress_shows_the_bar_and_only_when_asked(capsys):
    fit_classic_stacked([_swag(), _swag()], X, Y, seeds=[0, 1], epochs=2, progress=False)
    assert capsys.readouterr().err == ""
    fit_classic_stacked([_swag(), _swag()], X, Y, seeds=[0, 1], epochs=2)  # the default: a bar
    assert "SWAG, 2 models stacked" in capsys.readouterr().err
    fit_classic_stacked([_swag()], X, Y, seeds=[0], epochs=2)
    assert capsys.readouterr().err != ""


@pytest.mark.parametrize(
    "models, kwargs, message",
    [
        (
            lambda: [_swag(), bp.MCDropout(nn.Sequential(nn.Linear(2, 1), nn.Dropout(0.1)))],
            {},
            "^fit_stacked trains models of one of MCDropout, SWAG, LaplaceApproximation, VBLL, "
            r"SNGP \(the class itself\) here$",
        ),
        (
            lambda: [_swag(), bp.SWAG(nn.Sequential(nn.Linear(2, 2)), likelihood="classification")],
            {},
            "^the models must share one likelihood$",
        ),
        (
            lambda: [_swag(), _swag()],
            {"seeds": [0]},
            r"^seeds must give one seed per model \(2\), got 1$",
        ),
        (
            lambda: [_swag(), _swag()],
            {"optimizer": "lbfgs"},
            "^fit_stacked needs an elementwise optimizer, got 'lbfgs'$",
        ),
        (
            lambda: [
                _swag(),
                bp.SWAG(nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1)), likelihood="regression"),
            ],
            {},
            "^these models cannot be trained stacked: ",
        ),
    ],
    ids=["classes", "likelihoods", "seeds", "optimizer", "architectures"],
)
def test_each_refusal_says_what_is_wrong(models, kwargs, message):
    with pytest.raises(ValueError, match=message):
        fit_classic_stacked(models(), X, Y, **{"seeds": [0, 1], "epochs": 1, **kwargs})
