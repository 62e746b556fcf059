"""The estimators' arithmetic on given noise (``bnn_pyro.poutine.estimators``): the local
reparameterization's and Flipout's draws against their formulas written out here, the
pre-activation std's two backward paths against autograd's, and the default noise's law,
generator, dtype and device."""

import pytest
import torch

from bnn_pyro.poutine.estimators import (
    _CUSTOM_BACKWARD_MIN,
    draw_noise,
    flipout_linear,
    local_reparam_linear,
    preactivation_std,
)

G = torch.Generator().manual_seed(0)


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=G, dtype=torch.float64)


def _fixed(value: float, signs_value: float = -1.0):
    """A noise that gives ``value`` for normals and ``signs_value`` for signs, recording its
    calls."""
    calls = []

    def noise(shape, like, signs):
        calls.append((tuple(shape), signs))
        return torch.full(shape, signs_value if signs else value, dtype=like.dtype)

    noise.calls = calls
    return noise


@pytest.mark.parametrize("batched", [False, True], ids=["one weight", "a weight per sample"])
def test_the_local_reparameterization_is_the_gaussian_of_the_preactivation(batched):
    """``mean + eps * std`` with ``mean = x W_mu^T + b_mu`` and ``std = sqrt(x^2 (W_s^2)^T +
    b_s^2)`` (the pre-activation's law under independent Gaussian weights), ``eps`` = 0.5."""
    lead = (2,) if batched else ()
    x = _r(2, 4, 3) if batched else _r(4, 3)
    loc, scale = _r(*lead, 5, 3), _r(*lead, 5, 3).abs()
    b_loc, b_scale = _r(*lead, 5), _r(*lead, 5).abs()
    out = local_reparam_linear(x, loc, scale, b_loc, b_scale, noise=_fixed(0.5))
    mean = x @ loc.transpose(-1, -2) + b_loc.unsqueeze(-2)
    std = (x.square() @ scale.square().transpose(-1, -2) + b_scale.square().unsqueeze(-2)).sqrt()
    torch.testing.assert_close(out, mean + 0.5 * std)


def test_a_point_estimate_bias_adds_no_spread():
    x, loc, scale, b = _r(4, 3), _r(5, 3), _r(5, 3).abs(), _r(5)
    out = local_reparam_linear(x, loc, scale, b, None, noise=_fixed(1.0))
    std = (x.square() @ scale.square().T).sqrt()
    torch.testing.assert_close(out, x @ loc.T + b + std)


def test_flipout_perturbs_each_row_by_its_own_signs():
    """``x W_mu^T + b + ((x * s_in) (W - W_mu)^T) * s_out``: with every sign -1 both flips
    cancel, so the output is the drawn weight's; the signs are drawn in and out, in that
    order, as signs."""
    x, loc, weight, b = _r(4, 3), _r(5, 3), _r(5, 3), _r(5)
    noise = _fixed(0.0, signs_value=-1.0)
    out = flipout_linear(x, loc, weight, b, noise=noise)
    torch.testing.assert_close(out, x @ weight.T + b)
    assert noise.calls == [((4, 3), True), ((4, 5), True)]
    half = flipout_linear(x, loc, weight, b, noise=_fixed(0.0, signs_value=0.5))
    torch.testing.assert_close(half, x @ loc.T + b + 0.25 * (x @ (weight - loc).T))


@pytest.mark.parametrize("big", [False, True], ids=["autograd", "custom backward"])
def test_the_preactivation_std_and_its_gradient_are_autograds(big):
    """Small weights run autograd on the formula; from ``_CUSTOM_BACKWARD_MIN`` elements a
    hand-written backward: both give the formula's value and gradients."""
    out_features = _CUSTOM_BACKWARD_MIN // 4 + 1 if big else 5
    X = _r(3, 4)
    A = _r(4, out_features).abs().requires_grad_()
    b = _r(out_features).abs().requires_grad_()
    got = preactivation_std(X, A, b)
    want = (X.square() @ A.square() + b.square()).sqrt()
    torch.testing.assert_close(got, want)
    weights = _r(3, out_features)
    grads = torch.autograd.grad((got * weights).sum(), (A, b))
    expected = torch.autograd.grad((want * weights).sum(), (A, b))
    for g, e in zip(grads, expected, strict=True):
        torch.testing.assert_close(g, e)


def test_the_default_noise_is_normal_or_signs_from_the_given_generator_like_the_tensor():
    like = torch.zeros(1, dtype=torch.float64)
    signs = draw_noise(torch.Size((1000,)), like, True, torch.Generator().manual_seed(1))
    assert set(signs.unique().tolist()) == {-1.0, 1.0} and signs.dtype == torch.float64
    normals = draw_noise(torch.Size((1000,)), like, False, torch.Generator().manual_seed(1))
    # 1,000 standard normals: mean within 4 standard errors (0.13) of 0, std within 0.15 of 1
    assert abs(float(normals.mean())) < 0.13 and abs(float(normals.std()) - 1) < 0.15
    again = draw_noise(torch.Size((1000,)), like, False, torch.Generator().manual_seed(1))
    assert torch.equal(normals, again)
    state = torch.get_rng_state()  # drawn from the generator given, not the global stream
    for signs_too in (True, False):
        draw_noise(torch.Size((10,)), like, signs_too, torch.Generator().manual_seed(2))
    assert torch.equal(torch.get_rng_state(), state)
    for signs_too in (True, False):
        on_meta = draw_noise(torch.Size((3,)), torch.zeros(1, device="meta"), signs_too)
        assert on_meta.device.type == "meta"


def _conv_per_sample(x, weight, bias, conv):
    """``conv`` of every sample's inputs ``x[s]`` with one kernel, by torch's own ``conv2d``."""
    options = dict(stride=conv.stride, padding=conv.padding, dilation=conv.dilation)
    return torch.stack([torch.nn.functional.conv2d(xs, weight, bias, **options) for xs in x])


def test_the_conv_local_reparameterization_on_sampled_inputs_is_its_formula():
    """Inputs with a sample dim ``(S, N, C, H, W)`` (a later layer's, under particles) and one
    kernel: ``mean + eps * std`` with each sample's convolution of ``x`` and ``x^2``, the same
    standard normals drawn from the global stream."""
    from bnn_pyro.poutine.estimators import local_reparam_conv2d

    conv = torch.nn.Conv2d(2, 4, 3, padding=1)
    x, loc, scale = _r(2, 3, 2, 5, 5), _r(4, 2, 3, 3), _r(4, 2, 3, 3).abs()
    b_loc, b_scale = _r(4), _r(4).abs()
    torch.manual_seed(7)
    out = local_reparam_conv2d(x, loc, scale, b_loc, b_scale, conv)
    torch.manual_seed(7)
    eps = torch.randn(out.shape, dtype=torch.float64)
    mean = _conv_per_sample(x, loc, b_loc, conv)
    std = _conv_per_sample(x.square(), scale.square(), b_scale.square(), conv).sqrt()
    assert out.shape == (2, 3, 4, 5, 5)
    torch.testing.assert_close(out, mean + eps * std)


def test_conv_flipout_on_sampled_inputs_is_its_formula():
    """``mean + conv(x * s_in, W - W_mu) * s_out`` with each sample's and row's own signs, drawn
    from the global stream (inputs' signs first), per channel."""
    from bnn_pyro.poutine.estimators import flipout_conv2d

    conv = torch.nn.Conv2d(2, 4, 3, padding=1)
    x, loc, weight, b = _r(2, 3, 2, 5, 5), _r(4, 2, 3, 3), _r(4, 2, 3, 3), _r(4)
    torch.manual_seed(7)
    out = flipout_conv2d(x, loc, weight, b, conv)
    torch.manual_seed(7)
    s_in = torch.randint(0, 2, (2, 3, 2, 1, 1), dtype=torch.float64) * 2 - 1
    s_out = torch.randint(0, 2, (2, 3, 4, 1, 1), dtype=torch.float64) * 2 - 1
    mean = _conv_per_sample(x, loc, b, conv)
    torch.testing.assert_close(
        out, mean + _conv_per_sample(x * s_in, weight - loc, None, conv) * s_out
    )
