"""``same_layers``: which nets may share one forward when they run as one (stacked training, a
vmapped ensemble), read without touching a Pyro net's prior."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import bnn_pyro as bp
from bnn_pyro.training.stacked import same_layers, stackable


def _net(activation=nn.Tanh, width=4) -> nn.Module:
    return nn.Sequential(nn.Linear(2, width), activation(), nn.Linear(width, 1))


def test_same_layers_tells_activations_and_settings_apart():
    assert same_layers([_net(), _net()])
    assert not same_layers([_net(nn.Tanh), _net(nn.ReLU)])
    assert not same_layers([_net(nn.Tanh), nn.Sequential(nn.Linear(2, 4), nn.Tanh())])
    assert not same_layers([nn.LeakyReLU(0.1), nn.LeakyReLU(0.2)])
    assert same_layers([_net(width=4), _net(width=8)])  # shapes: compared where they stack
    reason = stackable([_net(nn.Tanh), _net(nn.ReLU)])
    assert reason == "the members differ in their layers (an activation, a dropout rate, ...)"


def test_same_layers_draws_nothing_from_a_pyro_nets_prior():
    # reading a Pyro net's layer settings (a Linear's extra_repr reads its bias) would draw
    # the weights from the prior, and so move the global random stream
    tanh = bp.VariationalBNN(bp.nn.mlp(2, [4], 1, activation="tanh"), bp.Gaussian(0.1))
    relu = bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1))
    state = torch.get_rng_state()
    assert same_layers([tanh.net, tanh.net]) and not same_layers([tanh.net, relu.net])
    assert torch.equal(torch.get_rng_state(), state)


def test_parametrized_layers_and_layers_with_buffers_compare_by_type_and_shape():
    # torch makes a new class per parametrized layer (ParametrizedLinear), and a spectral norm
    # keeps its power-iteration vectors as buffers whose values differ between members
    spectral = torch.nn.utils.parametrizations.spectral_norm
    a, b = spectral(nn.Linear(2, 3)), spectral(nn.Linear(2, 3))
    assert type(a) is not type(b) and same_layers([a, b])
    assert not same_layers([a, nn.Linear(2, 3)])
    norm_a, norm_b = nn.BatchNorm1d(3), nn.BatchNorm1d(3)
    norm_b.running_mean += 1.0  # shown by no repr, but a tensor: compared where it stacks
    assert same_layers([norm_a, norm_b])


def test_same_layers_refuses_what_is_not_one_net_or_more():
    with pytest.raises(ValueError, match="^nets must hold at least one net, got none$"):
        same_layers([])
    with pytest.raises(TypeError, match=r"^nets\[1\] must be a torch.nn.Module, got str$"):
        same_layers([_net(), "relu"])
