"""Device placement of the methods' internals, checked without a GPU (``meta`` stands in).

A tensor made without the right device is a bug only on a machine with two devices: on a GPU
it is a CPU tensor next to ``cuda:0`` tensors ("Expected all tensors to be on the same
device"). Two stand-ins show it on the CPU:

* **the default device.** Under ``with torch.device("meta")`` a factory given no device (or
  ``device=None``) makes a ``meta`` tensor, while one given its input's device makes a CPU
  tensor. A function fed CPU inputs under that context must give the same CPU numbers as
  outside it: a factory that forgot its device yields ``meta`` (or fails to mix with the CPU
  inputs).
* **a second device.** ``meta`` tensors carry shapes and dtypes but no values: a function that
  only arranges tensors can run on them, and what it returns must be on ``meta`` too.

The static guard (``test_device_guards.py``) reads the source for factories without a device;
these run the code, so they also catch a ``.to(...)`` that is dropped.
"""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import bnn_pyro as bp
from bnn_pyro.guides.mean_field import MeanFieldNormalGuide
from bnn_pyro.methods import LaplaceApproximation
from bnn_pyro.methods.laplace import curvature as curvature_module
from bnn_pyro.methods.sgmcmc.samplers import standard_normal

META = torch.device("meta")


def _on_cpu_under_meta(fn):  # noqa: ANN001, ANN202
    """``fn()`` under a ``meta`` default device."""
    with torch.device("meta"):
        return fn()


# ---------------------------------------------------------------------- SG-MCMC
def test_standard_normal_draws_on_the_device_of_like_whatever_the_default_device():
    """The draws follow ``like`` (CPU), not the default device: the same numbers as the same
    generators give outside the ``meta`` context (both the one-generator and the per-chain
    form)."""
    like = torch.zeros(2, 3, dtype=torch.float64)
    expected_one = standard_normal(like, torch.Generator().manual_seed(4))
    expected_stack = standard_normal(like, [torch.Generator().manual_seed(s) for s in (5, 6)])
    one = _on_cpu_under_meta(lambda: standard_normal(like, torch.Generator().manual_seed(4)))
    stack = _on_cpu_under_meta(
        lambda: standard_normal(like, [torch.Generator().manual_seed(s) for s in (5, 6)])
    )
    for got, want in ((one, expected_one), (stack, expected_stack)):
        assert got.device.type == "cpu" and got.dtype == torch.float64
        assert torch.equal(got, want)


def test_the_measured_steps_start_vector_is_on_theta_s_device():
    """``_spread(theta)``: ``cos(φ k + 1)`` (φ the golden angle 2.399963) on ``theta``'s device
    and dtype, under a ``meta`` default device as outside it."""
    X = torch.randn(16, 2, generator=torch.Generator().manual_seed(0))
    m = bp.make("sghmc", bp.nn.mlp(2, [], 1), bp.Gaussian(scale=0.1))
    step = m.start_run(X, X.sum(-1, keepdim=True), steps=8, lr=None)
    theta = torch.zeros(2, 4, dtype=torch.float64)
    got = _on_cpu_under_meta(lambda: step._spread(theta))
    k = torch.arange(4, dtype=torch.float64)
    assert got.device.type == "cpu"
    torch.testing.assert_close(got, torch.cos(2.399963 * k + 1.0).expand(2, 4))


def test_a_potential_s_flat_coordinates_are_on_its_sites_device():
    """``flat({"w": [..]})`` puts a plain list on the initial value's device (CPU here), not on
    the default device: the identity transform of a real site gives the list back."""

    def model(x, y=None, dataset_size=None):  # noqa: ANN001, ANN202
        w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
        with pyro.plate("data", dataset_size or len(x), subsample=torch.arange(len(x))):
            return pyro.sample("obs", dist.Normal(x @ w, 1.0), obs=y)

    from bnn_pyro.methods.sgmcmc.potential import PyroPotential

    potential = PyroPotential(model, torch.ones(1, 2), torch.zeros(1))
    got = _on_cpu_under_meta(lambda: potential.flat({"w": [0.25, -1.5]}))
    assert got.device.type == "cpu"
    assert got.tolist() == [0.25, -1.5]


# ---------------------------------------------------------------------- guides, likelihoods
def test_the_mean_field_guide_puts_init_loc_on_the_site_s_device():
    """A site on ``meta``: ``init_loc`` given as a list becomes a ``meta`` loc (and scale), the
    site's device, not the CPU."""

    def model():  # noqa: ANN202
        loc = torch.zeros(2, device=META)
        pyro.sample("w", dist.Normal(loc, 1.0, validate_args=False).to_event(1))

    guide = MeanFieldNormalGuide(model, init_loc={"w": [0.5, -0.5]}, init_scale=0.1)
    guide.setup()
    assert guide.locs["w"].device == META and guide.rhos["w"].device == META
    assert guide.locs["w"].shape == (2,) and guide.locs["w"].dtype == torch.float32


def test_the_learned_noise_prior_is_on_the_outputs_device():
    """``noise_prior(f)`` for ``meta`` outputs: a prior on ``meta``, as ``f`` (its draws are
    ``meta``; argument checks, which read values, are off)."""
    with pyro.validation_enabled(False):
        prior = bp.Gaussian(scale="learned").noise_prior(torch.zeros(5, 2, device=META))
        draw = prior.sample()
    assert draw.device == META and draw.shape == (2,) and prior.event_shape == (2,)


# ---------------------------------------------------------------------- Laplace
def _laplace(structure: str, prior_precision: float | tuple = 1.0) -> LaplaceApproximation:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(24, 3, generator=g, dtype=torch.float64)
    y = x[:, :1] - 0.5 * x[:, 1:2] + 0.1 * torch.randn(24, 1, generator=g, dtype=torch.float64)
    torch.manual_seed(0)
    net = bp.nn.mlp(3, [4], 1).double()
    la = LaplaceApproximation(
        net, "regression", hessian="ggn", hessian_structure=structure, noise_scale=0.5,
        prior_precision=prior_precision,
    )  # fmt: skip
    la.fit(DataLoader(TensorDataset(x, y), batch_size=12))
    return la


@pytest.mark.parametrize("structure", ["diag", "full", "kron"])
def test_posterior_samples_are_on_the_mean_s_device(structure):
    """``structure.sample``: the same seeded draws under a ``meta`` default device as outside
    it, on the CPU where the mean is (the normal draws follow the mean)."""
    la = _laplace(structure)
    mean, h = la._require_fit()
    torch.manual_seed(3)
    expected = la.structure.sample(mean, h, 2.0, 5)
    torch.manual_seed(3)
    got = _on_cpu_under_meta(lambda: la.structure.sample(mean, h, 2.0, 5))
    assert got.device.type == "cpu" and torch.equal(got, expected)


@pytest.mark.parametrize("structure", ["full", "kron"])
def test_the_posterior_precision_adds_lambda_on_the_curvature_s_device(structure):
    """``precision(h, λ)`` adds ``λ I`` on ``h``'s device: the same matrices under a ``meta``
    default device as outside it."""
    la = _laplace(structure)
    h = la._require_fit()[1]
    expected = la.structure.precision(h, 2.0)
    got = _on_cpu_under_meta(lambda: la.structure.precision(h, 2.0))
    if isinstance(expected, dict):
        assert got.keys() == expected.keys()
        got, expected = list(got.values()), list(expected.values())
    else:
        got, expected = [got], [expected]
    for a, b in zip(got, expected, strict=True):
        assert a.device.type == "cpu" and torch.equal(a, b)


def test_a_layerwise_prior_precision_is_spread_on_the_mean_s_device():
    """``_per_coordinate``: one λ per parameter tensor, repeated over its coordinates, on the
    mean's device: the same vector under a ``meta`` default device as outside it."""
    la = _laplace("diag", prior_precision=(1.0, 2.0, 3.0, 4.0))
    lam = (1.0, 2.0, 3.0, 4.0)
    expected = la._per_coordinate(lam, torch.float64)
    got = _on_cpu_under_meta(lambda: la._per_coordinate(lam, torch.float64))
    sizes = [p.numel() for p in la.model.parameters()]  # 12, 4, 4, 1
    assert got.device.type == "cpu"
    assert torch.equal(got, torch.tensor(lam, dtype=torch.float64).repeat_interleave(
        torch.tensor(sizes)))  # fmt: skip
    assert torch.equal(got, expected)
    one = la._per_coordinate((7.0,), torch.float64)  # not one per tensor: λ itself
    assert torch.equal(_on_cpu_under_meta(lambda: la._per_coordinate((7.0,), torch.float64)), one)


@pytest.mark.parametrize("structure", ["diag", "kron"])
def test_the_glm_jacobians_run_where_the_net_was_moved(structure):
    """A fitted posterior moved to ``meta``: CPU inputs go to the net's device before the
    Jacobians (``_jacobian_blocks``, ``_layer_rows``), whose outputs are then ``meta``."""
    la = _laplace(structure).to("meta")
    x = torch.randn(5, 3, dtype=torch.float64)
    rows = la._layer_rows(x)
    assert (rows is not None) == (structure == "kron")  # KFAC always goes per layer
    blocks = list(la._jacobian_blocks(x, 64, rows))
    assert blocks and all(out.device == META and out.shape == (5, 1) for _, out in blocks)


@pytest.mark.parametrize("kind", ["fisher", "ggn"])
def test_the_curvature_moves_each_batch_to_the_given_device(monkeypatch, kind):
    """``curvature(..., device=meta)`` with a ``meta`` net and CPU batches: both ``x`` and ``y``
    reach the loss on ``meta`` (the negative log-likelihood, which reads values, is replaced
    by a stand-in that records the devices it is given), and ``H`` is on ``meta``."""
    seen = []

    def nll(out, y, likelihood, latents):  # noqa: ANN001, ANN202
        seen.append((out.device, y.device))
        return (out - y).pow(2).sum() / 2

    def weights(out, y, likelihood, latents):  # noqa: ANN001, ANN202
        seen.append((out.device, y.device))
        return 0.0, torch.ones_like(out), False

    monkeypatch.setattr(curvature_module, "_nll", nll)
    monkeypatch.setattr(curvature_module, "_output_weights", weights)
    monkeypatch.setattr(curvature_module, "float", lambda t: 0.0, raising=False)
    net = bp.nn.mlp(3, [4], 1).double().to("meta")
    params = {n: p.detach() for n, p in net.named_parameters()}
    batches = [(torch.ones(4, 3, dtype=torch.float64), torch.zeros(4, 1, dtype=torch.float64))]
    from bnn_pyro.methods.laplace.structures import DiagonalHessian

    h, _, count = curvature_module.curvature(
        net, params, batches, likelihood=bp.Gaussian(), kind=kind, structure=DiagonalHessian(),
        sigma=torch.ones(1, dtype=torch.float64, device=META), device=META,
    )  # fmt: skip
    assert count == 4 and h.device == META and h.shape == (21,)
    assert seen and all(d == (META, META) for d in seen)


# ---------------------------------------------------------------------- SWAG
def test_swag_draws_on_its_snapshots_device_whatever_the_default_device():
    """SWAG's weight draws (the diagonal noise and the low-rank one) follow its snapshots
    (CPU), not the default device: under a ``meta`` default device the same numbers as
    outside it from the same global seed (a draw made on the default device would meet the
    CPU snapshots and raise)."""
    torch.manual_seed(0)
    x = torch.randn(16, 2)
    y = x.sum(-1, keepdim=True)
    swag = bp.SWAG(bp.nn.mlp(2, [4], 1), likelihood=bp.Gaussian(scale=0.5), max_num_models=5)
    swag.fit(x, y, epochs=8, batch_size=8, swa_start=2, progress=False, seed=0)
    assert len(swag.deviations) >= 2  # the low-rank term is drawn too

    def draw():  # noqa: ANN202
        torch.manual_seed(1)
        return swag._sample_flat(3)

    want = draw()
    got = _on_cpu_under_meta(draw)
    assert got.device.type == "cpu"
    assert torch.equal(got, want)


# ---------------------------------------------------------------------- stacked VI
def test_stacked_vi_builds_and_draws_on_its_members_device_whatever_the_default_device():
    """``StackedVI``'s prior constants and each member's weight noise follow the members'
    parameters (CPU), not the default device: under a ``meta`` default device the members'
    losses are the same numbers as outside it, from the same member generators (a tensor made
    on the default device instead would meet a CPU one and raise)."""
    import warnings

    from bnn_pyro.methods.vi.stacked import StackedVI

    torch.manual_seed(0)
    models = [bp.VariationalBNN(bp.nn.mlp(3, [5], 1), bp.Gaussian(scale=0.5)) for _ in range(2)]
    x, y = torch.randn(2, 8, 3), torch.randn(2, 8, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bp.PosteriorCollapseWarning)  # one epoch, by design
        for m in models:
            m.fit(x[0], y[0], epochs=1, progress=False, seed=0)

    def losses():  # noqa: ANN202
        gens = [torch.Generator().manual_seed(s) for s in (3, 4)]
        return StackedVI(models, gens, 40).member_losses(x, y)

    want = losses()
    got = _on_cpu_under_meta(losses)
    assert got.device.type == "cpu"
    assert torch.equal(got, want)


@pytest.mark.parametrize("estimator", ["local", "flipout"])
def test_stacked_local_reparameterization_draws_on_the_inputs_device(estimator):
    """The per-member pre-activation noise (``"local"``) and flipout's signs follow the
    inputs (CPU, float64), not the default device: the same numbers under a ``meta`` default
    device as outside it, from the same member generators."""
    from bnn_pyro.methods.vi.stacked_lrt import reparameterized_forward
    from bnn_pyro.nn.layers import Linear

    g = torch.Generator().manual_seed(0)
    loc = torch.randn(2, 2, 3, generator=g, dtype=torch.float64)
    scale = torch.rand(2, 2, 3, generator=g, dtype=torch.float64)
    w = loc + scale * torch.randn(2, 2, 3, generator=g, dtype=torch.float64)
    net = torch.nn.Sequential(Linear(3, 2, bias=False))
    net[0]._parameters.pop("weight")
    net[0].__dict__["weight"] = w
    x = torch.randn(2, 4, 3, generator=g, dtype=torch.float64)

    def forward():  # noqa: ANN202
        gens = [torch.Generator().manual_seed(s) for s in (5, 6)]
        return reparameterized_forward(net, x, {"w": w}, {"w": (loc, scale)}, estimator, gens)

    want = forward()
    got = _on_cpu_under_meta(forward)
    assert got.device.type == "cpu" and got.dtype == torch.float64
    assert torch.equal(got, want)


# ---------------------------------------------------------------------- classic predict
def _dropout_on_meta(net: torch.nn.Module) -> bp.MCDropout:
    """MC dropout over ``net`` (float32), moved to ``meta``: the second device."""
    return bp.MCDropout(net, likelihood=bp.Categorical()).to("meta")


def test_classic_predict_moves_cpu_float64_inputs_to_the_model_s_device_and_dtype():
    """``predict`` takes inputs on another device and in another precision and moves them as
    ``fit`` does: CPU float64 rows into a float32 net on ``meta`` give ``meta`` float32 moments
    and samples. An input left on the CPU, or left in float64, meets the ``meta`` float32
    weights in the first layer and raises."""
    m = _dropout_on_meta(torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Dropout(0.5),
                                             torch.nn.Linear(8, 2)))  # fmt: skip
    x = torch.randn(4, 3, dtype=torch.float64)
    mean, var, samples = m.predict(x, return_samples=True, num_samples=3)
    for out in (mean, var, samples):
        assert out.device == META and out.dtype == torch.float32
    assert samples.shape == (3, 4, 2)


def test_classic_predict_moves_integer_indices_to_the_model_s_device_unconverted():
    """An embedding net's integer indices stay integers on their way to the model's device (a
    float cast breaks ``nn.Embedding``). Indices left on the CPU do not raise against a
    ``meta`` table: ``tests/devices/test_cuda.py`` checks that move on a GPU."""
    net = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Flatten(),
                              torch.nn.Dropout(0.5), torch.nn.Linear(8, 2))  # fmt: skip
    mean, var = _dropout_on_meta(net).predict(torch.tensor([[1, 2], [3, 9]]), num_samples=3)
    assert mean.device == META and mean.shape == (2, 2) and var.device == META


def test_sngp_draws_its_output_weights_on_the_features_device_whatever_the_default_device():
    """SNGP's head draws the output weights' noise on the features' device (CPU), not the
    default device: under a ``meta`` default device the same samples as outside it from the
    same global seed (noise drawn on the default device would be ``meta``, and so would the
    samples)."""
    from bnn_pyro.methods.sngp.head import RandomFeatureGP

    torch.manual_seed(0)
    head = RandomFeatureGP(3, 2, num_features=16, lengthscale=1.0, prior_scale=1.0)
    phi = head.features(torch.randn(4, 3))

    def draw():  # noqa: ANN202
        torch.manual_seed(1)
        return head.sample_outputs(phi, 5)

    want = draw()
    got = _on_cpu_under_meta(draw)
    assert got.device.type == "cpu" and got.shape == (5, 4, 2)
    assert torch.equal(got, want)
