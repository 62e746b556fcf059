"""Reliability, the classic methods' side of nets and shapes: constructor arguments,
``device=``, inputs of the wrong width or with extra dims for every model (the Pyro models too),
integer inputs, dropout rates and batch norm. Each bad call is refused up front, names the
argument, and leaves the object as it was (``assert_refused``)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import bnn_pyro as bp
from bnn_pyro.methods import SWAG, DeepEnsemble, LaplaceApproximation, MCDropout
from bnn_pyro.methods.vi.bayes_nn import VariationalBayesNN
from tests.reliability._nets import LIK, D, _data, _mlp
from tests.reliability.refusal import assert_refused


# ---------------------------------------------------------------- the methods' constructors
def _loader() -> DataLoader:
    x, y = _data()
    return DataLoader(TensorDataset(x, y.unsqueeze(-1)), batch_size=8)


NO_CUDA_INDEX = f"cuda:{max(torch.cuda.device_count(), 0) + 7}"  # never on this machine

METHOD_CTOR_CASES = {
    "ensemble given a net": (
        lambda: DeepEnsemble(_mlp(), 2, likelihood="regression"),
        TypeError,
        ["model_fn", "from_net"],
    ),
    "ensemble factory returns no net": (
        lambda: DeepEnsemble(lambda: 42, 2, likelihood="regression"),
        TypeError,
        ["model_fn"],
    ),
    "ensemble of zero members": (
        lambda: DeepEnsemble(_mlp, 0, likelihood="regression"),
        ValueError,
        ["num_models"],
    ),
    "dropout model not a module": (lambda: MCDropout(_mlp, 4), TypeError, ["model"]),
    "dropout rate one": (lambda: MCDropout(_mlp(0.5), 4, 1.0), ValueError, ["dropout_rate"]),
    "swag model without parameters": (lambda: SWAG(nn.ReLU()), ValueError, ["model"]),
    "laplace unknown hessian": (
        lambda: LaplaceApproximation(_mlp(), "regression", hessian="exact"),
        ValueError,
        ["hessian"],
    ),
    "variational bayes hidden width zero": (
        lambda: VariationalBayesNN(D, [0], 1, likelihood="regression"),
        ValueError,
        ["hidden_sizes[0]"],
    ),
}


@pytest.mark.parametrize("case", METHOD_CTOR_CASES.values(), ids=list(METHOD_CTOR_CASES))
def test_method_constructor_refuses(case):
    call, exc, words = case
    assert_refused(call, exc, *words)


def test_ensemble_from_a_net_still_works():
    net = _mlp()
    ens = DeepEnsemble.from_net(net, "regression", num_models=2)
    made = bp.make("ensemble", net, bp.Gaussian(0.1), num_models=2)
    assert len(ens.models) == len(made.models) == 2
    assert not torch.equal(ens.models[0][0].weight, ens.models[1][0].weight)


# ---------------------------------------------------------------- device=
@pytest.fixture(scope="module")
def laplace() -> LaplaceApproximation:
    return LaplaceApproximation(_mlp(), "regression")


DEVICE_CASES = {
    "fit(x, y, device=cuda:N) not on this machine": (
        lambda m: m.fit(*_data(), epochs=1, progress=False, device=NO_CUDA_INDEX),
        ValueError,
    ),
    "fit(loader, device) with a made-up device name": (
        lambda m: m.fit(_loader(), "gpu"),
        ValueError,
    ),
    "fit(loader, device=) not a device": (lambda m: m.fit(_loader(), device=[0]), TypeError),
}


@pytest.mark.parametrize("case", DEVICE_CASES.values(), ids=list(DEVICE_CASES))
def test_laplace_device_refused_before_any_work(laplace, case):
    call, exc = case
    assert_refused(lambda: call(laplace), exc, "device", obj=laplace)
    assert laplace.mean is None  # no posterior was fitted


def test_cuda_without_cuda_is_named():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    la = LaplaceApproximation(_mlp(), "regression")
    assert_refused(lambda: la.fit(_loader(), device="cuda"), ValueError, "device", obj=la)


def test_ensemble_train_member_device_refused():
    ens = DeepEnsemble(_mlp, 2, likelihood="regression")
    opt = torch.optim.SGD(ens.models[0].parameters(), lr=0.1)
    assert_refused(
        lambda: ens.train_member(0, _loader(), opt, nn.MSELoss(), device=NO_CUDA_INDEX),
        ValueError,
        "device",
        obj=ens,
    )


# ---------------------------------------------------------------- input shapes
def _fitted() -> dict[str, bp.BaseBayesianMethod]:
    torch.manual_seed(0)
    x, y = _data()
    fit = dict(epochs=2, progress=False, seed=0)
    methods = {
        "MCDropout": MCDropout(_mlp(0.2), 4, likelihood="regression"),
        "DeepEnsemble": DeepEnsemble(_mlp, 2, likelihood="regression"),
        "SWAG": SWAG(_mlp(), 4, likelihood="regression"),
        "Laplace": LaplaceApproximation(_mlp(), "regression", num_samples=4),
        "VariationalBayesNN": VariationalBayesNN(D, [8], 1, 4, likelihood="regression"),
        "VariationalBNN": bp.VariationalBNN(_mlp(), LIK, num_samples=4),
        "HiddenLayerBNN": bp.HiddenLayerBNN(D, [8], 1, LIK, num_samples=4),
    }
    for name, method in methods.items():
        method.fit(x, y, swa_start=1, **fit) if name == "SWAG" else method.fit(x, y, **fit)
    return methods


@pytest.fixture(scope="module")
def fitted() -> dict[str, bp.BaseBayesianMethod]:
    return _fitted()


BAD_INPUTS = {
    "one feature too many": torch.randn(5, D + 1),
    "extra trailing dim (N, 3, 3)": torch.randn(5, D, D),
}


@pytest.mark.parametrize("bad", BAD_INPUTS.values(), ids=list(BAD_INPUTS))
@pytest.mark.parametrize(
    "name",
    [
        "MCDropout",
        "DeepEnsemble",
        "SWAG",
        "Laplace",
        "VariationalBayesNN",
        "VariationalBNN",
        "HiddenLayerBNN",
    ],
)
def test_predict_refuses_the_wrong_shape_naming_both(fitted, name, bad):
    method = fitted[name]
    with _no_warning():
        info = assert_refused(lambda: method.predict(bad), ValueError, "x", obj=method)
    assert str(tuple(bad.shape)) in str(info.value) and f"(N, {D})" in str(info.value)


class _no_warning:
    """No warning (vmap's among them) may be raised on the way to the refusal."""

    def __enter__(self) -> None:
        self._ctx = warnings.catch_warnings(record=True)
        self._log = self._ctx.__enter__()
        warnings.simplefilter("always")

    def __exit__(self, *exc: object) -> bool:
        self._ctx.__exit__(*exc)
        assert not self._log, [str(w.message) for w in self._log]
        return False


FIT_SHAPE_CASES = {
    "x too wide": (
        lambda m: m.fit(torch.randn(8, D + 1), torch.randn(8), epochs=1, progress=False),
        "x",
    ),
    "x_val extra dim": (
        lambda m: m.fit(
            *_data(8),
            epochs=1,
            progress=False,
            validation_data=(torch.randn(4, D, 2), torch.randn(4)),
        ),
        "x_val",
    ),
}


@pytest.mark.parametrize("case", FIT_SHAPE_CASES.values(), ids=list(FIT_SHAPE_CASES))
def test_fit_refuses_the_wrong_shape_before_training(case):
    call, name = case
    mc = MCDropout(_mlp(0.2), 4, likelihood="regression")
    assert_refused(lambda: call(mc), ValueError, name, obj=mc)


def test_shape_seen_in_fit_guards_nets_without_a_linear_first():
    class Net(nn.Module):  # no first layer to read the width from
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Linear(D, 8), nn.ReLU(), nn.Dropout(0.2), nn.Linear(8, 1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.body(x)

    mc = MCDropout(Net(), 4, likelihood="regression")
    mc.predict(torch.randn(2, D))  # unknown before fit: torch decides
    mc.fit(*_data(), epochs=1, progress=False)
    assert_refused(lambda: mc.predict(torch.randn(5, D + 1)), ValueError, "x", obj=mc)


# ---------------------------------------------------------------- dropout rates, batch norm
def test_mc_dropout_keeps_the_nets_rates_by_default():
    net = _mlp(0.5)
    mc = MCDropout(net, 4, likelihood="regression")
    assert net[2].p == 0.5 and mc.dropout_rate is None
    MCDropout(net, 4, 0.25, likelihood="regression")  # an explicit rate is set, as documented
    assert net[2].p == 0.25


@pytest.mark.parametrize(
    "make",
    [
        lambda f: MCDropout(f(), 4, likelihood="regression"),
        lambda f: DeepEnsemble(f, 2, likelihood="regression"),
        lambda f: LaplaceApproximation(f(), "regression", num_samples=4),
    ],
    ids=["MCDropout", "DeepEnsemble", "Laplace"],
)
def test_classic_methods_keep_batch_norm(make):
    def factory() -> nn.Module:
        return nn.Sequential(
            nn.Linear(D, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.2), nn.Linear(8, 1)
        )

    method = make(factory)
    x, y = _data()
    method.fit(x, y, epochs=2, progress=False, seed=0)
    net = method.models[0] if isinstance(method, DeepEnsemble) else method.model
    stats = net[1].running_mean.clone()
    mean, var = method.predict(x, seed=0)
    assert mean.shape == (len(x), 1) and torch.isfinite(var).all()
    assert torch.equal(net[1].running_mean, stats)  # predict never updates running stats


# ---------------------------------------------------------------- integer inputs
class _EmbeddingNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.drop = nn.Dropout(0.2)
        self.head = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.drop(self.embed(x).flatten(1)))


def test_integer_inputs_pass_through_to_an_embedding():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 10, (16, 2), generator=g)
    mc = MCDropout(_EmbeddingNet(), 4, likelihood="regression")
    mc.fit(x, x.float().sum(1), epochs=2, progress=False, seed=0)
    mean, _ = mc.predict(x, seed=0)
    assert mean.shape == (16, 1) and torch.isfinite(mean).all()
    assert_refused(lambda: mc.predict(torch.randint(0, 10, (4, 3))), ValueError, "x", obj=mc)


def test_integer_inputs_to_a_net_without_embedding_are_refused():
    mc = MCDropout(_mlp(0.2), 4, likelihood="regression")
    assert_refused(lambda: mc.predict(torch.ones(4, D, dtype=torch.long)), TypeError, "x", obj=mc)
