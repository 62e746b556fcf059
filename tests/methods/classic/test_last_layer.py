"""``LastLayerReader`` and ``same_values`` on their own: what VBLL, SNGP and DKL read from a net
(the input of its last ``nn.Linear``), the refusal of a net that computes after that layer, the
hook that never outlives a call, and the optimizer's body/head groups."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from bnn_pyro.methods.classic.last_layer import LastLayerReader, same_values
from bnn_pyro.methods.classic.params import last_linear


class Reader(LastLayerReader):
    """The mixin on a bare object: a net and the name of its last linear layer."""

    def __init__(self, net: nn.Module) -> None:
        self.model = net
        self._last_name = last_linear(net, "Reader")[0]


class Twice(nn.Module):
    """A net that applies its head twice (shared weights): the reader keeps the last call."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(3, 3)
        self.head = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.head(self.body(x))))


def _net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(2, 5), nn.Tanh(), nn.Linear(5, 3))


def test_read_returns_the_features_the_last_layer_read_and_its_output():
    net = _net()
    x = torch.randn(7, 2)
    phi, last_out, out = Reader(net)._read(x)
    features = torch.tanh(net[0](x))
    assert phi.shape == (7, 5) and torch.equal(phi, features)
    assert torch.equal(last_out, net[2](features)) and torch.equal(out, last_out)


def test_the_last_call_of_a_layer_used_twice_is_the_one_read():
    net = Twice()
    x = torch.randn(4, 3)
    phi, last_out, _ = Reader(net)._read(x)
    second = torch.tanh(net.head(net.body(x)))  # the head's input on its second call
    assert torch.equal(phi, second) and torch.equal(last_out, net.head(second))


def test_the_hook_is_gone_after_a_read_and_after_a_refusal():
    net = _net()
    reader = Reader(net)
    reader._read(torch.randn(3, 2))
    assert not net[2]._forward_hooks
    after = nn.Sequential(net, nn.Tanh())
    refusing = Reader(after)
    with pytest.raises(ValueError):
        refusing.fit_probe(torch.randn(3, 2))
    assert not after[0][2]._forward_hooks
    with pytest.raises(RuntimeError), reader._on_last(lambda m, i, o: None):
        raise RuntimeError("inside the block")
    assert not net[2]._forward_hooks


def test_a_net_that_computes_after_its_last_linear_is_refused_by_the_probe():
    reader = Reader(nn.Sequential(_net(), nn.Tanh()))  # same shape, other values
    with pytest.raises(ValueError) as refused:
        reader.fit_probe(torch.randn(3, 2))
    message = str(refused.value)
    assert message.startswith("Reader needs a net whose output (N, O) is its last nn.Linear's")
    assert "'0.2' is not the last thing the net computes" in message
    assert message.endswith("end the net with that layer")


def test_a_net_whose_output_is_not_the_last_layer_s_shape_is_refused_by_the_read():
    reader = Reader(nn.Sequential(_net(), nn.Flatten(0)))  # (N, 3) -> (3N,)
    with pytest.raises(ValueError, match="is not the last thing the net computes"):
        reader._read(torch.randn(3, 2))


def test_features_that_are_not_rows_are_refused():
    """A last layer that reads (N, T, H) (a sequence) has no (N, H) features to put a head on."""
    net = nn.Sequential(nn.Linear(2, 5), nn.Linear(5, 1))
    with pytest.raises(ValueError, match="on \\(N, H\\) features"):
        Reader(net)._read(torch.randn(4, 6, 2))


def test_the_probe_returns_the_net_s_output():
    net = _net()
    x = torch.randn(5, 2)
    assert torch.equal(Reader(net).fit_probe(x), net(x))


def test_param_groups_split_the_body_from_the_head_and_leave_the_last_layer_out():
    net = _net()
    reader = Reader(net)
    trained, frozen = nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(2))
    frozen.requires_grad_(False)
    body, head = reader._param_groups([trained, frozen])
    assert [id(p) for p in body["params"]] == [id(net[0].weight), id(net[0].bias)]
    assert "weight_decay" not in body  # fit's own weight decay applies to the body
    assert [id(p) for p in head["params"]] == [id(trained)] and head["weight_decay"] == 0.0


def test_same_values_is_exact_nan_equal_and_shape_aware():
    nan = float("nan")
    a = torch.tensor([1.0, nan], dtype=torch.float64)
    assert same_values(a, a.clone())
    assert not same_values(a, torch.tensor([1.0 + 1e-15, nan], dtype=torch.float64))
    assert not same_values(a, torch.tensor([1.0, 0.0], dtype=torch.float64))
    assert not same_values(torch.zeros(2, 1), torch.zeros(2))  # broadcastable, not the same


class Nested(nn.Module):
    """The last layer inside a submodule, after a computation of the outer module's own."""

    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Linear(2, 4)
        self.top = nn.Sequential(nn.Tanh(), nn.Linear(4, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.top(2.0 * self.trunk(x))


def test_without_last_reads_the_features_and_leaves_the_net_as_it_is():
    torch.manual_seed(0)
    net = Nested()
    reader = Reader(net)
    x = torch.randn(5, 2)
    body = reader.without_last(x)
    assert torch.equal(body(x), torch.tanh(2.0 * net.trunk(x)))  # what the last layer reads
    assert isinstance(net.top[1], nn.Linear) and net(x).shape == (5, 3)  # the net untouched
    assert body.trunk is net.trunk and body.top[0] is net.top[0]  # shared, not copied
    assert [p for p in body.parameters()] == [net.trunk.weight, net.trunk.bias]
    assert body is not net and body.top is not net.top  # the path's modules are copies


def test_without_last_refuses_what_it_cannot_read_by_name():
    twice = (
        r"^Reader's net does not end with one call of its last nn.Linear \('head'\): it cannot "
        r"train stacked; fit the models one by one$"
    )
    with pytest.raises(ValueError, match=twice):
        Reader(Twice()).without_last(torch.randn(3, 3))
    alone = (
        r"^Reader's net is its last nn.Linear alone: there is no body to train stacked; fit the "
        r"models one by one$"
    )
    with pytest.raises(ValueError, match=alone):
        Reader(nn.Linear(2, 1)).without_last(torch.randn(3, 2))
