"""``MeanFieldLinear`` (the layer under ``BayesianLinear`` and ``GaussianLinear``): its draw is
``loc + std * eps`` for the weight and the bias, on every path; its initialisation; its
refusals, each naming the argument."""

import math

import pytest
import torch
import torch.nn.functional as F

from bnn_pyro.nn import BayesianLinear, GaussianLinear

LAYERS = [BayesianLinear, GaussianLinear]


def _layer(cls, dtype=torch.float32):  # noqa: ANN001, ANN202
    torch.manual_seed(0)
    layer = cls(4, 3, init_std=0.3).to(dtype)
    with torch.no_grad():  # a different std per weight, so a std misplaced shows
        for p in layer.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return layer


@pytest.mark.parametrize("cls", LAYERS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_one_draw_is_the_linear_map_of_loc_plus_std_times_eps(cls, dtype):
    """``forward(x)`` under a seed is ``F.linear(x, W, b)`` with ``W = loc + std * eps`` and
    ``b`` alike, ``eps`` the standard normals the same seed gives (weight first, then bias)."""
    layer = _layer(cls, dtype)
    x = torch.randn(5, 4, dtype=dtype)
    (w, sw), (b, sb) = layer.weight_posterior(), layer.bias_posterior()
    torch.manual_seed(7)
    got = layer(x)
    torch.manual_seed(7)
    eps_w, eps_b = torch.randn_like(w), torch.randn_like(b)
    want = F.linear(x, w + sw * eps_w, b + sb * eps_b)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6 if dtype == torch.float32 else 1e-14)
    torch.testing.assert_close(layer(x, sample=False), F.linear(x, w, b))


@pytest.mark.parametrize("cls", LAYERS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_s_draws_at_once_are_s_linear_maps_of_loc_plus_std_times_eps(cls, dtype):
    """``forward(x, num_samples=S)``: ``S`` weight sets drawn in the layer's dtype, ``(S, O,
    D)`` then ``(S, O)``, each row ``s`` of the output ``x @ W_sᵀ + b_s``."""
    layer = _layer(cls, dtype)
    x = torch.randn(5, 4, dtype=dtype)
    (w, sw), (b, sb) = layer.weight_posterior(), layer.bias_posterior()
    torch.manual_seed(8)
    got = layer(x, num_samples=2)
    torch.manual_seed(8)
    eps_w = torch.randn(2, 3, 4, dtype=dtype)
    eps_b = torch.randn(2, 3, dtype=dtype)
    want = torch.stack([F.linear(x, w + sw * eps_w[s], b + sb * eps_b[s]) for s in range(2)])
    assert got.dtype == dtype
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6 if dtype == torch.float32 else 1e-14)


@pytest.mark.parametrize("cls", LAYERS)
def test_s_draws_are_made_on_the_layers_device_whatever_the_default_device(cls):
    """Under a ``meta`` default device (a stand-in for a second device) the CPU layer's ``S``
    draws are the same CPU numbers as outside it."""
    layer, x = _layer(cls), torch.randn(5, 4)
    torch.manual_seed(9)
    want = layer(x, num_samples=3)
    torch.manual_seed(9)
    with torch.device("meta"):
        got = layer(x, num_samples=3)
    assert got.device.type == "cpu"
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("cls", LAYERS)
def test_the_means_start_as_nn_linear_s_and_the_prior_defaults_to_one(cls):
    """The weight and bias means start uniform on ``[-1/sqrt(D), 1/sqrt(D)]`` as
    ``nn.Linear``'s do: within the bound and spread over both signs (with 400 x 100 weights and
    100 biases the extremes come within 5% of the bound; each is missed with probability
    ``0.975^100 < 0.1`` at worst for the biases, and the seed is fixed)."""
    torch.manual_seed(0)
    layer = cls(400, 100)
    bound = 1 / math.sqrt(400)
    for loc in (layer.weight_posterior()[0].detach(), layer.bias_posterior()[0].detach()):
        assert float(loc.abs().max()) <= bound
        assert float(loc.min()) < -0.95 * bound and float(loc.max()) > 0.95 * bound
    assert layer.prior_std == 1.0


@pytest.mark.parametrize("cls", LAYERS)
@pytest.mark.parametrize(
    "args, kwargs, error, message",
    [
        ((0, 3), {}, ValueError, "in_features must be an int >= 1, got 0"),
        ((4, 0), {}, ValueError, "out_features must be an int >= 1, got 0"),
        ((4, 3), dict(prior_std=0.0), ValueError, "prior_std must be a finite float > 0"),
        ((4, 3), dict(init_std=0.0), ValueError, "init_std must be a finite float > 0"),
    ],
)
def test_the_constructor_names_each_bad_argument(cls, args, kwargs, error, message):
    with pytest.raises(error) as caught:
        cls(*args, **kwargs)
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize("cls", LAYERS)
def test_forward_names_its_bad_arguments_and_takes_a_single_row(cls):
    layer = _layer(cls)
    with pytest.raises(TypeError, match=r"^x must be a torch\.Tensor, got list$"):
        layer([[1.0] * 4])
    with pytest.raises(ValueError, match=r"^x must have shape \(\.\.\., 4\), got \(\)$"):
        layer(torch.tensor(1.0))
    with pytest.raises(ValueError, match=r"^num_samples must be an int >= 1, got 0"):
        layer(torch.zeros(2, 4), num_samples=0)
    assert layer(torch.zeros(4)).shape == (3,)  # one row without a batch dim
