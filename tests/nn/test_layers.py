"""Layers with leading sample dims equal a loop of plain torch layers."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bnn_pyro.nn import Conv2d, Linear, batched_linear, mlp


@pytest.mark.parametrize("x_shape", [(7, 4), (5, 7, 4)])
@pytest.mark.parametrize("placeholder", [False, True])
def test_batched_linear_equals_a_loop(x_shape, placeholder):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*x_shape, generator=g)
    w, b = torch.randn(5, 3, 4, generator=g), torch.randn(5, 3, generator=g)
    out = batched_linear(
        x, w.unsqueeze(1) if placeholder else w, b.unsqueeze(1) if placeholder else b
    )
    expected = torch.stack([F.linear(x if x.dim() == 2 else x[s], w[s], b[s]) for s in range(5)])
    assert out.shape == (5, 7, 3)
    assert torch.allclose(out, expected, atol=1e-5)


def test_linear_is_nn_linear_for_plain_weights():
    torch.manual_seed(0)
    layer, ref = Linear(4, 3), torch.nn.Linear(4, 3)
    ref.load_state_dict(layer.state_dict())
    x = torch.randn(6, 4)
    assert torch.equal(layer(x), ref(x))


def test_conv2d_with_sampled_weights_equals_a_loop():
    torch.manual_seed(0)
    conv = Conv2d(2, 3, 3, padding=1)
    x = torch.randn(4, 2, 6, 6)
    w, b = torch.randn(5, 3, 2, 3, 3), torch.randn(5, 3)
    out = torch.nn.Module.__getattribute__(conv, "forward")
    conv.weight = torch.nn.Parameter(w)  # (S, out, in, kh, kw)
    conv.bias = torch.nn.Parameter(b)
    result = out(x)
    expected = torch.stack([F.conv2d(x, w[s], b[s], padding=1) for s in range(5)])
    assert result.shape == (5, 4, 3, 6, 6)
    assert torch.allclose(result, expected, atol=1e-5)


def test_mlp_checks_its_arguments():
    assert len(mlp(2, [3, 4], 1)) == 5
    with pytest.raises(ValueError, match="hidden_sizes\\[1\\]"):
        mlp(2, [3, 0], 1)
    with pytest.raises(ValueError, match="activation"):
        mlp(2, [3], 1, activation="swish!")
    with pytest.raises(TypeError, match="in_features"):
        mlp(2.0, [3], 1)
