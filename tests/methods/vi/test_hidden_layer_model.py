"""HiddenLayerBNN's Pyro model and its parts against independent computations: the net it
samples, the exact KL, the beta on the likelihood's latents, the guide of those latents, the
draws of ``predict``, and the constructor's defaults and refusals."""

import math

import pyro.poutine as poutine
import pytest
import torch
import torch.nn.functional as F

import bnn_pyro as bp
from bnn_pyro.methods.vi.hidden_layer import ROWS_PLATE, HiddenLayerBNN

#: A scale so small that the sampled pre-activations equal their means in float64 to 1e-12
#: (the noise is ``|h| * 1e-15 * eps``, with |h| and |eps| below 100 here).
TINY = 1e-15


def _quiet(bnn: HiddenLayerBNN) -> HiddenLayerBNN:
    """``bnn`` in float64 with every weight's posterior scale ``TINY``."""
    bnn.double()
    with torch.no_grad():
        for rho in bnn.rhos:
            rho.fill_(math.log(TINY))  # softplus(log t) = log(1 + t) = t to round-off
    return bnn


def test_the_model_samples_the_mlp_of_its_means_when_the_scales_vanish():
    """At (nearly) zero posterior scale every HiddenLayer site returns its mean, so the model's
    output is the plain MLP of the means, written out here with the biases in the last rows:
    ``tanh(tanh([x, 1] A0) ... ) A_last``. A missing ones column, or an activation dropped from a
    hidden layer, changes it."""
    torch.manual_seed(0)
    bnn = _quiet(HiddenLayerBNN(3, [5, 4], 2, bp.Categorical(), activation="tanh"))
    x = torch.randn(6, 3, dtype=torch.float64)
    out = bnn.model(x)
    a0, a1, a2 = (loc.detach() for loc in bnn.locs)
    h = torch.tanh(x @ a0[:3] + a0[3])
    h = torch.tanh(h @ a1[:5] + a1[5])
    torch.testing.assert_close(out, h @ a2[:4] + a2[4], rtol=0, atol=1e-12)


def test_the_model_without_a_kl_weight_counts_the_kl_once_per_data_set():
    """``kl_weight`` defaults to 1: a batch of 8 of 40 rows holds ``-KL`` exactly at the layer
    sites (``KL_factor = B / N`` times the plate's ``N / B``); ``kl_divergence`` is checked
    against the closed form separately."""
    torch.manual_seed(1)
    bnn = HiddenLayerBNN(3, [4], 1, bp.Gaussian(scale=0.5), init_scale=0.2).double()
    x = torch.randn(8, 3, dtype=torch.float64)
    trace = poutine.trace(bnn.model).get_trace(x, dataset_size=40)
    trace.compute_log_prob()
    layers = sum(float(trace.nodes[name]["log_prob_sum"]) for name in bnn.site_names)
    assert layers == pytest.approx(-float(bnn.kl_divergence()), rel=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_kl_divergence_is_the_closed_form_of_independent_normals(dtype):
    """``KL(N(m, s²) || N(0, p²)) = log(p / s) + (s² + m²) / (2 p²) - 1/2`` per weight, summed
    over every layer's matrix (biases included), in the model's dtype."""
    torch.manual_seed(2)
    bnn = HiddenLayerBNN(3, [4], 2, bp.Categorical(), prior_scale=0.7, init_scale=0.3).to(dtype)
    with torch.no_grad():
        for rho in bnn.rhos:
            rho.add_(0.5 * torch.randn_like(rho))  # a different scale per weight
    p = 0.7
    want = sum(
        (math.log(p) - s.log() + (s.square() + m.square()) / (2 * p**2) - 0.5).sum()
        for m, s in ((loc.detach().double(), F.softplus(rho.detach().double()))
                     for loc, rho in zip(bnn.locs, bnn.rhos, strict=True))
    )  # fmt: skip
    got = bnn.kl_divergence()
    assert got.dtype == dtype
    tolerance = 1e-12 if dtype == torch.float64 else 1e-5  # float32 round-off of ~40 terms
    assert float(got) == pytest.approx(float(want), rel=tolerance)


@pytest.mark.parametrize("kl_weight", [1.0, 0.25, 2.0])
def test_kl_weight_scales_the_likelihoods_latents_as_it_scales_the_layers(kl_weight):
    """A learned noise is a latent of the likelihood: beta multiplies its log-density too (the
    ``KLWeight`` handler), and nothing at ``kl_weight = 1``."""
    bnn = HiddenLayerBNN(3, [4], 1, bp.Gaussian(scale="learned"))
    x, y = torch.randn(5, 3), torch.randn(5, 1)
    trace = poutine.trace(bnn.model).get_trace(x, y, kl_weight=kl_weight)
    assert trace.nodes["likelihood.scale"]["scale"] == kl_weight
    assert trace.nodes["obs"]["scale"] == 1.0


def test_the_likelihoods_guide_starts_at_init_scale_under_its_own_names():
    """The guide of a learned noise starts at the model's ``init_scale`` and names its params
    ``likelihood_guide.*`` (what a user's own SVI loop finds in the param store)."""
    bnn = HiddenLayerBNN(3, [4], 1, bp.Gaussian(scale="learned"), init_scale=0.3)
    x, y = torch.randn(5, 3), torch.randn(5, 1)
    bnn.setup_guide(x, y)
    params = [n for n, s in poutine.trace(bnn.guide).get_trace(x, y).nodes.items()
              if s["type"] == "param"]  # fmt: skip
    assert params == [
        "likelihood_guide.loc.likelihood.scale",
        "likelihood_guide.rho.likelihood.scale",
    ]
    (rho,) = bnn.guide.rhos.values()
    torch.testing.assert_close(F.softplus(rho.detach()), torch.tensor([0.3]))


def test_predict_with_a_generator_draws_from_it_alone():
    """``predict(generator=g)`` draws the weights and the learned noise from ``g``: two
    generators seeded alike give the same samples whatever the global RNG did between."""
    X = torch.randn(32, 3)
    bnn = HiddenLayerBNN(3, [4], 1, bp.Gaussian(scale="learned"))
    bnn.fit(X, X.sum(-1), epochs=2, progress=False, seed=0)

    def draw(global_seed: int) -> torch.Tensor:
        torch.manual_seed(global_seed)
        g = torch.Generator().manual_seed(7)
        return bnn.predict(X[:4], num_samples=6, generator=g, return_samples=True,
                           include_noise=True)[2]  # fmt: skip

    torch.testing.assert_close(draw(1), draw(2), rtol=0, atol=0)


def test_the_model_and_the_draws_stay_on_the_rows_device_whatever_the_default_device():
    """The plate's subsample indices and the weight draws follow the model (CPU), not the
    default device (``meta`` stands in for a second device: a tensor made there would be
    ``meta``)."""
    bnn = HiddenLayerBNN(3, [4], 1, bp.Gaussian(scale=0.5))
    x = torch.randn(4, 3)
    with torch.device("meta"):
        trace = poutine.trace(bnn.model).get_trace(x, dataset_size=10)
        draws = bnn._draw_posterior(3, torch.Generator().manual_seed(0), x)
    assert trace.nodes[ROWS_PLATE]["value"].device.type == "cpu"
    assert all(v.device.type == "cpu" for v in draws.values())


def test_the_constructor_defaults():
    """A prior of scale 1 on every weight and 100 predictive samples unless asked."""
    bnn = HiddenLayerBNN(3, [4], 1, bp.Gaussian(scale=0.5))
    assert bnn.prior_scale == 1.0 and bnn.num_samples == 100


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(out_features=0), ValueError, r"^out_features must be an int >= 1"),
        (dict(num_samples=0), ValueError, r"^num_samples must be an int >= 1"),
        (dict(init_scale=0.0), ValueError, r"^init_scale must be a finite float > 0"),
        (dict(likelihood="gaussian"), TypeError,
         r"^likelihood must be a bnn_pyro\.likelihoods\.Likelihood \(e\.g\. Gaussian\(\)"),
    ],
)  # fmt: skip
def test_the_constructor_names_each_bad_argument(kwargs, error, message):
    args = dict(in_features=3, hidden_sizes=[4], out_features=1, likelihood=bp.Gaussian(0.5))
    with pytest.raises(error, match=message):
        HiddenLayerBNN(**{**args, **kwargs})


def test_from_net_passes_its_options_on():
    """``from_net`` reads the widths and activation from the net and the rest from its
    options."""
    net = bp.nn.mlp(3, [6], 1, "tanh")
    bnn = HiddenLayerBNN.from_net(net, bp.Gaussian(0.5), prior_scale=0.3, num_samples=7)
    assert (bnn.prior_scale, bnn.num_samples, bnn.activation_name) == (0.3, 7, "tanh")


def test_a_float64_model_loads_back_in_float64(tmp_path):
    X = torch.randn(16, 3, dtype=torch.float64)
    bnn = HiddenLayerBNN(3, [4], 1, bp.Gaussian(scale=0.5)).double()
    bnn.fit(X, X.sum(-1), epochs=1, progress=False, seed=0)
    bnn.save(tmp_path / "hl.pt")
    same = HiddenLayerBNN.load(tmp_path / "hl.pt")
    assert all(p.dtype == torch.float64 for p in same.parameters())


def test_saving_a_callable_activation_is_refused_with_the_fix():
    bnn = HiddenLayerBNN(3, [4], 1, bp.Gaussian(scale=0.5), activation=torch.sin)
    with pytest.raises(ValueError, match=r"^only a model built with a named activation"):
        bnn.checkpoint_config()
