"""``predict`` of the classic methods refuses bad arguments before any draw, naming them."""

from __future__ import annotations

import pytest
import torch

import bnn_pyro as bp


def _dropout() -> bp.MCDropout:
    net = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 2))
    return bp.MCDropout(net, likelihood=bp.Categorical())


@pytest.mark.parametrize(
    ("x", "error", "message"),
    [
        ([[1.0, 2.0, 3.0]], TypeError, r"^x must be a torch\.Tensor, got list"),
        (torch.zeros(3), ValueError, r"^x must have shape \(N, D, \.\.\.\) with N >= 1"),
        (torch.zeros(2, 4), ValueError, r"^x must have 3 feature\(s\) per row"),
    ],
)
def test_predict_names_x_in_its_refusals(x, error, message):
    """Each refusal of the inputs starts with the argument's name, as a user passed it: the
    type, the rank and the width the net's first layer reads."""
    with pytest.raises(error, match=message):
        _dropout().predict(x, num_samples=2)


@pytest.mark.parametrize("bad", ["yes", 1])
def test_normalize_output_must_be_a_bool_or_none_and_the_refusal_names_what_came(bad):
    """``normalize_output`` takes ``True``, ``False`` or ``None``; anything else is refused,
    naming its type (a string such as ``"yes"`` is truthy: taking it would silently softmax)."""
    with pytest.raises(
        TypeError, match=rf"^normalize_output must be a bool or None, got {type(bad).__name__}$"
    ):
        _dropout().predict(torch.zeros(2, 3), normalize_output=bad, num_samples=2)


@pytest.mark.parametrize(
    ("x_val", "message"),
    [
        (torch.zeros(3), r"^x_val must have shape \(N, D, \.\.\.\) with N >= 1"),
        (torch.zeros(3, 4), r"^x_val must have 3 feature\(s\) per row"),
    ],
)
def test_fit_names_x_val_when_it_refuses_the_validation_inputs(x_val, message):
    """``fit``'s validation inputs go through the same check as ``predict``'s, under their own
    name, before any training step."""
    x, y = torch.zeros(8, 3), torch.zeros(8, dtype=torch.long)
    with pytest.raises(ValueError, match=message):
        _dropout().fit(x, y, epochs=1, validation_data=(x_val, torch.zeros(3, dtype=torch.long)),
                       progress=False)  # fmt: skip
