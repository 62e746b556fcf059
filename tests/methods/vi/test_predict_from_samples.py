"""Predictions, the Gaussian mixture and the test log-likelihood from a given dict of weight
samples (``posterior_samples=``: NUTS, SG-MCMC or any ``{site: (S, *shape)}``), and
``load_state_dict`` into a freshly built model.

References, each independent of the library's prediction path:

* ``S`` copies of one set of weights (the guide's means) predict what the plain torch net
  computes with those weights, with zero variance;
* on a no-hidden-layer net ``f = x @ w.T + b``, the mean and variance over NUTS draws equal
  those reduced by hand from ``x @ w.T + b`` per draw and from Pyro's own
  ``Predictive(bnn.model, posterior_samples=draws)``. Float32 throughout: each draw's output is
  one multiply and one add, the same in every path; only the reductions over ``S = 100`` draws
  run in another order, which moves a float32 mean of values of size ~3 by at most
  ``S * eps * 3 ~ 2e-5`` and typically ~1e-6, hence a tolerance of 1e-5.
"""

from __future__ import annotations

import math
import re

import pyro
import pytest
import torch
from pyro.infer import MCMC, NUTS, Predictive
from pyro.poutine.util import site_is_subsample

import bnn_pyro as bp
import bnn_pyro.priors as priors
from bnn_pyro.likelihoods.gaussian import NOISE_SITE
from bnn_pyro.metrics import gaussian_log_likelihood

G = torch.Generator().manual_seed(0)
X = torch.linspace(-1, 1, 20).unsqueeze(-1)
Y = 2 * X.squeeze(-1) - 0.5 + 0.1 * torch.randn(20, generator=G)
X2 = torch.randn(30, 2, generator=G)
Y2 = X2.sum(-1, keepdim=True)


def _fitted(guide: str = "meanfield", likelihood: bp.Likelihood | None = None):
    torch.manual_seed(0)
    lik = likelihood or bp.Gaussian(scale="learned")
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [8], 1), lik, guide=guide)
    bnn.fit(X2, Y2, epochs=5, progress=False, seed=0)
    return bnn


@pytest.fixture(scope="module")
def nuts_draws() -> dict[str, torch.Tensor]:
    """NUTS on a fresh (unfitted) ``f = w x + b`` with a learned noise scale, grouped by chain."""
    bnn = bp.VariationalBNN(bp.nn.mlp(1, [], 1), bp.Gaussian(scale="learned"))
    pyro.set_rng_seed(0)
    mcmc = MCMC(NUTS(bnn.model), num_samples=100, warmup_steps=100, disable_progbar=True)
    mcmc.run(X, Y)
    return mcmc.get_samples(group_by_chain=True)


def _linear() -> bp.VariationalBNN:
    return bp.VariationalBNN(bp.nn.mlp(1, [], 1), bp.Gaussian(scale="learned"))


# ---------------------------------------------------------------------- correctness
def test_a_point_mass_predicts_the_plain_net_with_zero_variance():
    bnn = _fitted()
    means = {k: q.mean for k, q in bnn.guide.distributions().items()}
    draws = {k: v.expand(7, *v.shape) for k, v in means.items()}
    net = bp.nn.mlp(2, [8], 1)
    weights = {k.removeprefix("net."): v for k, v in means.items() if k.startswith("net.")}
    with torch.no_grad():
        plain = torch.func.functional_call(net, weights, (X2,))
    mean, var, samples = bnn.predict(X2, True, posterior_samples=draws)
    assert samples.shape == (7, 30, 1)
    torch.testing.assert_close(mean, plain, rtol=0, atol=1e-6)
    assert float(var.abs().max()) < 1e-10
    # the learned noise of the draws is the aleatoric part
    _, with_noise = bnn.predict(X2, include_noise=True, posterior_samples=draws)
    torch.testing.assert_close(with_noise, var + means[NOISE_SITE] ** 2)


def test_nuts_draws_predict_what_the_model_computes_per_draw(nuts_draws):
    draws = {k: v.flatten(0, 1) for k, v in nuts_draws.items()}  # get_samples()'s layout
    w, b, scale = draws["net.0.weight"], draws["net.0.bias"], draws[NOISE_SITE]
    by_hand = X @ w.transpose(-1, -2) + b.unsqueeze(-2)  # (S, N, 1)
    ran = Predictive(_linear().model, posterior_samples=draws, return_sites=["_RETURN"])(X)
    torch.testing.assert_close(ran["_RETURN"], by_hand, rtol=0, atol=1e-6)

    bnn = _linear()  # unfitted: the draws stand in for the guide
    mean, var, samples = bnn.predict(X, True, posterior_samples=draws)
    torch.testing.assert_close(samples, by_hand, rtol=0, atol=1e-6)
    torch.testing.assert_close(mean, by_hand.mean(0), rtol=0, atol=1e-5)
    torch.testing.assert_close(var, by_hand.var(0, unbiased=False), rtol=0, atol=1e-5)
    _, total = bnn.predict(X, include_noise=True, posterior_samples=draws)
    noise = (scale**2).mean(0)
    torch.testing.assert_close(total, by_hand.var(0, unbiased=False) + noise, rtol=0, atol=1e-5)

    locs, scales = bnn.predictive_gaussian(X, posterior_samples=draws)
    torch.testing.assert_close(locs, by_hand, rtol=0, atol=1e-6)
    torch.testing.assert_close(scales.expand_as(locs), scale.unsqueeze(-2).expand_as(locs))
    lpd = bnn.log_predictive_density(X, Y, posterior_samples=draws)
    log_p = torch.distributions.Normal(by_hand, scale.unsqueeze(-2)).log_prob(Y.unsqueeze(-1))
    expected = float((torch.logsumexp(log_p.squeeze(-1), 0) - math.log(100)).mean())
    assert abs(lpd - expected) < 1e-5
    assert abs(gaussian_log_likelihood(locs, scales, Y.unsqueeze(-1)) - expected) < 1e-5


def test_chains_and_predictive_layouts_are_flattened(nuts_draws):
    bnn = _linear()
    flat = {k: v.flatten(0, 1) for k, v in nuts_draws.items()}
    expected = bnn.predict(X, True, posterior_samples=flat)
    for layout in (nuts_draws, {k: v.unsqueeze(1) for k, v in flat.items()}):  # (C, S) / (S, 1)
        got = bnn.predict(X, True, posterior_samples=layout)
        for a, b in zip(got, expected, strict=True):
            assert torch.equal(a, b)


def test_sites_of_the_model_that_predict_does_not_read_are_ignored(nuts_draws):
    flat = {k: v.flatten(0, 1) for k, v in nuts_draws.items()}
    bnn = _linear()
    ran = Predictive(bnn.model, posterior_samples=flat, return_sites=["obs", "_RETURN"])(X)
    mean, _ = bnn.predict(X, posterior_samples={**flat, **ran})
    assert torch.equal(mean, bnn.predict(X, posterior_samples=flat)[0])


@pytest.mark.skipif(
    not hasattr(priors, "HierarchicalNormalPrior"), reason="no prior with scale sites yet"
)
def test_a_priors_scale_sites_are_ignored():
    prior = priors.HierarchicalNormalPrior()
    bnn = bp.VariationalBNN(bp.nn.mlp(1, [], 1), bp.Gaussian(0.1), prior=prior)
    draws = {"net.0.weight": torch.ones(3, 1, 1), "net.0.bias": torch.zeros(3, 1)}
    trace = pyro.poutine.trace(bnn.model).get_trace(X)
    sites = [k for k, v in trace.iter_stochastic_nodes() if not site_is_subsample(v)]
    scales = {k: torch.ones(3, *trace.nodes[k]["value"].shape) for k in sites if k not in draws}
    assert scales  # the prior's own sites
    mean, _ = bnn.predict(X, posterior_samples={**draws, **scales})
    torch.testing.assert_close(mean, X)


def test_hidden_layer_bnn_predicts_from_its_weight_matrices():
    bnn = bp.HiddenLayerBNN(2, [4], 1, bp.Gaussian(0.1), activation="tanh")
    locs = [loc.detach() for loc in bnn.locs]
    draws = {f"layer{i}": loc.expand(3, *loc.shape) for i, loc in enumerate(locs)}
    ones = torch.ones(30, 1)
    plain = torch.cat([torch.tanh(torch.cat([X2, ones], 1) @ locs[0]), ones], 1) @ locs[1]
    mean, var = bnn.predict(X2, posterior_samples=draws)  # unfitted
    torch.testing.assert_close(mean, plain, rtol=0, atol=1e-6)
    assert float(var.abs().max()) < 1e-10
    activations = {**draws, "layer0": torch.zeros(3, 30, 4)}  # what MCMC on its model samples
    with pytest.raises(ValueError, match=r"'layer0'\] must have shape \(S, 3, 4\).*weight matr"):
        bnn.predict(X2, posterior_samples=activations)


# ---------------------------------------------------------------------- refusals
def _draws(s: int = 4) -> dict[str, torch.Tensor]:
    return {
        "net.0.weight": torch.randn(s, 1, 1, generator=G),
        "net.0.bias": torch.randn(s, 1, generator=G),
        NOISE_SITE: torch.rand(s, 1, generator=G) + 0.1,
    }


def test_missing_weight_sites_are_named():
    draws = _draws()
    del draws["net.0.bias"]
    with pytest.raises(ValueError, match=r"lacks the weight site\(s\) \['net.0.bias'\]"):
        _linear().predict(X, posterior_samples=draws)


def test_sites_the_model_does_not_have_are_refused():
    with pytest.raises(ValueError, match=r"\['net.1.weight'\] that are not sites of this model"):
        _linear().predict(X, posterior_samples={**_draws(), "net.1.weight": torch.ones(4, 1)})
    fixed = bp.VariationalBNN(bp.nn.mlp(1, [], 1), bp.Gaussian(0.1))  # no noise site
    with pytest.raises(ValueError, match=r"\['likelihood.scale'\] that are not sites"):
        fixed.predict(X, posterior_samples=_draws())


def test_shapes_are_checked_before_a_fit():
    draws = {**_draws(), "net.0.weight": torch.ones(4, 2, 1)}
    with pytest.raises(
        ValueError,
        match=r"posterior_samples\['net.0.weight'\] must have shape \(S, 1, 1\).*"
        r"got \(4, 2, 1\)",
    ):
        _linear().predict(X, posterior_samples=draws)


def test_one_number_of_draws_for_every_site():
    draws = {**_draws(), "net.0.bias": torch.zeros(3, 1)}
    with pytest.raises(ValueError, match="one S for all sites.*'net.0.bias': 3"):
        _linear().predict(X, posterior_samples=draws)
    mixed = {**_draws(), "net.0.bias": torch.zeros(2, 2, 1)}  # chains for one site only
    with pytest.raises(ValueError, match="group_by_chain"):
        _linear().predict(X, posterior_samples=mixed)
    with pytest.raises(ValueError, match="at least one draw"):
        _linear().predict(X, posterior_samples=_draws(0))
    with pytest.raises(ValueError, match=r"num_samples=3 .* S = 4 draws"):
        _linear().predict(X, num_samples=3, posterior_samples=_draws())


def test_non_finite_draws_are_refused():
    draws = _draws()
    draws["net.0.weight"][2] = float("nan")
    with pytest.raises(ValueError, match=r"\['net.0.weight'\] holds non-finite values in 1 of"):
        _linear().predict(X, posterior_samples=draws)


def test_the_argument_must_be_a_dict_of_tensors():
    with pytest.raises(TypeError, match=r"posterior_samples must be a dict \{site: \(S, \*shape"):
        _linear().predict(X, posterior_samples=[torch.ones(3)])
    with pytest.raises(TypeError, match=r"posterior_samples\['net.0.bias'\] must be"):
        _linear().predict(X, posterior_samples={**_draws(), "net.0.bias": "abc"})


def test_a_learned_noise_is_needed_only_where_it_is_used():
    draws = _draws()
    del draws[NOISE_SITE]
    bnn = _linear()
    assert bnn.predict(X, posterior_samples=draws)[0].shape == (20, 1)
    calls = {
        "predict(include_noise=True)": lambda: bnn.predict(
            X, include_noise=True, posterior_samples=draws
        ),
        "predictive_gaussian": lambda: bnn.predictive_gaussian(X, posterior_samples=draws),
        "log_predictive_density": lambda: bnn.log_predictive_density(X, Y, posterior_samples=draws),
    }
    for what, call in calls.items():
        with pytest.raises(ValueError, match=rf"{re.escape(what)} needs .*'likelihood.scale'"):
            call()
