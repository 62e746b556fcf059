"""Priors with latent sites of their own, and priors told the weight site's name.

``Prior.distribution``/``site_distribution`` take an optional ``name`` (the weight site's
dotted name, ``"net.0.weight"``); priors written before it keep working. A prior may call
``pyro.sample`` for its own latents (a user's hierarchical prior, as written in the report):
``fit`` trains them, the net is evaluated on weights alone, the plain-torch fast loss and the
stacked fit step aside, and a prior that would cache a sampled distribution is refused.
"""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import pytest
import torch
import torch.nn as nn

import bnn_pyro as bp
from bnn_pyro.methods.vi.fast_loss import direct_loss_for
from bnn_pyro.methods.vi.stacked_support import why_not_stacked_vi
from bnn_pyro.priors import HierarchicalNormalPrior, HorseshoePrior, Prior


class NamedScalePrior(Prior):
    """A per-layer prior written on the extension point: no tags on the modules."""

    def __init__(self, scales: dict[str, float], **selection) -> None:
        super().__init__(**selection)
        self.scales = dict(scales)
        self.seen: list[str] = []

    def distribution(self, module, param_name, device, dtype, *, name=None):
        self.seen.append(name)
        scale = self.scales.get(name.split(".")[1], 1.0)
        return dist.Normal(torch.zeros((), device=device, dtype=dtype), scale)

    def _own_config(self):
        return {"scales": dict(self.scales)}


class LegacyPrior(Prior):
    """A prior written before the name: the old signatures, of both methods."""

    def distribution(self, module, param_name, device, dtype):
        return dist.Normal(torch.zeros((), device=device, dtype=dtype), 0.5)

    def site_distribution(self, module, param_name, shape, device, dtype):
        return super().site_distribution(module, param_name, shape, device, dtype)

    def _own_config(self):
        return {}


class UserHierarchicalPrior(Prior):
    """The report's prior: a HalfCauchy scale per tensor, sampled inside ``distribution``."""

    cached = False

    def distribution(self, module, param_name, device, dtype, *, name=None):
        s = pyro.sample(f"{name}_s", dist.HalfCauchy(torch.ones((), device=device, dtype=dtype)))
        return dist.Normal(torch.zeros_like(s), s)

    def _own_config(self):
        return {}


class CachedLatentPrior(UserHierarchicalPrior):
    cached = True


def _data(n: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    X = torch.randn(n, 2, generator=g)
    return X, X.sum(-1) + 0.1 * torch.randn(n, generator=g)


def test_the_prior_is_told_each_sites_dotted_name():
    prior = NamedScalePrior({"2": 0.1})
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [3], 1), bp.Gaussian(0.1), prior=prior)
    trace = poutine.trace(bnn.model).get_trace(torch.randn(4, 2))
    assert {"net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"} <= set(prior.seen)
    assert float(trace.nodes["net.2.weight"]["fn"].base_dist.scale.max()) == pytest.approx(0.1)
    assert float(trace.nodes["net.0.weight"]["fn"].base_dist.scale.max()) == pytest.approx(1.0)


def test_a_per_layer_prior_on_the_names_survives_load(tmp_path):
    """The report's second half: no marks on the modules, so nothing for ``load`` to lose."""
    X, y = _data()
    bnn = bp.VariationalBNN(
        bp.nn.mlp(2, [3], 1), bp.Gaussian(0.1), prior=NamedScalePrior({"2": 0.1})
    )
    bnn.fit(X, y, epochs=2, progress=False, seed=0)
    bnn.save(tmp_path / "m.pt")
    loaded = bp.load(tmp_path / "m.pt", net=bp.nn.mlp(2, [3], 1))
    assert loaded.prior.scales == {"2": 0.1}
    trace = poutine.trace(loaded.model).get_trace(X)
    assert float(trace.nodes["net.2.weight"]["fn"].base_dist.scale.max()) == pytest.approx(0.1)
    assert torch.equal(
        loaded.predict(X, num_samples=4, seed=1)[0], bnn.predict(X, num_samples=4, seed=1)[0]
    )


def test_a_prior_written_before_the_name_keeps_working():
    X, y = _data()
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [3], 1), bp.Gaussian(0.1), prior=LegacyPrior())
    bnn.fit(X, y, epochs=2, progress=False, seed=0)
    trace = poutine.trace(bnn.model).get_trace(X)
    assert float(trace.nodes["net.0.weight"]["fn"].base_dist.scale.max()) == 0.5
    assert bnn.prior_sites == []


def test_a_users_hierarchical_prior_goes_through_fit_and_predict():
    X, y = _data()
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1), prior=UserHierarchicalPrior())
    assert bnn.prior_sites == [f"net.{w}_s" for w in ("0.weight", "0.bias", "2.weight", "2.bias")]
    history = bnn.fit(X, y, epochs=3, progress=False, seed=0)
    assert torch.isfinite(torch.tensor(history["loss"])).all()
    assert set(bnn.prior_sites) <= set(bnn.guide.site_names())
    mean, _ = bnn.predict(X, num_samples=4, seed=0)
    assert mean.shape == (32, 1)


def test_a_cached_prior_that_samples_is_refused_by_name():
    with pytest.raises(ValueError, match=r"CachedLatentPrior.*net\.0\.weight_s.*cached = False"):
        bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1), prior=CachedLatentPrior())


@pytest.mark.parametrize("prior", [HierarchicalNormalPrior(), HorseshoePrior()])
def test_the_fast_loss_steps_aside_for_a_prior_with_latents(prior):
    X, y = _data()
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1), prior=prior)
    bnn.setup_guide(X, y.unsqueeze(-1))
    assert direct_loss_for(bnn) is None and bnn.fast_loss() is None
    plain = bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1))
    plain.setup_guide(X, y.unsqueeze(-1))
    assert direct_loss_for(plain) is not None  # (the check above is about the prior)


def test_fit_stacked_refuses_a_prior_with_latents_by_name():
    make = lambda: bp.VariationalBNN(  # noqa: E731
        bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1), prior=HierarchicalNormalPrior()
    )
    reason = why_not_stacked_vi([make(), make()])
    assert reason is not None and "latent" in reason and "net.0.weight_prior_scale" in reason


def test_fit_stacked_of_sgmcmc_chains_refuses_it_before_any_work():
    X, y = _data()
    chains = [
        bp.make("sgld", bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1), prior=HierarchicalNormalPrior())
        for _ in range(2)
    ]
    with pytest.raises(ValueError, match="latent sites of its own.*not stacked"):
        bp.fit_stacked(chains, X, y, seeds=[0, 1], epochs=1, progress=False)
    assert all(m.potential is None for m in chains)  # nothing was set up


def test_prediction_needs_the_weights_alone():
    X, y = _data()
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1), prior=HorseshoePrior())
    bnn.fit(X, y, epochs=2, progress=False, seed=0)
    samples = bnn.sample_posterior(6, seed=0)
    weights = {k: v for k, v in samples.items() if k in bnn.site_names}
    assert set(samples) - set(weights) == set(bnn.prior_sites)
    full = bnn.predict(X, posterior_samples=samples)[0]
    torch.testing.assert_close(bnn.predict(X, posterior_samples=weights)[0], full)


def test_vectorized_particles_and_pyro_predictive():
    """Under a plate of particles the scales carry the plate's dims, and the weights too."""
    X, y = _data()
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1), prior=HorseshoePrior())
    bnn.fit(X, y, epochs=2, num_particles=3, progress=False, seed=0)
    predictive = pyro.infer.Predictive(bnn.model, guide=bnn.guide, num_samples=5, parallel=True)
    out = predictive(X[:7])
    assert out["obs"].shape == (5, 7, 1)
    assert out["net.0.weight_local_scale"].shape[-1] == 4


def test_a_point_estimate_layer_beside_latent_scales():
    X, y = _data()
    net = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 1))
    prior = HierarchicalNormalPrior(include="0.*")  # the last layer stays a point estimate
    bnn = bp.VariationalBNN(net, bp.Gaussian(0.1), prior=prior)
    assert bnn.prior_sites == ["net.0.weight_prior_scale", "net.0.bias_prior_scale"]
    bnn.fit(X, y, epochs=3, progress=False, seed=0)
    assert bnn.predict(X, num_samples=3, seed=0)[0].shape == (32, 1)
