"""``DKL``'s options and messages: its kernel's defaults are Pyro's, the GP's mean starts at the
last layer's bias (or zero), draws are the closed form's from the seeded stream in the model's
dtype, prediction runs the net in eval mode, the bar names the method, and each refusal is its
whole message."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn as nn
from pyro.contrib.gp.kernels import RBF

import bnn_pyro as bp
from bnn_pyro._rng import seeded
from bnn_pyro.methods.dkl import DKL

F64 = torch.float64


def test_the_kernel_s_defaults_are_pyro_s_and_the_samples_the_library_s():
    m = DKL(bp.nn.mlp(2, [8], 1), "regression")
    pyro_rbf = RBF(input_dim=8)
    defaults = (float(pyro_rbf.lengthscale.detach()), float(pyro_rbf.variance.detach()))
    assert (m.lengthscale, m.variance) == defaults
    assert float(m.gp.kernel.lengthscale.detach()) == m.lengthscale
    assert float(m.gp.kernel.variance.detach()) == m.variance
    assert m.num_samples == bp.BaseBayesianMethod.num_samples


@pytest.mark.parametrize("bias", [True, False])
def test_the_gp_mean_starts_at_the_last_layer_s_bias_or_zero(bias):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 2, bias=bias))
    m = DKL(net, "regression")
    expected = net[2].bias.detach() if bias else torch.zeros(2)
    assert torch.equal(m.mean.detach(), expected)


def test_draws_are_the_closed_form_s_from_the_seeded_stream_in_the_model_s_dtype():
    torch.manual_seed(0)
    m = DKL(bp.nn.mlp(2, [8], 1).to(F64), "regression")
    x = torch.randn(5, 2, dtype=F64)
    _, _, draws = m.predict(x, num_samples=4, seed=3, return_samples=True)
    mean, var = m.predict(x)
    with seeded(3, m.device):
        eps = torch.randn(4, *mean.shape, dtype=F64)
    assert draws.dtype == F64
    torch.testing.assert_close(draws, mean + var.sqrt() * eps, rtol=1e-12, atol=1e-12)
    again = m.predict(x, num_samples=4, seed=3, return_samples=True)[2]
    other = m.predict(x, num_samples=4, seed=4, return_samples=True)[2]
    assert torch.equal(draws, again) and not torch.equal(draws, other)


def test_prediction_runs_the_net_in_eval_mode():
    """A net with dropout predicts the same twice, left in the mode it was in."""
    torch.manual_seed(0)
    m = DKL(bp.nn.mlp(2, [16], 1, dropout=0.5), "regression")
    m.model.train()
    x = torch.randn(6, 2)
    first, second = m.predict(x), m.predict(x)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    assert m.model.training


def test_the_fit_s_bar_names_the_method(capsys):
    m = DKL(bp.nn.mlp(2, [8], 1), "regression")
    m.fit(torch.randn(16, 2), torch.randn(16), epochs=1, progress=True)
    assert re.search(r"(?<![A-Za-z])DKL(?![A-Za-z])", capsys.readouterr().err)


@pytest.mark.parametrize(("make", "error", "message"), [
    (lambda: DKL("net", "regression"), TypeError, "model must be a torch.nn.Module, got str"),
    (
        lambda: DKL(nn.Sequential(nn.Tanh()), "regression"), ValueError,
        "DKL makes the net's last nn.Linear its last layer, and this net has none: end the net "
        "with an nn.Linear",
    ),
    (
        lambda: DKL(bp.nn.mlp(2, [4], 2), "classification"), ValueError,
        "DKL is a Gaussian process regression and takes a Gaussian likelihood, got "
        "Categorical: for a classifier use 'sngp' or 'vbll'",
    ),
    (  # Gaussian, but a noise per row, which the GP's one noise cannot be: refused first
        lambda: DKL(bp.nn.mlp(2, [4], 2), bp.HeteroscedasticGaussian()), ValueError,
        "DKL supports a Gaussian likelihood, got HeteroscedasticGaussian(min_scale=0.001)",
    ),
    *[
        (lambda kw=kw: DKL(bp.nn.mlp(2, [4], 1), "regression", **kw), ValueError, text)
        for kw, text in [
            ({"inducing_points": 0}, "inducing_points must be an int >= 1, got 0"),
            ({"lengthscale": 0.0}, "lengthscale must be a finite float > 0.0, got 0.0"),
            ({"variance": 0.0}, "variance must be a finite float > 0.0, got 0.0"),
            ({"jitter": -1.0}, "jitter must be a finite float >= 0.0, got -1.0"),
            ({"num_samples": 0}, "num_samples must be an int >= 1, got 0"),
        ]
    ],
])  # fmt: skip
def test_each_refusal_is_its_whole_message(make, error, message):
    with pytest.raises(error) as caught:
        make()
    assert str(caught.value) == message


def test_compile_s_refusal_is_its_whole_message():
    m = DKL(bp.nn.mlp(2, [4], 1), "regression")
    with pytest.raises(ValueError) as caught:
        m.fit(torch.randn(8, 2), torch.randn(8), epochs=1, compile=True, progress=False)
    assert str(caught.value) == (
        "DKL trains on Pyro's ELBO, which torch.compile cannot capture in one graph (it breaks "
        "at each of Pyro's host reads): fit without compile=True"
    )


def test_output_moments_and_the_inducing_points_read_the_net_in_eval_mode():
    """With dropout in the net: the sparse GP's inducing points start at the eval-mode features
    of evenly spaced rows, and a fitted model's closed-form moments are the same twice."""
    torch.manual_seed(0)
    m = DKL(bp.nn.mlp(2, [16], 1, dropout=0.5), "regression", inducing_points=4)
    x, y = torch.randn(12, 2), torch.randn(12)
    m.model.eval()
    with torch.no_grad():
        start = m.features(x[torch.tensor([0, 4, 7, 11])])  # linspace(0, 11, 4), rounded
    # one SGD step at lr 1e-12: the inducing points are where fit put them, to 1e-6
    m.fit(x, y, epochs=1, batch_size=12, lr=1e-12, optimizer="sgd", progress=False, seed=0)
    torch.testing.assert_close(m.gp.Xu.detach(), start, rtol=0.0, atol=1e-6)
    # fitted (an unfitted sparse GP's moments do not depend on the features at all)
    m.fit(x, y, epochs=5, batch_size=4, lr=1e-2, progress=False, seed=0)
    m.model.train()
    first, second = m.output_moments(x), m.output_moments(x)
    assert not torch.allclose(first[0], first[0].mean())  # the moments read the features
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])


@pytest.mark.parametrize("inducing_points", [None, 8])
def test_a_dkl_model_copies_during_and_after_its_fit(inducing_points):
    """``copy.deepcopy`` of a DKL model, in a callback mid-fit and once fitted, predicts as
    the model does. The GP kept the last step's features with their autograd graph, which
    deepcopy refuses (and which held the step's memory)."""
    import copy

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(24, 3, generator=g), torch.randn(24, 1, generator=g)
    torch.manual_seed(0)
    model = bp.make("dkl", bp.nn.mlp(3, [8], 1), bp.Gaussian(scale=0.5),
                    inducing_points=inducing_points)  # fmt: skip
    copies = []
    model.fit(x, y, epochs=2, batch_size=8, progress=False,
              callbacks=[lambda m, e, h: copies.append(copy.deepcopy(m))])  # fmt: skip
    assert len(copies) == 2
    twin = copy.deepcopy(model)
    probe = torch.randn(5, 3, generator=g)
    got, want = twin.predictive_gaussian(probe), model.predictive_gaussian(probe)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_fit_stacked_refuses_dkl_saying_why_before_any_work():
    models = [bp.make("dkl", bp.nn.mlp(3, [8], 1), bp.Gaussian(scale=0.5)) for _ in range(2)]
    before = [m.model[0].weight.clone() for m in models]
    message = (
        "^fit_stacked does not train DKL models: its GP is a pyro.contrib.gp model trained "
        "through Pyro's ELBO and param store, which the torch.func batching of fit_stacked does "
        "not reach: fit each model on its own$"
    )
    with pytest.raises(ValueError, match=message):
        bp.fit_stacked(models, torch.randn(10, 3), torch.randn(10, 1), seeds=[0, 1], epochs=1)
    assert all(torch.equal(b, m.model[0].weight) for b, m in zip(before, models, strict=True))
