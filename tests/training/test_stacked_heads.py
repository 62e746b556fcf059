"""``StackedHeads``: K modules of one kind held as ``(K, *shape)`` tensors and called under
``vmap``: each member's call is its own module's, each slice's gradient that member's own, and
the members are written back and read from slice by slice."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from bnn_pyro.training.stacked_heads import StackedHeads


class Scaled(nn.Module):
    """A head with a parameter, a frozen parameter and a buffer (fixed per member)."""

    def __init__(self, k: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(k)
        self.weight = nn.Parameter(torch.randn(2, 3, generator=g))
        self.shift = nn.Parameter(torch.randn(2, generator=g), requires_grad=False)
        self.register_buffer("features", torch.randn(3, 3, generator=g))

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = (x @ self.features) @ self.weight.T + self.shift
        return (out - y).pow(2).mean()


def _heads() -> list[Scaled]:
    return [Scaled(k) for k in range(3)]


def test_each_members_value_and_gradient_are_its_own():
    heads = _heads()
    stacked = StackedHeads(heads)
    g = torch.Generator().manual_seed(9)
    x, y = torch.randn(3, 5, 3, generator=g), torch.randn(3, 5, 2, generator=g)
    values = stacked.map(lambda head, xb, yb: head.loss(xb, yb), x, y)
    values.sum().backward()
    for k, head in enumerate(heads):
        own = head.loss(x[k], y[k])
        (grad,) = torch.autograd.grad(own, head.weight)
        torch.testing.assert_close(values[k], own, rtol=1e-6, atol=0.0)
        torch.testing.assert_close(stacked.tensors()["weight"].grad[k], grad, rtol=1e-6, atol=1e-7)
    # frozen as in the members; the buffer is stacked, not trained
    assert not stacked.tensors()["shift"].requires_grad
    assert [n for n, _ in stacked.named_parameters()] == ["stacked.0", "stacked.1"]
    assert stacked.buffer_0.shape == (3, 3, 3)


def test_write_back_and_read_from_move_each_slice():
    heads = _heads()
    stacked = StackedHeads(heads)
    with torch.no_grad():
        stacked.tensors()["weight"][1] += 1.0
        stacked.buffer_0[2] = 0.0
    before = heads[1].weight.detach().clone()
    stacked.write_back()
    assert torch.equal(heads[1].weight, before + 1.0)
    assert torch.equal(heads[2].features, torch.zeros(3, 3))
    assert torch.equal(heads[0].weight, Scaled(0).weight)  # the others as they were
    with torch.no_grad():
        heads[0].weight.zero_()
    stacked.read_from()
    assert torch.equal(stacked.tensors()["weight"][0], torch.zeros(2, 3))
    assert torch.equal(stacked.tensors()["weight"][1], before + 1.0)


def test_a_call_does_not_touch_the_members():
    """Not after the call, nor during it: the call runs on a copy of the first member's code,
    so a member read while the call runs (a callback, another thread) holds its own tensors."""
    heads = _heads()
    stacked = StackedHeads(heads)
    with torch.no_grad():
        stacked.tensors()["weight"].zero_()
    own = [(h.weight, h.features) for h in heads]
    during = []

    def loss(head: Scaled, xb: torch.Tensor) -> torch.Tensor:
        during.append([(h.weight, h.features) for h in heads])
        return head.loss(xb, xb[:, :2])

    stacked.map(loss, torch.randn(3, 4, 3))
    for seen, mine in zip(during[0], own, strict=True):
        assert all(a is b for a, b in zip(seen, mine, strict=True))
    assert torch.equal(heads[1].weight, Scaled(1).weight)


@pytest.mark.parametrize(("heads", "message"), [
    ([Scaled(0)], "StackedHeads needs at least two members"),
    ([Scaled(0), nn.Linear(3, 2)], "the heads differ in their class or tensors"),
    ([nn.Linear(3, 2), nn.Linear(3, 1)], "the heads differ in their class or tensors"),
    ([nn.Linear(3, 2), nn.Linear(3, 2).requires_grad_(False)], "the heads differ in their class"),
])  # fmt: skip
def test_what_cannot_be_stacked_is_named(heads, message):
    with pytest.raises(ValueError, match="^" + message):
        StackedHeads(heads)


def test_random_draws_inside_a_call_are_refused():
    """``vmap`` would give every member the same draw: refused, not silently shared."""
    stacked = StackedHeads([nn.Linear(3, 2), nn.Linear(3, 2)])
    with pytest.raises(RuntimeError, match="randomness"):
        stacked.map(lambda head, xb: head(xb + torch.randn(3)).sum(), torch.randn(2, 4, 3))
