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


def test_the_custom_backward_floor_and_a_bias_that_broadcasts_up_are_autograds(monkeypatch):
    """The hand-written backward against autograd on the clamped formula, where they can part:
    rows whose variance underflows (``1e-158``: ``x^2`` is subnormal, the variance is clamped to
    ``tiny`` and autograd's gradient is 0), rows with a small but normal std (``1e-25``: a
    true gradient of order 1, which a floor read in the wrong dtype would zero), and a bias
    with more dims than the matmul ``(2, 1, H)`` against ``(3, H)``. The floor's cache is
    emptied first, so the first backward in each dtype computes it."""
    from bnn_pyro.poutine import estimators

    monkeypatch.setattr(estimators, "_FLOORS", {})
    out_features = _CUSTOM_BACKWARD_MIN // 4 + 1
    X = _r(4, 4)
    X[1], X[2], X[3] = 0.0, 1e-158, 1e-25
    X.requires_grad_()
    A = _r(4, out_features).abs().requires_grad_()
    got = preactivation_std(X, A)
    want = (X.square() @ A.square()).clamp_min(torch.finfo(X.dtype).tiny).sqrt()
    torch.testing.assert_close(got, want)
    weights = _r(4, out_features)
    grads = torch.autograd.grad((got * weights).sum(), (X, A))
    expected = torch.autograd.grad((want * weights).sum(), (X, A))
    assert float(expected[0][3].abs().max()) > 1e-3  # the 1e-25 row's gradient is not tiny
    for g, e in zip(grads, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-7, atol=1e-12)
    b = _r(2, 1, out_features).abs().requires_grad_()
    got = preactivation_std(X, A, b)
    want = (X.square() @ A.square() + b.square()).sqrt()
    assert got.shape == (2, 4, out_features)
    torch.testing.assert_close(got, want)
    grads = torch.autograd.grad((got * _r(2, 4, out_features)).sum(), (X, A, b))
    assert all(bool(torch.isfinite(g).all()) for g in grads)


def _leading_one(t):
    return None if t is None else t.unsqueeze(0)


@pytest.mark.parametrize("conv", [False, True], ids=["linear", "conv"])
@pytest.mark.parametrize("which", range(4), ids=["loc", "scale", "bias_loc", "bias_scale"])
def test_a_parameter_with_a_leading_size_one_dim_is_its_storage(conv, which):
    """A leading size-1 dim on a parameter is an expanded guide parameter's storage (as
    ``batched_linear`` reads it): the draw equals the plain parameter's, value and shape, for
    the same global noise."""
    from bnn_pyro.poutine.estimators import local_reparam_conv2d

    layer = torch.nn.Conv2d(2, 3, 3)
    shape = (3, 2, 3, 3) if conv else (3, 2)
    x = _r(4, 2, 5, 5) if conv else _r(4, 2)
    params = [_r(*shape), _r(*shape).abs(), _r(3), _r(3).abs()]
    moved = [_leading_one(p) if i == which else p for i, p in enumerate(params)]

    def draw(p):
        torch.manual_seed(3)
        if conv:
            return local_reparam_conv2d(x, *p, layer)
        return local_reparam_linear(x, *p)

    plain, got = draw(params), draw(moved)
    assert got.shape == plain.shape == ((4, 3, 3, 3) if conv else (4, 3))
    torch.testing.assert_close(got, plain)


def test_noise_spans_every_sample_dim_of_the_std_and_of_the_inputs():
    """Fresh noise for every entry of the output: a bias scale with a sample dim (``(S, out)``,
    the mean without one) and inputs with a dim before the sample dims (``(2, S, N, in)``, equal
    rows) each give draws that differ where their means and stds are equal."""
    x, loc, one = _r(4, 3), _r(5, 3).zero_(), _r(5, 3).abs()
    out = local_reparam_linear(x, loc, loc, loc[:, 0], torch.ones(2, 5, dtype=torch.float64))
    assert out.shape == (2, 4, 5) and not torch.equal(out[0], out[1])
    x2 = _r(3, 4, 3).expand(2, 3, 4, 3)
    out = local_reparam_linear(x2, loc, one, sample_shape=torch.Size([3]))
    assert out.shape == (2, 3, 4, 5) and not torch.equal(out[0], out[1])


def test_the_conv_draw_keeps_the_sample_dims_of_inputs_and_particles():
    """Sampled inputs ``(S, N, C, H, W)`` with ``sample_shape (S,)``: one draw per sample,
    ``(S, N, out, H', W')``."""
    from bnn_pyro.poutine.estimators import local_reparam_conv2d

    layer = torch.nn.Conv2d(2, 4, 3)
    x, loc, scale = _r(3, 2, 2, 5, 5), _r(4, 2, 3, 3), _r(4, 2, 3, 3).abs()
    out = local_reparam_conv2d(x, loc, scale, None, None, layer, torch.Size([3]))
    assert out.shape == (3, 2, 4, 3, 3)


def test_conv_flipout_draws_signs_per_sample_of_the_kernel():
    """A kernel drawn per sample ``(S, out, C, kh, kw)`` on unsampled inputs: each sample has
    its own signs, so equal perturbations still give different outputs (equal signs for all
    3 x 2 x 4 output channels of two samples: probability 2^-8 per input sign pattern)."""
    from bnn_pyro.poutine.estimators import flipout_conv2d

    layer = torch.nn.Conv2d(2, 4, 3)
    x, loc = _r(2, 2, 5, 5), _r(4, 2, 3, 3)
    weight = (loc + _r(4, 2, 3, 3)).expand(3, 4, 2, 3, 3).clone()
    torch.manual_seed(0)
    out = flipout_conv2d(x, loc, weight, None, layer)
    assert out.shape == (3, 2, 4, 3, 3)
    assert not torch.equal(out[0], out[1]) and not torch.equal(out[1], out[2])
