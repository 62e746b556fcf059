"""MemberDropout / member_dropout: each member's masks are its own run's, the caller's stream is
left alone, and bad input is refused by name."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from bnn_pyro.training.member_dropout import MemberDropout, member_dropout, swap_member_dropout


def test_each_members_masks_are_what_its_own_seeded_run_draws():
    seeds = (3, 4, 5)
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    layer = MemberDropout(0.3, gens)
    x = torch.randn(3, 6, 5)
    first, second = layer(x), layer(x)  # two steps: each generator moves on as its run's would
    for k, s in enumerate(seeds):
        torch.manual_seed(s)
        assert torch.equal(first[k], F.dropout(x[k], 0.3))
        assert torch.equal(second[k], F.dropout(x[k], 0.3))


def test_the_callers_stream_is_untouched_and_eval_is_the_identity():
    layer = MemberDropout(0.5, [torch.Generator().manual_seed(0)] * 2)
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    layer(torch.ones(2, 4, 4))
    assert torch.equal(torch.rand(3), expected)
    x = torch.randn(2, 4, 4)
    assert layer.eval()(x) is x


def test_the_layers_are_swapped_for_the_block_only():
    net = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.2), nn.Sequential(nn.Dropout(0.4)))
    net.eval()
    gens = [torch.Generator().manual_seed(0)]
    with member_dropout(net, gens):
        assert [type(m).__name__ for m in net.modules()].count("MemberDropout") == 2
        assert not net[1].training and net[2][0].p == 0.4  # mode and p carried over
    assert [type(m) for m in (net[1], net[2][0])] == [nn.Dropout, nn.Dropout]


@pytest.mark.parametrize(
    ("call", "exc", "words"),
    [
        (lambda g: MemberDropout(1.5, g), ValueError, "p must be a probability"),
        (lambda g: MemberDropout(True, g), ValueError, "p must be a probability"),
        (lambda g: MemberDropout(0.1, []), TypeError, "generators"),
        (lambda g: MemberDropout(0.1, [0]), TypeError, "generators"),
        (lambda g: MemberDropout(0.1, g)(torch.ones(3, 2)), ValueError, "K=2"),
        (lambda g: member_dropout("net", g).__enter__(), TypeError, "nn.Module"),
        (lambda g: swap_member_dropout(nn.Dropout(0.1), []), TypeError, "generators"),
    ],
)
def test_bad_input_is_refused_by_name(call, exc, words):
    gens = [torch.Generator(), torch.Generator()]
    with pytest.raises(exc, match=words):
        call(gens)
