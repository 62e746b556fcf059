"""The classic methods' data checks (``bnn_pyro/methods/classic/checks.py``) word for word: the
inputs (floating, or integer indices for an embedding net), the targets by the likelihood's
own check against the net's width, the output's shape, and every batch of a loader checked
against the width of the net's output on the first batch (the net run once)."""

from __future__ import annotations

import re

import pytest
import torch

from bnn_pyro.likelihoods import Categorical, Gaussian
from bnn_pyro.methods.classic.checks import (
    check_batches,
    check_inputs,
    check_targets,
    output_width,
)


def _raises(exc: type[Exception], message: str, call) -> None:
    with pytest.raises(exc, match=rf"^{re.escape(message)}$"):
        call()


def test_inputs_must_be_floating_unless_an_embedding_takes_indices():
    x = torch.zeros(2, 3)
    assert check_inputs(x) is x  # the default name and no indices: a float tensor passes
    _raises(
        TypeError,
        "x must be a torch.Tensor, got list; convert with torch.as_tensor",
        lambda: check_inputs([[1.0]]),
    )
    _raises(
        TypeError,
        "x must have a floating dtype, got torch.int64 (integer indices only for a net with "
        "an nn.Embedding)",
        lambda: check_inputs(torch.tensor([[1, 2]])),
    )
    indices = torch.tensor([[1, 2]])
    assert check_inputs(indices, indices=True) is indices
    # neither a bool nor a complex tensor is a tensor of indices
    for bad in (torch.tensor([[True]]), torch.zeros(1, 2, dtype=torch.complex64)):
        _raises(
            TypeError,
            f"x must have a floating dtype, got {bad.dtype}",
            lambda bad=bad: check_inputs(bad, indices=True),
        )


def test_inputs_must_have_rows_and_a_feature_dimension():
    _raises(
        ValueError,
        "v must have shape (N, D, ...) with N >= 1, got (3,); for 1-D features use x.unsqueeze(-1)",
        lambda: check_inputs(torch.zeros(3), "v"),
    )
    _raises(
        ValueError,
        "x must have shape (N, D, ...) with N >= 1, got (0, 2)",
        lambda: check_inputs(torch.zeros(0, 2)),
    )
    nan = torch.tensor([[0.0, float("nan")]])
    _raises(
        ValueError, "x must be finite, got 1 NaN or infinite value(s)", lambda: check_inputs(nan)
    )


def test_targets_are_the_likelihoods_check_against_the_width():
    x = torch.zeros(3, 2)
    y = check_targets(x, torch.tensor([1, 2, 3]), Gaussian(), 1)
    assert y.dtype == torch.float32 and y.tolist() == [[1.0], [2.0], [3.0]]
    labels = check_targets(x, torch.tensor([0.0, 1.0, 1.0]), Categorical(), 2)
    assert labels.dtype == torch.int64 and labels.tolist() == [0, 1, 1]
    _raises(
        TypeError,
        "y must be a torch.Tensor, got list; convert with torch.as_tensor",
        lambda: check_targets(x, [1.0, 2.0, 3.0], Gaussian(), 1),
    )
    _raises(
        ValueError,
        "y must have 3 rows (len(x)), got shape ()",
        lambda: check_targets(x, torch.tensor(1.0), Gaussian(), 1),
    )
    _raises(
        ValueError,
        "y must be finite, got 1 NaN or infinite value(s)",
        lambda: check_targets(x, torch.tensor([1.0, float("inf"), 0.0]), Gaussian(), 1),
    )


def test_the_output_width_needs_rows_and_columns():
    assert output_width(torch.zeros(4, 3)) == 3
    _raises(
        ValueError,
        "model output must have shape (N, O), got (3,)",
        lambda: output_width(torch.zeros(3)),
    )
    _raises(
        ValueError,
        "member output must have shape (N, O), got (3, 1, 1)",
        lambda: output_width(torch.zeros(3, 1, 1), "member"),
    )


class _Net:
    """A one-output "net" that counts its calls and the inputs' names its check saw."""

    def __init__(self) -> None:
        self.calls, self.names = 0, []

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x[:, :1]

    def check_x(self, x: torch.Tensor, name: str) -> torch.Tensor:
        self.names.append(name)
        return check_inputs(x, name)


def test_every_batch_is_checked_against_the_first_batchs_width():
    net = _Net()
    one = [(torch.zeros(2, 3), torch.zeros(2))]
    check_batches(one, net.check_x, Gaussian(), net)  # a single batch is data too
    batches = one * 3
    check_batches(batches, net.check_x, Gaussian(), net)
    assert net.calls == 2 and net.names == ["x"] * 4  # the net once per call, x named "x"
    wide = [*batches, (torch.zeros(2, 3), torch.zeros(2, 2))]
    _raises(
        ValueError,
        "batch 3 of the data: y must have shape (N,) or (N, 1) for a Gaussian likelihood with "
        "1 output(s), got (2, 2)",
        lambda: check_batches(wide, net.check_x, Gaussian(), net),
    )
    bad_x = [*batches, (torch.zeros(2, 3, dtype=torch.float64).long(), torch.zeros(2))]
    with pytest.raises(TypeError, match=r"^batch 3 of the data: x must have a floating dtype"):
        check_batches(bad_x, net.check_x, Gaussian(), net)


def test_a_loader_must_yield_pairs_and_something():
    net = _Net()
    _raises(
        ValueError,
        "the data yielded no batch",
        lambda: check_batches([], net.check_x, Gaussian(), net),
    )
    for batch, kind in (
        ((torch.zeros(2, 1),), "tuple"),
        ([torch.zeros(2, 1), torch.zeros(2), 3], "list"),
        (torch.zeros(2, 1), "Tensor"),  # two rows: a pair only in length
    ):
        _raises(
            ValueError,
            f"batch 0 of the data must be an (x, y) pair, got {kind}",
            lambda batch=batch: check_batches([batch], net.check_x, Gaussian(), net),
        )
