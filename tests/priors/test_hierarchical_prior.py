"""``HierarchicalNormalPrior``: a sampled prior scale per Bayesian tensor, through ``fit``.

References, each independent of the library's code path:

* the model's log joint equals a hand-written Pyro model's, and the closed-form sum of
  ``log HalfCauchy(s)`` and ``log Normal(w; 0, s)`` terms, at the same values;
* on a linear model without bias, ``w ~ N(0, s^2 I)``, ``s ~ HalfCauchy(1)``, the exact
  posterior of ``s`` is one-dimensional (``p(y | s) = N(y; 0, s^2 X X^T + sigma^2 I)``), so
  quadrature gives ``E[log s | y]``; ``fit`` with the default mean-field guide and a plain Pyro
  SVI loop with ``AutoNormal`` (the same family: a Normal on ``log s``) both land near it.
"""

from __future__ import annotations

import math

import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import pytest
import torch
import torch.nn as nn

import bnn_pyro as bp
from bnn_pyro.priors import HierarchicalNormalPrior


def _data(n: int = 64, d: int = 2, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g)
    y = X @ torch.linspace(-1.0, 1.0, d) + 0.1 * torch.randn(n, generator=g)
    return X, y


def _half_cauchy(s: torch.Tensor, b: float) -> torch.Tensor:
    return math.log(2 / (math.pi * b)) - torch.log1p((s / b) ** 2)


def _normal(w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return (-0.5 * (w / s) ** 2 - torch.log(s) - 0.5 * math.log(2 * math.pi)).sum()


def test_one_scale_site_per_bayesian_tensor_named_after_it():
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [3], 1), bp.Gaussian(0.1), prior=HierarchicalNormalPrior())
    trace = poutine.trace(bnn.model).get_trace(torch.randn(4, 2))
    latent = [
        n for n, s in trace.nodes.items() if s["type"] == "sample" and n not in ("data", "obs")
    ]
    weights = ["net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"]
    assert latent == [n for w in weights for n in (f"{w}_prior_scale", w)]
    assert all(trace.nodes[f"{w}_prior_scale"]["value"].shape == () for w in weights)
    assert bnn.prior_sites == [f"{w}_prior_scale" for w in weights]


def test_log_joint_equals_a_hand_written_model_and_the_closed_form():
    prior = HierarchicalNormalPrior(dist.HalfCauchy(1.0), layers={"net.2.*": dist.HalfCauchy(0.3)})
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [3], 1), bp.Gaussian(0.5), prior=prior)
    g = torch.Generator().manual_seed(1)
    shapes = {
        "net.0.weight": (3, 2),
        "net.0.bias": (3,),
        "net.2.weight": (1, 3),
        "net.2.bias": (1,),
    }
    values = {}
    for name, shape in shapes.items():
        values[name] = torch.randn(shape, generator=g)
        values[f"{name}_prior_scale"] = torch.rand((), generator=g) + 0.2
    X, y = torch.randn(5, 2, generator=g), torch.randn(5, 1, generator=g)

    def hand_model(x, y):
        w = {}
        for name, shape in shapes.items():
            b = 0.3 if name.startswith("net.2") else 1.0
            s = pyro.sample(f"{name}_prior_scale", dist.HalfCauchy(torch.tensor(b)))
            w[name] = pyro.sample(name, dist.Normal(0.0, s).expand(shape).to_event(len(shape)))
        h = torch.relu(x @ w["net.0.weight"].T + w["net.0.bias"])
        f = h @ w["net.2.weight"].T + w["net.2.bias"]
        with pyro.plate("data", len(x)):
            pyro.sample("obs", dist.Normal(f, 0.5).to_event(1), obs=y)

    ours = poutine.trace(poutine.condition(bnn.model, data=values)).get_trace(X, y)
    ref = poutine.trace(poutine.condition(hand_model, data=values)).get_trace(X, y)
    assert type(bp.nn.mlp(2, [3], 1)[1]) is nn.ReLU  # the hand model's activation
    torch.testing.assert_close(ours.log_prob_sum(), ref.log_prob_sum())
    closed = sum(
        _half_cauchy(values[f"{n}_prior_scale"], 0.3 if n.startswith("net.2") else 1.0)
        + _normal(values[n], values[f"{n}_prior_scale"])
        for n in shapes
    )
    ours.compute_log_prob()
    prior_part = sum(ours.nodes[name]["log_prob_sum"] for name in values)
    torch.testing.assert_close(prior_part, closed)


def test_fit_predict_save_load_round_trip_bit_for_bit(tmp_path):
    X, y = _data()
    prior = HierarchicalNormalPrior(dist.HalfCauchy(2.0), layers={"net.2.*": dist.HalfNormal(0.5)})
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [8], 1), bp.Gaussian(0.1), prior=prior)
    history = bnn.fit(X, y, epochs=30, batch_size=32, progress=False, seed=0)
    assert math.isfinite(history["loss"][-1])
    assert "net.0.weight_prior_scale" in bnn.guide.site_names()  # the default guide covers it
    # a global latent with positive support: a Normal on log s (torch gives HalfCauchy the
    # support [0, inf), which the guide maps by exp, as it maps (0, inf) to a LogNormal)
    site = "net.0.weight_prior_scale"
    q = bnn.guide.distributions()[site]
    loc, sd = bnn.guide.means()[site], bnn.guide.scales()[site]
    at = torch.tensor([0.3, 1.0, 2.5])
    torch.testing.assert_close(q.log_prob(at), dist.LogNormal(loc, sd).log_prob(at))
    mean, var = bnn.predict(X, num_samples=20, seed=3)
    assert mean.shape == (64, 1) and bool(torch.isfinite(var).all())
    path = tmp_path / "model.pt"
    bnn.save(path)
    loaded = bp.load(path, net=bp.nn.mlp(2, [8], 1))
    assert loaded.prior.config() == prior.config()  # the per-layer settings came back
    assert repr(loaded.prior) == repr(bnn.prior)
    for name in ("net.0.weight", "net.2.bias"):  # each site's scale prior, saved and reloaded
        ours, theirs = prior.scale_prior_for(name), loaded.prior.scale_prior_for(name)
        assert type(ours) is type(theirs) and float(ours.scale) == float(theirs.scale)
    assert type(loaded.prior.scale_prior_for("net.2.weight")) is dist.HalfNormal
    m1, v1 = bnn.predict(X, num_samples=20, seed=3)
    m2, v2 = loaded.predict(X, num_samples=20, seed=3)
    assert torch.equal(m1, m2) and torch.equal(v1, v2)
    # the reloaded model is the saved one: same log joint at the same values
    x, values = X[:4], {k: v[0] for k, v in bnn.sample_posterior(1, seed=0).items()}
    lp = [
        poutine.trace(poutine.condition(m.model, data=values)).get_trace(x, y[:4]).log_prob_sum()
        for m in (bnn, loaded)
    ]
    assert torch.equal(lp[0], lp[1])


def test_the_evaluators_vmap_path_never_draws_the_prior_scales():
    """The root cause of the report: the net evaluated on given weights under ``vmap``."""
    X, y = _data(n=16)
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1), prior=HierarchicalNormalPrior())
    bnn.fit(X, y, epochs=2, progress=False, seed=0)
    samples = bnn.sample_posterior(3, seed=0)
    batched = bnn.evaluator(samples, X)
    bnn.evaluator.batched = False  # force the vmap path on every call
    state = torch.get_rng_state()
    vmapped = bnn.evaluator(samples, X)
    assert torch.equal(torch.get_rng_state(), state)  # nothing drawn
    torch.testing.assert_close(vmapped, batched)


def _exact_log_scale_posterior(X: torch.Tensor, y: torch.Tensor, sigma: float) -> tuple:
    """Mean and sd of ``log s`` given ``y``, by quadrature on a grid of ``log s`` (float64); the
    4,001 marginal likelihoods as one batch of ``MultivariateNormal`` s (the same values as one
    at a time, to the last digit, in a sixth of the time)."""
    X, y = X.double(), y.double()
    t = torch.linspace(-8.0, 4.0, 4001, dtype=torch.float64)  # log s
    K = X @ X.T
    eye = torch.eye(len(y), dtype=torch.float64)
    covariances = t.exp().square()[:, None, None] * K + sigma**2 * eye  # (4001, n, n)
    log_lik = dist.MultivariateNormal(torch.zeros_like(y), covariances).log_prob(y)
    log_post = log_lik + _half_cauchy(t.exp(), 1.0) + t  # + t: the Jacobian ds = s dt
    w = torch.softmax(log_post, 0)
    mean = (w * t).sum()
    return float(mean), float((w * (t - mean) ** 2).sum().sqrt())


def test_scale_posterior_matches_quadrature_and_pyros_own_svi():
    d, sigma = 8, 0.5
    g = torch.Generator().manual_seed(0)
    X = torch.randn(40, d, generator=g)
    y = X @ (0.3 * torch.randn(d, generator=g)) + sigma * torch.randn(40, generator=g)
    exact, exact_sd = _exact_log_scale_posterior(X, y, sigma)  # -1.53, 0.33

    bnn = bp.VariationalBNN(
        nn.Linear(d, 1, bias=False), bp.Gaussian(sigma), prior=HierarchicalNormalPrior()
    )
    bnn.fit(X, y, epochs=800, lr=0.02, batch_size=None, progress=False, seed=0)
    ours = float(bnn.guide.means()["net.weight_prior_scale"])  # E_q[log s] (a LogNormal's loc)
    ours_sd = float(bnn.guide.scales()["net.weight_prior_scale"])

    pyro.set_rng_seed(0)
    ref_bnn = bp.VariationalBNN(
        nn.Linear(d, 1, bias=False), bp.Gaussian(sigma), prior=HierarchicalNormalPrior()
    )
    guide = pyro.infer.autoguide.AutoNormal(ref_bnn.model, init_scale=0.01)
    adam = pyro.optim.Adam({"lr": 0.02})
    svi = pyro.infer.SVI(ref_bnn.model, guide, adam, pyro.infer.Trace_ELBO())
    pyro.clear_param_store()
    for _ in range(600):
        svi.step(X, y.unsqueeze(-1))
    theirs = float(pyro.param("AutoNormal.locs.net.weight_prior_scale").detach())
    theirs_sd = float(pyro.param("AutoNormal.scales.net.weight_prior_scale").detach())
    pyro.clear_param_store()
    # Tolerances, from 6 runs (2 data sets x 3 seeds). Both fits maximise the same ELBO over the
    # same family (a Normal on log s, a Normal per weight). fit decays its learning rate to 0
    # and ended within 0.04 of the exact E[log s]; Pyro's loop keeps Adam's constant step,
    # whose jitter left its loc up to 0.15 from fit's: 0.25 between them, 0.15 to the exact
    # mean (under half the exact posterior sd of 0.33, while a scale that is not learned stays
    # near the prior's median, log 1 = 0). Mean field ignores the coupling of s with the
    # weights and understates the spread of log s (measured 0.25-0.27 against 0.33-0.35): both
    # sds within 0.05 of each other and between half and all of the exact one.
    # The lengths (were 1500 each): Pyro's loop, at a constant step, has its loc within the
    # jitter above by step 100 and its sd, from 0.01, by step 400 (traced every 100 steps:
    # sd 0.07, 0.20, 0.28, 0.25, 0.25, 0.26); what 600 steps end on is a draw of that jitter
    # like the end of 1500 (measured: loc -1.44, sd 0.257 at 600; -1.52, 0.254 at 1500). fit's
    # cosine decay settles its answer as well at 800 epochs as at 1500 (measured: -1.54 and
    # -1.50, sd 0.258 and 0.256). A scale that is not learned stays near log 1 = 0, 1.5 away.
    assert abs(ours - theirs) < 0.25
    assert abs(ours - exact) < 0.15
    assert abs(ours_sd - theirs_sd) < 0.05 and 0.5 * exact_sd < ours_sd < exact_sd


@pytest.mark.parametrize("options", [{"local_reparameterization": True}, {"elbo": "meanfield"}])
def test_other_paths_of_fit_train_the_scales(options):
    X, y = _data()
    bnn = bp.VariationalBNN(
        bp.nn.mlp(2, [8], 1), bp.Gaussian(0.1), prior=HierarchicalNormalPrior(), **options
    )
    bnn.fit(X, y, epochs=1, progress=False, seed=0)
    start = bnn.guide.means()["net.0.weight_prior_scale"].clone()
    bnn.fit(X, y, epochs=20, progress=False, seed=1)
    assert not torch.equal(start, bnn.guide.means()["net.0.weight_prior_scale"])
    assert bool(torch.isfinite(bnn.predict(X, num_samples=5, seed=0)[0]).all())


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="scale_prior.*positive"):
        HierarchicalNormalPrior(dist.Normal(0.0, 1.0))
    with pytest.raises(TypeError, match="scale_prior"):
        HierarchicalNormalPrior(1.0)
    with pytest.raises(ValueError, match="scalar"):
        HierarchicalNormalPrior(dist.HalfCauchy(torch.ones(2)))
    with pytest.raises(TypeError, match="layers"):
        HierarchicalNormalPrior(layers=[("net.0.*", dist.HalfCauchy(1.0))])
    with pytest.raises(TypeError, match="layers"):
        HierarchicalNormalPrior(layers={0: dist.HalfCauchy(1.0)})
    with pytest.raises(ValueError, match=r"layers\['net.0.\*'\].*positive"):
        HierarchicalNormalPrior(layers={"net.0.*": dist.Normal(0.0, 1.0)})
    with pytest.raises(ValueError, match=r"pattern\(s\) \['2\.\*'\] match no weight site"):
        bp.VariationalBNN(  # (include/exclude read "2.*"; layers reads site names: "net.2.*")
            bp.nn.mlp(2, [3], 1),
            bp.Gaussian(0.1),
            prior=HierarchicalNormalPrior(layers={"2.*": dist.HalfCauchy(0.1)}),
        )
    prior = HierarchicalNormalPrior()
    with pytest.raises(ValueError, match="name"):
        prior.site_distribution(nn.Linear(2, 3), "weight", torch.Size([3, 2]), "cpu", torch.float32)
