"""Reliability: nets the Pyro models cannot hold, bad constructor arguments of the Pyro models,
the torch-native layers and the classic methods, and inputs of the wrong shape. Each is refused
up front, names the argument, and leaves the object as it was (``assert_refused``)."""

from __future__ import annotations

import math

import pyro.distributions as dist
import pytest
import torch
import torch.nn as nn
from pyro.nn import PyroModule

import bnn_pyro as bp
from bnn_pyro.losses import elbo_loss, kl_cost
from bnn_pyro.nn import BayesianLinear, bayesian_dense, build
from bnn_pyro.priors import IIDPrior, LayerwiseNormalPrior, ScaleMixturePrior
from tests.reliability._nets import LIK, D, _mlp
from tests.reliability.refusal import assert_refused


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
