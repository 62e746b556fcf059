"""``fit(compile=True)`` of the classic methods: the loss of each step compiled by
``torch.compile`` (``bnn_pyro/training/compiled.py``), checked against the eager fit it
compiles (the reference) under one seed, its draws included: MC dropout's masks, the
functional BNN's weight noise, the stacked ensemble's members in one pass.

Compiling takes seconds per graph, so each method compiles once."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import bnn_pyro as bp
from bnn_pyro.methods import VariationalBayesNN
from bnn_pyro.methods.classic.training import check_fit_args
from bnn_pyro.training.compiled import compile_loss
from tests.methods.methods_helpers import relu_mlp

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:torch")

METHODS = {
    "mc dropout": lambda: bp.MCDropout(relu_mlp(3, 1, 8, dropout=0.2), likelihood="regression"),
    "functional bnn": lambda: VariationalBayesNN(3, [8], 1, likelihood="regression"),
    # a dense last layer: the mask of its factor comes from a cached helper the graph traces
    "vbll": lambda: bp.VBLL(relu_mlp(3, 1, 8), bp.Gaussian(scale="learned")),
    # two members of one architecture: the stacked path, each member's own minibatches
    "stacked ensemble": lambda: bp.DeepEnsemble(
        lambda: relu_mlp(3, 1, 8), 2, likelihood="regression"
    ),
}


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 3, generator=g)
    return x, x.sum(-1, keepdim=True) + 0.1 * torch.randn(64, 1, generator=g)


@pytest.mark.parametrize("name", list(METHODS))
def test_a_compiled_fit_follows_the_eager_fit(name):
    x, y = _data()
    fits = []
    for compile in (False, True):
        torch.manual_seed(0)  # the same initial nets
        method = METHODS[name]()
        history = method.fit(
            x, y, epochs=3, batch_size=32, lr=1e-2, progress=False, seed=0, compile=compile
        )
        fits.append((method.state_dict(), history["loss"]))
    (eager, eager_loss), (compiled, compiled_loss) = fits
    # 6 steps of the same draws, the sums in another order: float32 rounding (~1e-7 relative
    # per sum) that Adam's normalised steps carry over, well inside 1e-4
    for key, value in eager.items():
        if torch.is_tensor(value):
            torch.testing.assert_close(compiled[key], value, rtol=1e-4, atol=1e-5)
    assert compiled_loss == pytest.approx(eager_loss, rel=1e-5)


def test_compile_must_be_a_bool_and_is_off_by_default():
    args = (1, 8, 1e-3, 0.0, "adam", False, None)
    assert check_fit_args(*args).compile is False
    assert check_fit_args(*args, compile=True).compile is True
    with pytest.raises(TypeError, match=r"^compile must be a bool, got str \('yes'\)$"):
        check_fit_args(*args, compile="yes")
    method = METHODS["mc dropout"]()
    x, y = _data()
    with pytest.raises(TypeError, match=r"^compile must be a bool, got int \(1\)$"):
        method.fit(x, y, epochs=1, progress=False, compile=1)


def test_compile_loss_refuses_what_is_not_callable():
    with pytest.raises(TypeError, match=r"^fn must be callable, got int$"):
        compile_loss(3)
    double = compile_loss(nn.Linear(2, 1).requires_grad_(False))
    assert double(torch.zeros(1, 2)).shape == (1, 1)
