"""Reliability: nets the Pyro models cannot hold, bad constructor arguments of the Pyro models,
the torch-native layers and the classic methods, and inputs of the wrong shape. Each is refused
up front, names the argument, and leaves the object as it was (``assert_refused``)."""

from __future__ import annotations

import math
import warnings

import pyro.distributions as dist
import pytest
import torch
import torch.nn as nn
from pyro.nn import PyroModule
from torch.utils.data import DataLoader, TensorDataset

import bnn_pyro as bp
from bnn_pyro.losses import elbo_loss, kl_cost
from bnn_pyro.methods import SWAG, DeepEnsemble, LaplaceApproximation, MCDropout
from bnn_pyro.methods.variational import VariationalBayesNN
from bnn_pyro.nn import BayesianLinear, bayesian_dense, build
from bnn_pyro.priors import IIDPrior, LayerwiseNormalPrior, ScaleMixturePrior
from tests.reliability.refusal import assert_refused

D = 3  # input width of every net here
LIK = bp.Gaussian(scale=0.1)


def _mlp(dropout: float = 0.0) -> nn.Sequential:
    layers = [nn.Linear(D, 8), nn.ReLU()]
    if dropout:
        layers.append(nn.Dropout(dropout))
    return nn.Sequential(*layers, nn.Linear(8, 1))


def _data(n: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, D, generator=g)
    return x, x.sum(-1)


class _LSTMNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(D, 4, batch_first=True)
        self.head = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(x)[0][:, -1])


class _PyroNet(PyroModule):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(D, 1)


# ---------------------------------------------------------------- the Pyro models' constructors
# (call, exception, words the message must hold): one class of mistake per row.
VBNN_CASES = {
    "net not a module": (lambda: bp.VariationalBNN(42, LIK), TypeError, ["net"]),
    "net already Pyro": (lambda: bp.VariationalBNN(_PyroNet(), LIK), TypeError, ["net"]),
    "batch norm": (
        lambda: bp.VariationalBNN(
            nn.Sequential(nn.Linear(D, 4), nn.BatchNorm1d(4), nn.Linear(4, 1)), LIK
        ),
        ValueError,
        ["net.1", "BatchNorm1d", "LayerNorm"],
    ),
    "instance norm with running stats": (
        lambda: bp.VariationalBNN(
            nn.Sequential(nn.Conv1d(D, 4, 1), nn.InstanceNorm1d(4, track_running_stats=True)),
            LIK,
        ),
        ValueError,
        ["net.1", "InstanceNorm1d"],
    ),
    "recurrent layer": (
        lambda: bp.VariationalBNN(_LSTMNet(), LIK),
        ValueError,
        ["net.rnn", "LSTM"],
    ),
    "embedding": (
        lambda: bp.VariationalBNN(
            nn.Sequential(nn.Embedding(10, 4), nn.Flatten(), nn.Linear(8, 1)), LIK
        ),
        ValueError,
        ["net.0", "Embedding"],
    ),
    "likelihood a name": (lambda: bp.VariationalBNN(_mlp(), "gaussian"), TypeError, ["likelihood"]),
    "prior a distribution": (
        lambda: bp.VariationalBNN(_mlp(), LIK, prior=dist.Normal(0.0, 1.0)),
        TypeError,
        ["prior"],
    ),
    "prior selects nothing": (
        lambda: bp.VariationalBNN(_mlp(), LIK, prior=IIDPrior(dist.Normal(0.0, 1.0), include="x*")),
        ValueError,
        ["IIDPrior"],
    ),
    "unknown guide": (lambda: bp.VariationalBNN(_mlp(), LIK, guide="bogus"), ValueError, ["guide"]),
    "init_scale zero": (
        lambda: bp.VariationalBNN(_mlp(), LIK, init_scale=0.0),
        ValueError,
        ["init_scale"],
    ),
    "unknown estimator": (
        lambda: bp.VariationalBNN(_mlp(), LIK, local_reparameterization="fast"),
        ValueError,
        ["local_reparameterization"],
    ),
    "num_samples float": (
        lambda: bp.VariationalBNN(_mlp(), LIK, num_samples=2.5),
        TypeError,
        ["num_samples"],
    ),
}


@pytest.mark.parametrize("case", VBNN_CASES.values(), ids=list(VBNN_CASES))
def test_variational_bnn_constructor_refuses(case):
    call, exc, words = case
    assert_refused(call, exc, *words)


def test_refused_net_is_left_as_it_was():
    net = nn.Sequential(nn.Linear(D, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))
    assert_refused(lambda: bp.VariationalBNN(net, LIK), ValueError, "net.1", obj=net)
    assert not isinstance(net[0], PyroModule)


HIDDEN_CASES = {
    "in_features zero": (lambda: bp.HiddenLayerBNN(0, [4], 1, LIK), ValueError, ["in_features"]),
    "a hidden width negative": (
        lambda: bp.HiddenLayerBNN(D, [4, -1], 1, LIK),
        ValueError,
        ["hidden_sizes[1]"],
    ),
    "hidden_sizes a string": (
        lambda: bp.HiddenLayerBNN(D, "4", 1, LIK),
        TypeError,
        ["hidden_sizes"],
    ),
    "out_features bool": (
        lambda: bp.HiddenLayerBNN(D, [4], True, LIK),
        TypeError,
        ["out_features"],
    ),
    "unknown activation": (
        lambda: bp.HiddenLayerBNN(D, [4], 1, LIK, activation="swish2"),
        ValueError,
        ["activation"],
    ),
    "prior_scale NaN": (
        lambda: bp.HiddenLayerBNN(D, [4], 1, LIK, prior_scale=math.nan),
        ValueError,
        ["prior_scale"],
    ),
}


@pytest.mark.parametrize("case", HIDDEN_CASES.values(), ids=list(HIDDEN_CASES))
def test_hidden_layer_bnn_constructor_refuses(case):
    call, exc, words = case
    assert_refused(call, exc, *words)


# ---------------------------------------------------------------- priors and likelihoods
PRIOR_LIKELIHOOD_CASES = {
    "Gaussian scale negative": (lambda: bp.Gaussian(scale=-1.0), ValueError, ["scale"]),
    "Gaussian scale a word": (lambda: bp.Gaussian(scale="auto"), ValueError, ["scale"]),
    "prior scale zero": (lambda: IIDPrior(dist.Normal(0.0, 0.0)), ValueError, ["scale"]),
    "prior location infinite": (
        lambda: IIDPrior(dist.Normal(math.inf, 1.0)),
        ValueError,
        ["distribution", "loc"],
    ),
    "prior not univariate": (
        lambda: IIDPrior(dist.Normal(torch.zeros(2), 1.0)),
        ValueError,
        ["distribution"],
    ),
    "prior on half the line": (
        lambda: IIDPrior(dist.HalfNormal(1.0)),
        ValueError,
        ["support"],
    ),
    "prior include not a pattern": (
        lambda: IIDPrior(dist.Normal(0.0, 1.0), include=3),
        TypeError,
        ["include"],
    ),
    "layerwise gain zero": (lambda: LayerwiseNormalPrior(gain=0.0), ValueError, ["gain"]),
    "mixture weight one": (lambda: ScaleMixturePrior(mixture_weight=1.0), ValueError, ["mixture"]),
}


@pytest.mark.parametrize("case", PRIOR_LIKELIHOOD_CASES.values(), ids=list(PRIOR_LIKELIHOOD_CASES))
def test_priors_and_likelihoods_refuse(case):
    call, exc, words = case
    assert_refused(call, exc, *words)


# ---------------------------------------------------------------- torch-native layers, functional
LAYER = BayesianLinear(D, 2)
DENSE = bayesian_dense(D, 2)
MLP = build(D, (4,), output_size=2)

NATIVE_CASES = {
    "BayesianLinear in_features zero": (
        lambda: BayesianLinear(0, 2),
        ValueError,
        ["in_features"],
        None,
    ),
    "BayesianLinear prior_std zero": (
        lambda: BayesianLinear(D, 2, prior_std=0.0),
        ValueError,
        ["prior_std"],
        None,
    ),
    "BayesianLinear input too wide": (
        lambda: LAYER(torch.randn(4, D + 1)),
        ValueError,
        ["x"],
        LAYER,
    ),
    "bayesian_dense units zero": (lambda: bayesian_dense(D, 0), ValueError, ["units"], None),
    "bayesian_dense empty name": (lambda: bayesian_dense(D, 2, name=""), TypeError, ["name"], None),
    "bayesian_dense input a list": (lambda: DENSE([[1.0, 2.0, 3.0]]), TypeError, ["x"], DENSE),
    "bayesian_dense S rows mismatch": (
        lambda: DENSE(torch.randn(5, 4, D), num_samples=3),
        ValueError,
        ["x"],
        DENSE,
    ),
    "build output_size zero": (
        lambda: build(D, (4,), output_size=0),
        ValueError,
        ["output_size"],
        None,
    ),
    "build a hidden width zero": (
        lambda: build(D, (4, 0), output_size=1),
        ValueError,
        ["hidden_sizes[1]"],
        None,
    ),
    "kl_cost shapes differ": (
        lambda: kl_cost(torch.zeros(3), torch.zeros(4)),
        ValueError,
        ["rho"],
        None,
    ),
    "kl_cost mu not a tensor": (lambda: kl_cost([0.0], torch.zeros(1)), TypeError, ["mu"], None),
    "elbo_loss kl not scalar": (
        lambda: elbo_loss(MLP(torch.randn(4, D)), torch.zeros(4, 2), torch.zeros(2)),
        ValueError,
        ["kl"],
        MLP,
    ),
    "elbo_loss beta negative": (
        lambda: elbo_loss(torch.zeros(4, 2), torch.zeros(4, 2), MLP.kl_cost(), beta=-1.0),
        ValueError,
        ["beta"],
        MLP,
    ),
}


@pytest.mark.parametrize("case", NATIVE_CASES.values(), ids=list(NATIVE_CASES))
def test_native_layers_and_functional_api_refuse(case):
    call, exc, words, obj = case
    assert_refused(call, exc, *words, obj=obj)


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
