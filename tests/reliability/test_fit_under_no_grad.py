"""A fit called under ``torch.no_grad()`` (a notebook cell inside an inference block, a user's
evaluation loop) trains as any other: every method's ``fit`` and ``bp.fit_stacked`` turn
gradients on for their own work and leave the caller's mode as it was. Before, every one of
them failed in its first step with autograd's "element 0 of tensors does not require grad".

The oracle is the same seeded fit outside the block: the same predictions, bit for bit (the
work is the same; only the grad mode around it differs).
"""

from __future__ import annotations

import pytest
import torch

import bnn_pyro as bp


def _data():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(24, 2, generator=g)
    return X, X.sum(-1) + 0.1 * torch.randn(24, generator=g)


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(2, 6), torch.nn.Tanh(), torch.nn.Dropout(0.1), torch.nn.Linear(6, 1)
    )


@pytest.mark.parametrize("name", list(bp.METHODS))
def test_a_fit_under_no_grad_is_the_fit_outside_it(name):
    X, y = _data()
    options = {"epochs": 2, "batch_size": 8, "seed": 0, "progress": False}
    outside = bp.make(name, _net(), bp.Gaussian(scale=0.3))
    outside.fit(X, y, **options)
    inside = bp.make(name, _net(), bp.Gaussian(scale=0.3))
    with torch.no_grad():
        inside.fit(X, y, **options)
        assert not torch.is_grad_enabled()  # the caller's mode, given back
    assert torch.equal(inside.predict(X, seed=1)[0], outside.predict(X, seed=1)[0])


@pytest.mark.parametrize("name", ["dropout", "vi", "sghmc"])  # one of each engine
def test_a_stacked_fit_under_no_grad_is_the_stacked_fit_outside_it(name):
    X, y = _data()

    def fitted(no_grad: bool):
        models = [bp.make(name, _net(), bp.Gaussian(scale=0.3)) for _ in range(2)]
        with torch.set_grad_enabled(not no_grad):
            bp.fit_stacked(models, X, y, seeds=[0, 1], epochs=2, batch_size=8, progress=False)
            assert torch.is_grad_enabled() is not no_grad
        return torch.cat([m.predict(X, seed=1)[0] for m in models])

    assert torch.equal(fitted(True), fitted(False))
