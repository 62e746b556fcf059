"""The UCI harness's scoring keeps a float noise scale on the predictions' device, checked
without a GPU: under a ``meta`` default device (a stand-in for ``torch.set_default_device(
"cuda")`` or a model on another device) it gives the same CPU numbers as outside it (see
``test_meta_stand_in_methods.py``). Apart from the library's tests: a run of the harness's
mutants copies ``benchmarks/`` but not ``bnn_pyro``'s other test files' imports."""

from __future__ import annotations

import torch

from benchmarks.uci.protocol import score


def test_the_uci_score_puts_a_float_noise_on_the_locs_device():
    """``score`` with a float noise scale gives the same numbers under a ``meta`` default
    device (its docstring's example: test LL -2.6121, RMSE 2√2, coverage 1/2)."""
    args = (torch.zeros(1, 2, 1), 1.0, torch.tensor([[0.0], [2.0]]))
    expected = score(*args, y_std=2.0)
    with torch.device("meta"):
        got = score(*args, y_std=2.0)
    assert got == expected and round(got["test_ll"], 4) == -2.6121
