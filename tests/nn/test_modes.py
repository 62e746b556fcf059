"""``bnn_pyro.nn.modes.modes``: each module's flag set inside the block and its own flag given
back after it, an exception included."""

import pytest
import torch.nn as nn

from bnn_pyro.nn.modes import modes


def _flags(net):
    return [m.training for m in net.modules()]


def test_each_module_gets_its_flag_and_its_own_flag_back():
    net = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5), nn.Sequential(nn.Dropout(0.1)))
    net[0].eval()
    before = _flags(net)
    with modes(net, lambda m: isinstance(m, nn.Dropout)):
        assert _flags(net) == [False, False, True, False, True]
    assert _flags(net) == before == [True, False, True, True, True]


def test_the_flags_come_back_after_an_exception():
    net = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5))
    net[1].eval()
    with pytest.raises(RuntimeError, match="inside"), modes(net, lambda m: True):
        assert _flags(net) == [True, True, True]
        raise RuntimeError("inside")
    assert _flags(net) == [True, True, False]


def test_a_module_shared_by_two_roots_nested_gets_its_flag_back():
    shared = nn.Dropout(0.5)
    a, b = nn.Sequential(shared), nn.Sequential(nn.Linear(1, 1), shared)
    with modes(a, lambda m: False), modes(b, lambda m: False):
        assert not any(_flags(a) + _flags(b))
    assert all(_flags(a) + _flags(b))


def test_what_is_not_a_module_or_a_rule_is_refused_before_any_flag_changes():
    net = nn.Sequential(nn.Dropout(0.5))
    with pytest.raises(TypeError, match=r"^module must be a torch.nn.Module, got list$"):
        with modes([net], lambda m: False):
            pass
    with pytest.raises(TypeError, match=r"^train must be a callable m -> bool, got bool$"):
        with modes(net, False):
            pass
    assert _flags(net) == [True, True]
