"""How ``SVIPredictive`` (``bnn_pyro/methods/vi/predictive.py``) routes its arguments: the seed
and generator of ``predictive_gaussian``, ``chunk_size`` down to the net's evaluation, the row
blocks ``predict`` streams, the noise of a fixed or per-output scale and the input checks after
a fit.

Each is read off a value: the same draws as ``predict``'s under the same seed or generator, the
arguments the net's evaluation receives, a hand-worked noise variance, an error's exact text.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import bnn_pyro as bp
from bnn_pyro._streaming import block_rows


def _fitted(scale: float | str = 0.5, outputs: int = 1) -> bp.VariationalBNN:
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [3], outputs), bp.Gaussian(scale=scale))
    X = torch.linspace(-1, 1, 16).reshape(8, 2)
    y = X[:, :1].expand(8, outputs).squeeze(-1)
    bnn.fit(X, y, epochs=2, progress=False, seed=0)
    return bnn


def _x() -> torch.Tensor:
    return torch.tensor([[0.1, -0.2], [0.3, 0.4], [-0.5, 0.6]])


def test_predictive_gaussian_draws_what_predict_draws_under_one_seed() -> None:
    """``predictive_gaussian(x, S, seed)``'s means are ``predict(x, seed=seed)``'s per-draw
    means (the same guide draws), and another seed draws others."""
    bnn = _fitted()
    locs, scales = bnn.predictive_gaussian(_x(), 6, seed=3)
    per_draw = bnn.predict(_x(), num_samples=6, seed=3, return_samples=True)[2]
    assert torch.equal(locs, per_draw)
    assert torch.equal(locs, bnn.predictive_gaussian(_x(), 6, seed=3)[0])
    assert not torch.equal(locs, bnn.predictive_gaussian(_x(), 6, seed=4)[0])
    assert torch.equal(scales, torch.tensor(0.5))  # the fixed scale, broadcastable to locs


def test_predictive_gaussian_takes_its_draws_from_a_generator() -> None:
    """``generator=`` (a keyword of ``**kwargs``) draws as ``predict``'s ``generator=``: two
    generators seeded alike give the same draws, seeded otherwise other ones."""
    bnn = _fitted()

    def gen(seed: int) -> torch.Generator:
        return torch.Generator().manual_seed(seed)

    locs = bnn.predictive_gaussian(_x(), 6, generator=gen(7))[0]
    per_draw = bnn.predict(_x(), num_samples=6, generator=gen(7), return_samples=True)[2]
    assert torch.equal(locs, per_draw)
    assert not torch.equal(locs, bnn.predictive_gaussian(_x(), 6, generator=gen(8))[0])


@pytest.mark.parametrize("call", ["predict", "predictive_gaussian"])
def test_chunk_size_reaches_the_nets_evaluation(call: str, monkeypatch) -> None:
    """The ``chunk_size`` given (rows per pass: the memory bound) is what the net's evaluation
    receives, and its default ``None`` lets the evaluator size its passes."""
    bnn = _fitted()
    seen: list[int | None] = []
    outputs = bnn._outputs

    def recording(X, samples, chunk_size):
        seen.append(chunk_size)
        return outputs(X, samples, chunk_size)

    monkeypatch.setattr(bnn, "_outputs", recording)
    getattr(bnn, call)(_x(), num_samples=4, seed=0, chunk_size=2)
    getattr(bnn, call)(_x(), num_samples=4, seed=0)
    assert seen == [2, None]


@pytest.mark.parametrize("chunk_size", [0, -3])
def test_predict_refuses_a_chunk_size_below_one_naming_it(chunk_size: int) -> None:
    with pytest.raises(ValueError, match=rf"^chunk_size must be an int >= 1, got {chunk_size}$"):
        _fitted().predict(_x(), chunk_size=chunk_size)


def test_predict_streams_rows_in_blocks_sized_by_the_draws_and_output_width(monkeypatch) -> None:
    """``predict`` evaluates the rows in blocks of ``block_rows(S, O)`` (one ``(S, rows, O)``
    tensor within the block budget): with a budget small enough to need several blocks, the
    net sees blocks of exactly that many rows (the last one the rest), whatever the features."""
    bnn = _fitted(outputs=3)
    monkeypatch.setattr(
        "bnn_pyro.methods.vi.predictive.block_rows", lambda s, w: block_rows(s, w, budget=60)
    )
    sizes: list[int] = []
    outputs = bnn._outputs

    def recording(X, samples, chunk_size):
        sizes.append(X.shape[0])
        return outputs(X, samples, chunk_size)

    monkeypatch.setattr(bnn, "_outputs", recording)
    X = torch.linspace(-1, 1, 26).reshape(13, 2)
    mean = bnn.predict(X, num_samples=4, seed=0)[0]
    assert sizes == [5, 5, 3]  # 60 // (4 draws x 3 outputs) = 5 rows
    assert torch.equal(mean, bnn.predict(X, num_samples=4, seed=0, chunk_size=13)[0])


def test_include_noise_adds_a_fixed_scales_square() -> None:
    """With a fixed noise scale ``s`` the aleatoric part is ``s²`` on every row and output."""
    bnn = _fitted(scale=0.5)
    epistemic = bnn.predict(_x(), num_samples=5, seed=1)[1]
    total = bnn.predict(_x(), num_samples=5, seed=1, include_noise=True)[1]
    torch.testing.assert_close(total - epistemic, torch.full_like(total, 0.25))


def test_include_noise_averages_a_learned_scale_over_draws_per_output() -> None:
    """A learned scale drawn per output ``(S, O)``: the noise added to output ``o`` is the mean
    over draws of ``scale[s, o]²``, its own column's, not a mean over all outputs."""
    bnn = bp.VariationalBNN(bp.nn.mlp(1, [], 2), bp.Gaussian(scale="learned"))
    draws = {
        "net.0.weight": torch.tensor([[[1.0], [0.0]], [[3.0], [0.0]]]),  # (S=2, O=2, 1)
        "net.0.bias": torch.zeros(2, 2),
        "likelihood.scale": torch.tensor([[1.0, 3.0], [2.0, 5.0]]),  # (S, O)
    }
    x = torch.tensor([[1.0], [2.0]])
    mean, var = bnn.predict(x, posterior_samples=draws, include_noise=True)
    # output 0: f = 1 x, 3 x -> mean 2x, variance x² (1, 4); noise (1 + 4) / 2 = 2.5
    # output 1: f = 0 -> variance 0; noise (9 + 25) / 2 = 17
    torch.testing.assert_close(mean, torch.tensor([[2.0, 0.0], [4.0, 0.0]]))
    torch.testing.assert_close(var, torch.tensor([[3.5, 17.0], [6.5, 17.0]]))


def test_inputs_take_the_models_dtype_and_device() -> None:
    """``prepare_inputs`` casts to the model's dtype (a float64 array into a float32 model and
    the other way round) and puts the rows on the model's device (``meta`` standing in for a
    second device on a machine without one)."""
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [], 1), bp.Gaussian(0.1))
    assert bnn.prepare_inputs(np.zeros((1, 2))).dtype == torch.float32
    assert bnn.double().prepare_inputs(torch.zeros(1, 2)).dtype == torch.float64
    assert bnn.to("meta").prepare_inputs([[0.0, 1.0]]).device == torch.device("meta")


def test_after_a_fit_inputs_must_have_the_training_rows_shape() -> None:
    """A net whose first layer does not state its features (``Flatten``): after a fit on
    ``(N, 2, 3)`` rows, rows of another shape are refused by name, though ``Flatten`` would
    take ``(N, 6)`` silently."""
    net = nn.Sequential(nn.Flatten(), nn.Linear(6, 1))
    bnn = bp.VariationalBNN(net, bp.Gaussian(0.5))
    X = torch.linspace(-1, 1, 24).reshape(4, 2, 3)
    bnn.fit(X, torch.zeros(4), epochs=1, progress=False, seed=0)
    assert bnn.predict(X, num_samples=2, seed=0)[0].shape == (4, 1)
    with pytest.raises(ValueError, match=r"^x must have shape \(N, 2, 3\)"):
        bnn.predict(torch.zeros(4, 6), num_samples=2, seed=0)


def test_the_input_checks_name_x() -> None:
    """``predictive_gaussian`` and ``prepare_posterior_samples`` name the inputs ``x`` in their
    errors, as ``predict`` does."""
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [], 1), bp.Gaussian(0.1))
    draws = {"net.0.weight": torch.ones(2, 1, 2), "net.0.bias": torch.zeros(2, 1)}
    message = r"^x must have 2 feature\(s\) per row"
    with pytest.raises(ValueError, match=message):
        bnn.predictive_gaussian(torch.zeros(2, 3), posterior_samples=draws)
    with pytest.raises(ValueError, match=message):
        bnn.prepare_posterior_samples(draws, torch.zeros(2, 3))


def test_targets_go_to_the_models_device(monkeypatch) -> None:
    """``prepare_targets`` puts the targets on the model's device (``meta`` standing in for a
    second device; the likelihood's own check, which reads values, is stubbed out there)."""
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [], 1), bp.Gaussian(0.1)).to("meta")
    monkeypatch.setattr(bnn.likelihood, "check_targets", lambda y, out_dim: y)
    y = bnn.prepare_targets([1.0, 2.0], torch.zeros(2, 2, device="meta"), out_dim=1)
    assert y.device == torch.device("meta")


def test_prepare_inputs_names_its_argument_x_by_default() -> None:
    with pytest.raises(ValueError, match=r"^X must have at least one row, got shape \(0, 2\)$"):
        bp.VariationalBNN(bp.nn.mlp(2, [], 1), bp.Gaussian(0.1)).prepare_inputs(torch.zeros(0, 2))
