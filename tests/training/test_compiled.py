"""``bnn_pyro.training.compiled.compile_loss``: one static graph per batch shape (``dynamic=
False``), counted by dynamo, and its refusal of what is not callable."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from bnn_pyro.training.compiled import compile_loss


def test_each_batch_shape_compiles_its_own_static_graph():
    """Three batch shapes, three graphs: no shape is made dynamic after the second (torch's
    default would recompile once with a symbolic batch and reuse it for the third)."""
    torch._dynamo.reset()
    counters.clear()
    loss = compile_loss(lambda x: (x * x).sum())
    for rows in (3, 4, 5, 5):
        assert float(loss(torch.ones(rows))) == rows
    assert counters["stats"]["unique_graphs"] == 3


def test_what_is_not_callable_is_refused():
    with pytest.raises(TypeError, match=r"^fn must be callable, got int$"):
        compile_loss(3)
