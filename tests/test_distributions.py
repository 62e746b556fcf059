"""HiddenLayer against pyro.contrib.bnn.HiddenLayer, the analytic moments and a hand-made ELBO;
its refusals (each whole message), defaults, batch shapes, expand, and the noise's dtype and
device."""

import math
import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch
import torch.nn.functional as F
from pyro.contrib.bnn import HiddenLayer as PyroHiddenLayer
from pyro.infer import SVI, Predictive, Trace_ELBO

from bnn_pyro.distributions import HiddenLayer
from bnn_pyro.poutine.estimators import _PreactivationStd, preactivation_std


@pytest.fixture(autouse=True)
def _seeded():
    state = torch.get_rng_state()
    torch.manual_seed(0)
    yield
    torch.set_rng_state(state)


def _inputs(b=6, d=4, h=3):
    g = torch.Generator().manual_seed(1)
    X = torch.randn(b, d, generator=g)
    return X, torch.randn(d, h, generator=g), 0.2 + torch.rand(d, h, generator=g)


def identity(a):
    return a


# ------------------------------------------------------------------ against Pyro's HiddenLayer
@pytest.mark.parametrize("weight_space", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_same_draw_as_pyro_under_a_fixed_seed(weight_space, bias):
    X, m, s = _inputs()
    kwargs = dict(include_hidden_bias=bias, weight_space_sampling=weight_space)
    torch.manual_seed(3)
    theirs = PyroHiddenLayer(X, m, s, **kwargs).rsample()
    torch.manual_seed(3)
    ours = HiddenLayer(X, m, s, **kwargs).rsample()
    torch.testing.assert_close(ours, theirs)  # same noise: only the std's rounding differs


@pytest.mark.parametrize("prior", [1.0, 0.5, "tensor"])
def test_same_kl_as_pyro_and_the_closed_form(prior):
    X, m, s = _inputs()
    p = torch.full_like(m, 0.5) if prior == "tensor" else prior
    ours = HiddenLayer(X, m, s, A_prior_scale=p).KL
    torch.testing.assert_close(ours, PyroHiddenLayer(X, m, s, A_prior_scale=p).KL)
    q, prior_dist = dist.Normal(m, s), dist.Normal(torch.zeros_like(m), torch.as_tensor(p))
    torch.testing.assert_close(ours, torch.distributions.kl_divergence(q, prior_dist).sum())


def test_moments_match_pyro_and_the_analytic_ones():
    X, m, s = _inputs()
    n = 20000
    kw = dict(non_linearity=identity, include_hidden_bias=False)
    ours = HiddenLayer(X, m, s, **kw).rsample((n,))
    theirs = PyroHiddenLayer(X, m, s, weight_space_sampling=True, **kw).rsample((n,))
    mean, std = X @ m, (X.square() @ s.square()).sqrt()
    # A sample mean of n Gaussian draws has standard error std / sqrt(n), a sample std about
    # std / sqrt(2 n); 5 standard errors: a false alarm has probability < 1e-5 over 18 entries.
    for draws in (ours, theirs):
        assert ((draws.mean(0) - mean).abs() < 5 * std / math.sqrt(n)).all()
        assert ((draws.std(0) - std).abs() < 5 * std / math.sqrt(2 * n)).all()
    # the two samplers against each other: a difference of two such means has sqrt(2) x the error
    assert ((ours.mean(0) - theirs.mean(0)).abs() < 5 * std * math.sqrt(2 / n)).all()


# ------------------------------------------------------------------ shapes and log_prob
def test_shapes_and_log_prob_sums_to_minus_kl_factor_times_kl():
    X, m, s = _inputs(b=6, d=4, h=3)
    layer = HiddenLayer(X, m, s, KL_factor=0.25)
    assert layer.batch_shape == (6,) and layer.event_shape == (4,)
    value = layer.rsample((2,))
    assert value.shape == (2, 6, 4)
    assert bool((value[..., -1] == 1).all())  # the ones column
    log_p = layer.log_prob(value)
    assert log_p.shape == (2, 6)
    torch.testing.assert_close(log_p.sum(-1), (-0.25 * layer.KL).expand(2))


def test_leading_sample_dims_on_inputs_and_weights():
    X, m, s = _inputs(b=6, d=4, h=3)
    layer = HiddenLayer(X.expand(5, 6, 4), m.expand(5, 4, 3), s)
    assert layer.batch_shape == (5, 6)
    assert layer.rsample().shape == (5, 6, 4)
    assert layer.KL.shape == (5,)
    per_weight = HiddenLayer(X, m.expand(7, 4, 3), s, weight_space_sampling=True)
    assert per_weight.rsample((2,)).shape == (2, 7, 6, 4)
    expanded = layer.expand((3, 5, 6))
    assert expanded.rsample().shape == (3, 5, 6, 4)
    torch.testing.assert_close(expanded.log_prob(expanded.rsample())[0], layer.log_prob(X))


def test_zero_input_rows_give_finite_gradients():
    X, m, s = _inputs()
    X[0] = 0.0
    s.requires_grad_(True)
    HiddenLayer(X, m, s, include_hidden_bias=False).rsample().sum().backward()
    assert bool(torch.isfinite(s.grad).all())


def test_preactivation_std_custom_backward_matches_autograd():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(2, 5, 7, dtype=torch.double, generator=g, requires_grad=True)
    S = torch.rand(7, 4, dtype=torch.double, generator=g, requires_grad=True)
    b = torch.rand(4, dtype=torch.double, generator=g, requires_grad=True)
    assert torch.autograd.gradcheck(_PreactivationStd.apply, (X, S, b))
    # the public function switches to the custom backward for large weights: same numbers
    X = torch.randn(8, 300, generator=g, requires_grad=True)
    S = torch.rand(300, 300, generator=g, requires_grad=True)
    out = preactivation_std(X, S)
    grads = torch.autograd.grad(out.sum(), (X, S))
    plain = (X.square() @ S.square()).sqrt()
    torch.testing.assert_close(out, plain)
    for ours, ref in zip(grads, torch.autograd.grad(plain.sum(), (X, S)), strict=True):
        torch.testing.assert_close(ours, ref)


# ------------------------------------------------------------------ Pyro: plate, validation
def _regression(n=64, d=3, noise=0.5):
    g = torch.Generator().manual_seed(2)
    X = torch.randn(n, d, generator=g)
    y = X @ torch.tensor([1.0, -2.0, 0.5]) + 0.3 + noise * torch.randn(n, generator=g)
    return torch.cat([X, torch.ones(n, 1)], -1), y


class _Linear:
    """The documented usage: learnable layer in the model, inside the data plate; empty guide."""

    def __init__(self, d, noise, rho=-3.0):
        self.loc = torch.zeros(d, 1, requires_grad=True)
        self.rho = torch.full((d, 1), rho, requires_grad=True)
        self.noise = noise

    def model(self, X, y=None, n=None):
        b = X.shape[0]
        n = n or b
        subsample = None if n == b else torch.arange(b)
        with pyro.plate("data", n, subsample=subsample):
            layer = HiddenLayer(
                X, self.loc, F.softplus(self.rho), identity, b / n, include_hidden_bias=False
            )
            f = pyro.sample("f", layer).squeeze(-1)
            return pyro.sample("y", dist.Normal(f, self.noise), obs=y)

    def guide(self, X, y=None, n=None):
        pass


def test_inside_a_plate_under_validation_and_predictive():
    X, y = _regression()
    lin = _Linear(4, 0.5)
    with pyro.validation_enabled(True), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "vars in model but not guide": by design
        Trace_ELBO().loss(lin.model, lin.guide, X[:16], y[:16], 64)
        samples = Predictive(lin.model, guide=lin.guide, num_samples=30, parallel=True)(X)
    assert samples["f"].shape == (30, 64, 1) and samples["y"].shape == (30, 64)
    with pytest.raises(Exception, match="HiddenLayer|batch_shape|shape"):
        with pyro.plate("data", 64):  # Pyro's own layer has no batch_shape (pyro issue #2937)
            pyro.sample("f", PyroHiddenLayer(X, lin.loc, F.softplus(lin.rho)))


def test_loss_is_the_negative_elbo_computed_by_hand():
    X, y = _regression()
    lin = _Linear(4, 0.5, rho=-1.0)
    n, b = 64, 16
    xb, yb = X[:b], y[:b]
    scale = F.softplus(lin.rho)
    kl = torch.distributions.kl_divergence(dist.Normal(lin.loc, scale), dist.Normal(0.0, 1.0)).sum()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        torch.manual_seed(5)
        loss = Trace_ELBO().loss(lin.model, lin.guide, xb, yb, n)
        # the same draw by hand: pre-activations N(X m, X² s²), likelihood scaled by N / B
        torch.manual_seed(5)
        f = HiddenLayer(xb, lin.loc, scale, identity, include_hidden_bias=False).rsample()
        by_hand = -(n / b * dist.Normal(f.squeeze(-1), 0.5).log_prob(yb).sum() - kl)
        assert loss == pytest.approx(float(by_hand), rel=1e-5)
        # in expectation: E_q log N(y; X w, σ²) = log N(y; X m, σ²) - X² s² / (2 σ²), exact
        mean, var = (xb @ lin.loc).squeeze(-1), (xb.square() @ scale.square()).squeeze(-1)
        expected = dist.Normal(mean, 0.5).log_prob(yb) - var / (2 * 0.25)
        neg_elbo = float(-(n / b * expected.sum() - kl))
        losses = torch.tensor(
            [Trace_ELBO().loss(lin.model, lin.guide, xb, yb, n) for _ in range(400)]
        )
    # 5 standard errors of the mean of 400 independent single-draw losses
    assert abs(float(losses.mean()) - neg_elbo) < 5 * float(losses.std()) / 20


def test_kl_sign_documented_usage_keeps_scales_at_the_mean_field_optimum():
    X, y = _regression(n=64, noise=0.5)
    lin = _Linear(4, 0.5)
    # the layer's tensors are not pyro.param sites: optimise them with a torch optimiser
    opt = torch.optim.Adam([lin.loc, lin.rho], lr=0.05)
    elbo = Trace_ELBO(num_particles=8, vectorize_particles=True, max_plate_nesting=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for _ in range(600):
            opt.zero_grad()
            elbo.differentiable_loss(lin.model, lin.guide, X, y).backward()
            opt.step()
    # For a linear-Gaussian model the optimal mean-field scales are 1 / sqrt(diag(precision)),
    # precision = XᵀX / σ² + I (prior scale 1): far from zero, known in closed form.
    optimum = (X.T @ X / 0.25 + torch.eye(4)).diagonal().rsqrt()
    learned = F.softplus(lin.rho.detach()).squeeze(-1)
    torch.testing.assert_close(learned, optimum, rtol=0.25, atol=0.0)


def test_learnable_layer_in_the_guide_fails_loudly():
    X, y = _regression()
    loc = torch.zeros(4, 1, requires_grad=True)

    def model(X, y):
        with pyro.plate("data", len(X)):
            f = pyro.sample("f", HiddenLayer(X, torch.zeros(4, 1), torch.ones(4, 1), identity))
            pyro.sample("y", dist.Normal(f[..., 0], 1.0), obs=y)

    def guide(X, y):  # the usage copied around the web: it would add the KL to the ELBO
        with pyro.plate("data", len(X)):
            pyro.sample("f", HiddenLayer(X, loc, torch.full((4, 1), 0.1), identity))

    svi = SVI(model, guide, pyro.optim.Adam({"lr": 0.01}), Trace_ELBO())
    with pytest.raises(ValueError, match="sampled in the guide"):
        svi.step(X, y)


# ------------------------------------------------------------------ argument errors
def test_bad_expand_raises():
    X, m, s = _inputs()
    with pytest.raises(ValueError, match="cannot expand"):
        HiddenLayer(X, m, s).expand((7,))


# ------------------------------------------------------------------ refusals, defaults, shapes,
# expand and where the noise is drawn
X0, M0, S0 = _inputs()
DOUBLE = torch.ones(4, 3, dtype=torch.double)


@pytest.mark.parametrize(
    "change, error, message",
    [
        (dict(X=[[1.0]]), TypeError, "X must be a torch.Tensor (*S, B, D), got list"),
        (dict(X=torch.ones(6, 4, dtype=torch.long)), TypeError,
         "X must be a floating-point tensor, got dtype torch.int64"),
        (dict(X=torch.ones(4)), ValueError, "X must have shape (*S, B, D), got (4,)"),
        (dict(A_mean=[1.0]), TypeError, "A_mean must be a torch.Tensor (*S, D, H), got list"),
        (dict(A_mean=torch.ones(4)), ValueError, "A_mean must have shape (*S, D, H), got (4,)"),
        (dict(A_scale=[1.0]), TypeError, "A_scale must be a torch.Tensor (*S, D, H), got list"),
        (dict(A_scale=torch.ones(4)), ValueError, "A_scale must have shape (*S, D, H), got (4,)"),
        # X with a sample dim: D is its last size (4), not its first or second (2, 6)
        (dict(X=torch.ones(2, 6, 4), A_mean=torch.ones(5, 3)), ValueError,
         "A_mean must have one row per input feature: X has D=4 columns, A_mean has shape "
         "(5, 3) (expected (*S, 4, H))"),
        (dict(A_scale=torch.ones(4, 2)), ValueError,
         "A_scale must have the shape of A_mean in its last two dims, got (4, 2) and (4, 3)"),
        (dict(A_scale=DOUBLE), TypeError,
         "X, A_mean and A_scale must share a dtype, got torch.float32, torch.float32, "
         "torch.float64"),
        (dict(A_mean=torch.ones(2, 4, 3), X=torch.ones(3, 6, 4)), ValueError,
         "the leading (sample) dims of X, A_mean and A_scale must broadcast, got X (3, 6, 4), "
         "A_mean (2, 4, 3), A_scale (4, 3)"),
        (dict(non_linearity="relu"), TypeError, "non_linearity must be callable, got str"),
        (dict(KL_factor=True), TypeError, "KL_factor must be a float, got bool"),
        (dict(KL_factor="1"), TypeError, "KL_factor must be a float, got str"),
        (dict(KL_factor=-1.0), ValueError, "KL_factor must be a finite float >= 0, got -1.0"),
        (dict(KL_factor=math.inf), ValueError, "KL_factor must be a finite float >= 0, got inf"),
        (dict(A_prior_scale=0.0), ValueError, "A_prior_scale must be positive and finite, got 0.0"),
        (dict(A_prior_scale="1"), TypeError,
         "A_prior_scale must be a positive float or a tensor, got str"),
        (dict(A_prior_scale=torch.ones(5, 3)), ValueError,
         "A_prior_scale must broadcast to (D, H) = (4, 3), got shape (5, 3)"),
        # with a sample dim on the weights, (D, H) is still their last two sizes
        (dict(A_mean=torch.ones(2, 4, 3), A_prior_scale=torch.ones(5, 3)), ValueError,
         "A_prior_scale must broadcast to (D, H) = (4, 3), got shape (5, 3)"),
        (dict(A_prior_scale=torch.ones(1, 1, 1)), ValueError,
         "A_prior_scale must be a float or a (D, H)-broadcastable tensor"),
        # a prior with a dim of its own before (D, H): refused as such, not as one that fails
        # to broadcast against the weights' sample dims
        (dict(A_mean=torch.ones(2, 4, 3), A_prior_scale=torch.ones(3, 4, 3)), ValueError,
         "A_prior_scale must be a float or a (D, H)-broadcastable tensor"),
        (dict(A_prior_scale=-torch.ones(3)), ValueError,
         "A_prior_scale must be positive everywhere"),
        (dict(A_prior_scale=torch.tensor([1.0, 0.0, 1.0])), ValueError,
         "A_prior_scale must be positive everywhere"),
        (dict(include_hidden_bias=1), TypeError, "include_hidden_bias must be a bool, got int (1)"),
        (dict(weight_space_sampling=None), TypeError,
         "weight_space_sampling must be a bool, got NoneType (None)"),
    ],
)  # fmt: skip
def test_bad_arguments_are_refused_with_a_message_naming_them(change, error, message):
    kwargs = dict(X=X0, A_mean=M0, A_scale=S0, validate_args=True)
    kwargs.update(change)
    with pytest.raises(error) as caught:
        HiddenLayer(**kwargs)
    assert str(caught.value) == message


def test_a_non_positive_scale_is_refused_under_validation_only():
    """``A_scale`` is checked by the distribution's constraint when validation is on; with
    ``validate_args=False`` the layer builds (as torch's distributions do)."""
    with pytest.raises(ValueError, match=r"^Expected parameter A_scale"):
        HiddenLayer(X0, M0, torch.zeros(4, 3), validate_args=True)
    assert HiddenLayer(X0, M0, torch.zeros(4, 3), validate_args=False).batch_shape == (6,)


def test_the_defaults_relu_kl_factor_1_and_local_noise():
    """Defaults: ReLU, ``KL_factor = 1`` (the rows' log-densities sum to ``-KL``), a KL
    factor of 0 accepted (a KL warm-up's start), and noise drawn per row (two equal rows get
    different pre-activations; weight-space sampling would give them the same)."""
    layer = HiddenLayer(X0, M0, S0, include_hidden_bias=False)
    value = layer.rsample()
    assert bool((value >= 0).all()) and bool((value == 0).any())  # ReLU's zeros
    torch.testing.assert_close(layer.log_prob(value).sum(), -layer.KL)
    warm_up = HiddenLayer(X0, M0, S0, KL_factor=0.0, include_hidden_bias=False)
    assert float(warm_up.log_prob(value).abs().sum()) == 0.0
    twins = HiddenLayer(X0[:1].expand(2, 4), M0, S0, non_linearity=lambda a: a)
    draw = twins.rsample()
    assert not torch.equal(draw[0], draw[1])


@pytest.mark.parametrize(
    "x_shape, mean_shape, scale_shape, batch",
    [
        ((6, 4), (4, 3), (2, 4, 3), (2, 6)),  # sample dims on the scales alone
        ((6, 4), (2, 4, 3), (2, 4, 3), (2, 6)),  # on both weights, not on X
        ((2, 6, 4), (4, 3), (4, 3), (2, 6)),  # on X alone
    ],
)
def test_the_batch_shape_holds_every_arguments_sample_dims(x_shape, mean_shape, scale_shape, batch):
    """``batch_shape = broadcast(X.shape[:-1], A_mean.shape[:-2] + (1,), A_scale.shape[:-2] +
    (1,))``, the shape its draws and log-densities have before the event dim."""
    X, m, s = X0.expand(x_shape), M0.expand(mean_shape), S0.expand(scale_shape)
    layer = HiddenLayer(X, m, s)
    assert layer.batch_shape == batch
    assert layer.rsample().shape == (*batch, 4)


def test_with_sample_dims_on_x_the_kl_counts_the_weights_d_by_h():
    """The KL (the float-prior path counts ``D * H`` weights) is the same whatever leading dims
    X carries: ``D`` is X's last size."""
    flat = HiddenLayer(X0, M0, S0, A_prior_scale=0.7).KL
    stacked = HiddenLayer(X0.expand(2, 6, 4), M0, S0, A_prior_scale=0.7).KL
    torch.testing.assert_close(stacked, flat)


def test_a_subclass_expands_into_its_own_instance():
    """``expand`` builds its copy in the ``_instance`` a subclass hands it (torch's protocol),
    keeping the subclass and its own attributes."""

    class Tagged(HiddenLayer):
        def __init__(self, *args, tag="t", **kwargs):  # noqa: ANN002, ANN003
            super().__init__(*args, **kwargs)
            self.tag = tag

        def expand(self, batch_shape, _instance=None):  # noqa: ANN001, ANN202
            new = self._get_checked_instance(Tagged, _instance)
            return super().expand(batch_shape, _instance=new)

    expanded = Tagged(X0, M0, S0, tag="mine").expand((3, 6))
    assert type(expanded) is Tagged and expanded.tag == "mine" and expanded.batch_shape == (3, 6)


def test_expand_keeps_the_validation_setting():
    """An expanded layer validates as the original does: a validating one checks the values
    it scores; one built with ``validate_args=False`` (here with a zero scale the constraint
    would refuse) expands without checking."""
    checked = HiddenLayer(X0, M0, S0, validate_args=True).expand((2, 6))
    with pytest.raises(ValueError, match="shape"):
        checked.log_prob(torch.zeros(5))
    unchecked = HiddenLayer(X0, M0, torch.zeros(4, 3), validate_args=False).expand((2, 6))
    assert unchecked.batch_shape == (2, 6)


@pytest.mark.parametrize("weight_space", [False, True])
def test_a_float64_layer_draws_float64_noise(weight_space):
    """The noise is drawn in the layer's dtype: under one seed, the draw is the mean plus that
    float64 noise times the sd, as written out here (a float32 draw cast up differs)."""
    X, m, s = (t.double() for t in (X0, M0, S0))
    layer = HiddenLayer(X, m, s, non_linearity=lambda a: a, include_hidden_bias=False,
                        weight_space_sampling=weight_space)  # fmt: skip
    torch.manual_seed(3)
    got = layer.rsample()
    torch.manual_seed(3)
    if weight_space:
        want = X @ (m + torch.randn(4, 3, dtype=torch.float64) * s)
    else:
        want = X @ m + torch.randn(6, 3, dtype=torch.float64) * preactivation_std(X, s)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("weight_space", [False, True])
def test_the_noise_is_drawn_on_the_inputs_device_whatever_the_default_device(weight_space):
    """Under a ``meta`` default device (a stand-in for a second device) the CPU layer's draw
    is the same CPU tensor as outside it: noise made on the default device would be ``meta``."""
    layer = HiddenLayer(X0, M0, S0, weight_space_sampling=weight_space)
    torch.manual_seed(4)
    want = layer.rsample()
    torch.manual_seed(4)
    with torch.device("meta"):
        got = layer.rsample()
    assert got.device.type == "cpu"
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_relu_is_applied_after_the_noise():
    """The default non-linearity acts on the sampled pre-activations: with the noise fixed by
    the seed, the draw is ``relu(mean + eps * sd)`` and its ones column."""
    torch.manual_seed(5)
    got = HiddenLayer(X0, M0, S0).rsample()
    torch.manual_seed(5)
    pre = X0 @ M0 + torch.randn(6, 3) * preactivation_std(X0, S0)
    torch.testing.assert_close(got, F.pad(F.relu(pre), (0, 1), value=1.0))
