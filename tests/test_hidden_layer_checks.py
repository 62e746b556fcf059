"""``HiddenLayer``'s refusals (each with its whole message), its defaults, its batch shape with
sample dims on any argument, ``expand`` and where and in which dtype it draws its noise."""

import math

import pytest
import torch
import torch.nn.functional as F

from bnn_pyro.distributions import HiddenLayer
from bnn_pyro.poutine.estimators import preactivation_std


def _inputs(b=6, d=4, h=3):
    g = torch.Generator().manual_seed(1)
    X = torch.randn(b, d, generator=g)
    return X, torch.randn(d, h, generator=g), 0.2 + torch.rand(d, h, generator=g)


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
