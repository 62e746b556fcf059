"""Every method's ``fit`` and ``predict`` reject bad input before doing any work."""

import pytest
import torch

from bnn_pyro.methods import SWAG, DeepEnsemble, LaplaceApproximation, MCDropout, VariationalBayesNN
from tests.methods.methods_helpers import relu_mlp, trained

FACTORIES = {
    "mc_dropout": lambda lik: MCDropout(
        relu_mlp(2, 3 if lik == "classification" else 1, 4, 0.1), 3, likelihood=lik
    ),
    "ensemble": lambda lik: DeepEnsemble(
        lambda: relu_mlp(2, 3 if lik == "classification" else 1, 4), 2, likelihood=lik
    ),
    "swag": lambda lik: SWAG(relu_mlp(2, 3 if lik == "classification" else 1, 4), likelihood=lik),
    "laplace": lambda lik: LaplaceApproximation(
        relu_mlp(2, 3 if lik == "classification" else 1, 4), lik
    ),
    "variational": lambda lik: VariationalBayesNN(
        2, [4], 3 if lik == "classification" else 1, likelihood=lik
    ),
}

_G = torch.Generator().manual_seed(0)
X = torch.randn(12, 2, generator=_G)
Y_CLS = torch.arange(12) % 3  # every class present: Y_CLS - 1 has a -1, Y_CLS + 3 a 5
Y_REG = torch.randn(12, 1, generator=_G)
NAN_X = X.clone()
NAN_X[3, 1] = float("nan")
INF_Y = Y_REG.clone()
INF_Y[0] = float("inf")

CASES = [
    # (likelihood, x, y, fit kwargs, exception, message fragment)
    ("classification", X.numpy(), Y_CLS, {}, TypeError, "x must be a torch.Tensor"),
    ("classification", X.long(), Y_CLS, {}, TypeError, "floating dtype"),
    ("classification", X[:, 0], Y_CLS, {}, ValueError, r"x must have shape \(N, D"),
    ("classification", NAN_X, Y_CLS, {}, ValueError, "x must be finite"),
    ("classification", X, Y_CLS[:10], {}, ValueError, "y must have 12 rows"),
    ("classification", X, Y_CLS + 0.5, {}, ValueError, "integer class labels"),
    ("classification", X, Y_CLS.bool(), {}, TypeError, "integer class labels"),
    ("classification", X, Y_CLS - 1, {}, ValueError, r"in \[0, 2\] .* got labels in \[-1, 1\]"),
    ("classification", X, Y_CLS + 3, {}, ValueError, r"in \[0, 2\] .* got labels in \[3, 5\]"),
    ("regression", X, INF_Y, {}, ValueError, "y must be finite"),
    ("regression", X, torch.randn(12, 2), {}, ValueError, r"shape \(N,\) or \(N, 1\) for a Gaus"),
    ("regression", X, torch.randn(12, 1, 1), {}, ValueError, r"shape \(N,\) or \(N, 1\)"),
    ("regression", X, Y_REG, dict(epochs=-1), ValueError, "epochs"),
    ("regression", X, Y_REG, dict(batch_size=0), ValueError, "batch_size"),
    ("regression", X, Y_REG, dict(batch_size=True), TypeError, "batch_size"),
    ("regression", X, Y_REG, dict(lr=0.0), ValueError, "lr"),
    ("regression", X, Y_REG, dict(weight_decay=-1.0), ValueError, "weight_decay"),
    ("regression", X, Y_REG, dict(optimizer="rmsprop"), ValueError, "optimizer"),
    ("regression", X, Y_REG, dict(progress="no"), TypeError, "progress"),
    ("regression", X, Y_REG, dict(seed=-3), ValueError, "seed"),
]


@pytest.mark.parametrize("name", list(FACTORIES))
@pytest.mark.parametrize("likelihood, x, y, kwargs, exc, match", CASES)
def test_fit_rejects_bad_input_before_any_work(name, likelihood, x, y, kwargs, exc, match):
    torch.manual_seed(0)
    method = FACTORIES[name](likelihood)
    before = {k: v.clone() for k, v in method.state_dict().items() if torch.is_tensor(v)}
    with pytest.raises(exc, match=match):
        method.fit(x, y, progress=False, **{"epochs": 1, **kwargs})
    after = method.state_dict()
    for k, v in before.items():
        assert torch.equal(after[k], v), k
    assert method.noise_scale is None


@pytest.mark.parametrize("name", list(FACTORIES))
def test_targets_the_likelihood_accepts_fit_as_their_cast(name):
    """Integer regression targets and integral float labels are what the likelihood's own
    check casts them to (as the Pyro model's path does): the same fit, to the bit."""
    for likelihood, y, cast in (
        ("regression", Y_REG.round().long(), Y_REG.round()),
        ("classification", Y_CLS.float(), Y_CLS),
    ):
        fits = []
        for targets in (y, cast):
            torch.manual_seed(0)
            method = FACTORIES[name](likelihood)
            method.fit(X, targets, epochs=2, progress=False, seed=0)
            fits.append(method.state_dict())
        for key, value in fits[1].items():
            if torch.is_tensor(value):
                assert torch.equal(fits[0][key], value), (likelihood, key)


@pytest.mark.parametrize("name", list(FACTORIES))
def test_predict_rejects_bad_input(name):
    method = FACTORIES[name]("regression")
    if name in ("swag", "laplace"):
        method.fit(X, Y_REG, epochs=1, progress=False)
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        method.predict([[0.0, 0.0]])
    with pytest.raises(ValueError, match="x must be finite"):
        method.predict(NAN_X)


def test_epochs_zero_is_allowed_only_for_laplace():
    trained(
        LaplaceApproximation(relu_mlp(2, 1, 4), "regression"), X, Y_REG, epochs=0, progress=False
    )
    with pytest.raises(ValueError, match="epochs"):
        trained(MCDropout(relu_mlp(2, 1, 4, 0.1), likelihood="regression"), X, Y_REG, epochs=0)


def test_diverging_training_raises_a_clear_error():
    y = Y_REG * 1e30
    method = DeepEnsemble(lambda: relu_mlp(2, 1, 4), 1, likelihood="regression")
    with pytest.raises(FloatingPointError, match="smaller lr"):
        method.fit(X, y, epochs=3, lr=1e3, progress=False)
