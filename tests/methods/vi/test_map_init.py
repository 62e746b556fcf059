"""MAP-initialised VI, ``fit(..., init="map")``: the MAP phase finds the closed-form mode, the
guide starts exactly there, it helps a short SVI run, and bad settings are refused."""

from __future__ import annotations

import re

import pytest
import torch

import bnn_pyro as bp

NOISE = 0.5


def _linear_data(n: int = 200) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    X = torch.randn(n, 3, generator=g)
    y = X @ torch.tensor([[0.8], [-1.5], [0.3]]) + 0.7 + NOISE * torch.randn(n, 1, generator=g)
    return X, y


def _exact(X: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Posterior mean (= its mode: the posterior is Gaussian) and std of ``[w, b]`` for the
    prior N(0, I) and known noise: precision ``I + Phi^T Phi / s^2``."""
    phi = torch.cat([X, torch.ones(len(X), 1)], 1).double()
    precision = torch.eye(4, dtype=torch.float64) + phi.T @ phi / NOISE**2
    mean = torch.linalg.solve(precision, phi.T @ y.double() / NOISE**2).squeeze(-1)
    return mean, torch.diagonal(precision).rsqrt()


def _locs(bnn: bp.VariationalBNN) -> torch.Tensor:
    means = bnn.guide.means()
    return torch.cat([means["net.0.weight"].ravel(), means["net.0.bias"]]).double()


def _linear_bnn(**kwargs) -> bp.VariationalBNN:
    torch.manual_seed(0)
    return bp.VariationalBNN(bp.nn.mlp(3, [], 1), bp.Gaussian(scale=NOISE), **kwargs)


@pytest.mark.parametrize(("batch_size", "map_epochs", "tol"), [(None, 300, 0.01), (50, 100, 0.02)])
def test_the_map_phase_reaches_the_closed_form_posterior_mode(batch_size, map_epochs, tol):
    """Bayesian linear regression: the MAP phase alone (no SVI epoch) ends at the exact mode.

    Tolerance, in posterior stds (~0.035 here). The objective is a strongly convex quadratic;
    the cosine schedule takes Adam's step to 0, so what is left is optimisation error, not a
    constant step's jitter: measured 2e-4 std on the full batch and 1.3e-3 std with minibatches
    of 50 (whose gradient noise the decaying step averages out). 0.01 / 0.02 std leave margin
    above that, yet catch a wrong objective (closed forms): the likelihood scaled by 1 instead
    of N / B = 4 moves the mode by 0.17 std, a missing prior or one counted twice by 0.06 std.
    """
    X, y = _linear_data()
    mean, std = _exact(X, y)
    bnn = _linear_bnn()
    history = bnn.fit(
        X, y, epochs=0, batch_size=batch_size, lr=0.05, init="map", map_epochs=map_epochs,
        progress=False, seed=0,
    )  # fmt: skip
    assert history == {} and len(bnn.map_history["loss"]) == map_epochs
    error = ((_locs(bnn) - mean).abs() / std).max()
    assert error < tol, error
    # the scales restart at the model's init_scale (the rule of bnn_pyro.methods.vi.map_init)
    for scale in bnn.guide.scales().values():
        assert torch.allclose(scale, torch.full_like(scale, bnn.init_scale))


def test_the_map_loss_is_the_models_negative_log_joint():
    """The MAP phase's loss is -log p(y | w) - log p(w) at the guide's means, computed here by
    hand from torch.distributions (full batch, so no N / B factor)."""
    X, y = _linear_data(40)
    bnn = _linear_bnn()
    bnn.fit(X, y, epochs=0, batch_size=None, init="map", map_epochs=1, progress=False, seed=0)
    w = bnn.guide.means()
    from bnn_pyro.methods.vi.map_init import _neg_log_joint

    f = X @ w["net.0.weight"].T + w["net.0.bias"]
    normal = torch.distributions.Normal
    by_hand = -(
        normal(f, NOISE).log_prob(y).sum()
        + normal(0.0, 1.0).log_prob(w["net.0.weight"]).sum()
        + normal(0.0, 1.0).log_prob(w["net.0.bias"]).sum()
    )
    assert float(_neg_log_joint(bnn, len(X))(X, y).detach()) == pytest.approx(
        float(by_hand), rel=1e-5
    )


def test_svi_starts_from_the_map_weights():
    """At the first SVI epoch (an lr_schedule callable runs before the first step) the guide's
    means are the MAP phase's end point: the same as a fit that stops after the MAP phase."""
    X, y = _linear_data()
    reference = _linear_bnn()
    reference.fit(X, y, epochs=0, batch_size=50, init="map", map_epochs=20, progress=False, seed=0)
    seen = []
    bnn = _linear_bnn()

    def schedule(progress: float) -> float:
        if not seen:
            seen.append((_locs(bnn), bnn.guide.scales()["net.0.weight"].clone()))
        return 1.0

    bnn.fit(
        X, y, epochs=3, batch_size=50, init="map", map_epochs=20, lr_schedule=schedule,
        progress=False, seed=0,
    )  # fmt: skip
    locs, scale = seen[0]
    assert torch.equal(locs, _locs(reference))
    assert torch.equal(scale, reference.guide.scales()["net.0.weight"])
    assert not torch.equal(_locs(bnn), locs)  # and SVI moved on from there


def test_svi_continues_a_map_start_as_it_would_a_copied_one():
    """The MAP phase leaves nothing behind but the guide: SVI from a MAP start equals SVI from a
    fresh model holding the same guide values (a leftover MAP gradient once added itself to the
    first SVI step's)."""
    X, y = _linear_data()
    started = _linear_bnn()
    started.fit(X, y, epochs=0, batch_size=50, init="map", map_epochs=5, progress=False, seed=0)
    assert all(p.grad is None for p in started.parameters())
    copied = _linear_bnn()
    copied.fit(X, y, epochs=0, batch_size=50, progress=False, seed=0)
    copied.load_state_dict(started.state_dict())
    for bnn in (started, copied):
        bnn.fit(X, y, epochs=2, batch_size=50, progress=False, seed=1)
    for p, q in zip(started.parameters(), copied.parameters(), strict=True):
        assert torch.equal(p, q)


def _wave(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 1, generator=g) * 6 - 3
    return X, torch.sin(2 * X) + 0.3 * X + 0.1 * torch.randn(n, 1, generator=g)


def test_map_init_helps_a_short_svi_run():
    """A small nonlinear regression, 50 SVI epochs: after a 50-epoch MAP phase the run ends at a
    lower loss and a better test log-likelihood than from the default init. Measured over seeds
    0-3 (mean): final loss (last 5 epochs) 681 vs 845, test log-likelihood -1.54 vs -2.26, MAP
    ahead on both for every seed; this seed: 529 vs 733 and -1.07 vs -1.89. The margins asked
    (50 nats, 0.3 per point) are a fraction of these gaps, well above the spread of the
    200-sample estimates (~0.02 per point)."""
    X, y = _wave(128, 0)
    X_test, y_test = _wave(512, 1)
    results = {}
    for init, map_epochs in [(None, None), ("map", 50)]:
        torch.manual_seed(0)
        bnn = bp.VariationalBNN(bp.nn.mlp(1, [32], 1), bp.Gaussian(scale=0.1))
        history = bnn.fit(
            X, y, epochs=50, batch_size=32, lr=0.02, init=init, map_epochs=map_epochs,
            progress=False, seed=0,
        )  # fmt: skip
        loss = sum(history["loss"][-5:]) / 5
        results[init] = loss, bnn.log_predictive_density(X_test, y_test, num_samples=200, seed=1)
    (loss_prior, ll_prior), (loss_map, ll_map) = results[None], results["map"]
    assert loss_map < loss_prior - 50, results
    assert ll_map > ll_prior + 0.3, results


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"init": "mle"}, ValueError, "init must be None, 'prior' or 'map', got 'mle'"),
        ({"init": 1}, TypeError, "init must be None, 'prior' or 'map', got int"),
        ({"init": "map", "map_epochs": 0}, ValueError, "map_epochs"),
        ({"init": "map", "map_epochs": 2.5}, TypeError, "map_epochs"),
        ({"map_epochs": 5}, ValueError, "map_epochs is used only with init='map'"),
        ({"init": "prior", "map_epochs": 5}, ValueError, "map_epochs is used only"),
    ],
)
def test_bad_init_settings_are_refused_before_any_work(kwargs, error, match):
    X, y = _linear_data(20)
    bnn = _linear_bnn()
    before = {k: v.clone() for k, v in bnn.state_dict().items()}
    with pytest.raises(error, match=match):
        bnn.fit(X, y, epochs=1, progress=False, **kwargs)
    assert not bnn.guide.is_setup and bnn.state_dict().keys() == before.keys()


@pytest.mark.parametrize("guide", ["normal", "delta"])
def test_init_map_needs_the_mean_field_guide(guide):
    X, y = _linear_data(20)
    bnn = _linear_bnn(guide=guide)
    with pytest.raises(
        ValueError, match="init='map' needs .*guide='meanfield'.*got a VariationalBNN with guide='"
    ):
        bnn.fit(X, y, epochs=1, init="map", progress=False)


@pytest.mark.parametrize("likelihood", [bp.Gaussian(scale=NOISE), bp.Gaussian("learned")])
def test_init_map_refused_by_hidden_layer_bnn(likelihood):
    """Named by its class alone: its only guide, if any, is the likelihood's, which the user
    does not choose."""
    X, y = _linear_data(20)
    model = bp.HiddenLayerBNN(3, [4], 1, likelihood)
    with pytest.raises(ValueError) as info:
        model.fit(X, y, epochs=1, init="map", progress=False)
    assert str(info.value) == (
        "init='map' needs a VariationalBNN with the mean-field guide (guide='meanfield'), "
        "got a HiddenLayerBNN"
    )


def test_resume_runs_no_map_phase_and_checks_init(tmp_path):
    """A resumed fit restores the saved guide (which started at the MAP point) instead of
    running the MAP phase again; a file written with another init is refused by name."""
    X, y = _linear_data(40)
    path = tmp_path / "run.pt"
    first = _linear_bnn()
    kw = {"epochs": 3, "batch_size": 20, "progress": False, "seed": 0, "resume": path}
    history = first.fit(X, y, init="map", map_epochs=4, **kw)
    assert len(first.map_history["loss"]) == 4
    again = _linear_bnn()
    assert again.fit(X, y, init="map", map_epochs=4, **kw)["loss"] == history["loss"]
    assert not hasattr(again, "map_history")  # no MAP phase: the file's state was restored
    assert torch.equal(_locs(again), _locs(first))
    with pytest.raises(ValueError, match="resume: .* init='map', this fit has init=None"):
        _linear_bnn().fit(X, y, **kw)


def test_point_estimate_parameters_are_fitted_with_the_weights():
    """``exclude="*.bias"`` keeps the bias a plain parameter (no prior): the MAP phase fits it
    with the weights, to the closed-form mode with prior precision 0 on the bias. Tolerance as
    in the full-batch test above (deterministic gradients, step decayed to 0)."""
    import pyro.distributions as dist

    X, y = _linear_data()
    phi = torch.cat([X, torch.ones(len(X), 1)], 1).double()
    precision = torch.diag(torch.tensor([1.0, 1.0, 1.0, 0.0])).double() + phi.T @ phi / NOISE**2
    mode = torch.linalg.solve(precision, phi.T @ y.double() / NOISE**2).squeeze(-1)
    _, std = _exact(X, y)
    prior = bp.priors.IIDPrior(dist.Normal(0.0, 1.0), exclude="*.bias")
    bnn = _linear_bnn(prior=prior)
    bnn.fit(
        X, y, epochs=0, batch_size=None, lr=0.05, init="map", map_epochs=300, progress=False,
        seed=0,
    )  # fmt: skip
    assert list(bnn.guide.means()) == ["net.0.weight"]
    bias = dict(bnn.named_parameters())["net.0.bias"].detach()
    fitted = torch.cat([bnn.guide.means()["net.0.weight"].ravel(), bias]).double()
    assert ((fitted - mode).abs() / std).max() < 0.01, (fitted, mode)
    # the bias's missing prior moves the mode by 0.026 std: more than the tolerance, so a MAP
    # phase that put a prior on the point-estimate bias would fail the line above
    assert ((mode - _exact(X, y)[0]).abs() / std).max() > 0.02


def test_a_continued_fit_restarts_the_scales_at_init_scale():
    """``init="map"`` on a fitted model runs the MAP phase from its current means and resets
    every scale that SVI had moved to ``init_scale``."""
    X, y = _linear_data(40)
    bnn = _linear_bnn(init_scale=0.05)
    bnn.fit(X, y, epochs=30, batch_size=None, lr=0.05, progress=False, seed=0)
    moved = bnn.guide.scales()["net.0.weight"]
    assert not torch.allclose(moved, torch.full_like(moved, 0.05), atol=1e-3)
    bnn.fit(X, y, epochs=0, init="map", map_epochs=2, progress=False, seed=0)
    for scale in bnn.guide.scales().values():
        assert torch.allclose(scale, torch.full_like(scale, 0.05))


# ------------------------------------------------------------------ the MAP phase's parts
def test_the_map_loss_with_a_learned_noise_counts_the_log_scales_jacobian():
    """With a learned noise the guide's mean is ``u = log sigma``: the MAP loss is the negative
    log joint of ``sigma`` plus ``log |d sigma / du| = u`` (the mode of the density on ``u``,
    where the guide's Gaussian lives), computed here by hand."""
    from bnn_pyro.methods.vi.map_init import _neg_log_joint

    X, y = _linear_data(30)
    bnn = bp.VariationalBNN(bp.nn.mlp(3, [], 1), bp.Gaussian(scale="learned"))
    bnn.setup_guide(X, y)
    guide = bnn.guide
    with torch.no_grad():
        guide.locs[guide.param_key("likelihood.scale")].fill_(-1.2)
    w = guide.means()
    sigma = torch.tensor(-1.2).exp()
    f = X @ w["net.0.weight"].T + w["net.0.bias"]
    normal = torch.distributions.Normal
    log_joint = (
        normal(f, sigma).log_prob(y).sum()
        + normal(0.0, 1.0).log_prob(w["net.0.weight"]).sum()
        + normal(0.0, 1.0).log_prob(w["net.0.bias"]).sum()
        + bnn.likelihood.noise_prior(f).log_prob(sigma.reshape(1)).sum()
    )
    loss = float(_neg_log_joint(bnn, len(X))(X, y).detach())
    assert loss == pytest.approx(float(-(log_joint + torch.tensor(-1.2))), rel=1e-5)


def test_a_latent_site_the_guide_lacks_is_refused_by_name():
    from bnn_pyro.methods.vi.map_init import _neg_log_joint

    X, y = _linear_data(10)
    bnn = _linear_bnn()
    bnn.setup_guide(X, y)
    model = bnn.model

    def with_extra(*args, **kwargs):
        import pyro
        import pyro.distributions as dist

        pyro.sample("extra", dist.Normal(0.0, 1.0))
        return model(*args, **kwargs)

    bnn.model = with_extra
    with pytest.raises(ValueError) as caught:
        _neg_log_joint(bnn, len(X))(X, y)
    assert str(caught.value) == "init='map': the model has latent sites the guide lacks: ['extra']"


def test_check_init_names_the_model_and_guide_it_refuses_and_counts_the_epochs():
    from bnn_pyro.methods.vi.map_init import check_init

    with pytest.raises(ValueError) as caught:
        check_init(object(), "map", None, 8)
    assert str(caught.value) == (
        "init='map' needs a VariationalBNN with the mean-field guide (guide='meanfield'), got a "
        "object"
    )  # no net of weight sites: named by its class alone
    import types

    with pytest.raises(ValueError) as caught:  # a net but no guide spec: the guide's type
        check_init(types.SimpleNamespace(net=None, guide=None), "map", None, 8)
    assert str(caught.value).endswith("got a SimpleNamespace with guide='NoneType'")
    with pytest.raises(ValueError) as caught:
        check_init(_linear_bnn(guide="normal"), "map", None, 8)
    assert str(caught.value).endswith("got a VariationalBNN with guide='normal'")
    hidden = bp.HiddenLayerBNN(3, [4], 1, bp.Gaussian(scale=NOISE))  # no net: its class alone
    with pytest.raises(ValueError) as caught:
        check_init(hidden, "map", None, 8)
    assert str(caught.value).endswith("got a HiddenLayerBNN")
    bnn = _linear_bnn()
    assert (check_init(bnn, "map", None, 3), check_init(bnn, "map", None, 9)) == (1, 2)
    with pytest.raises(ValueError) as caught:
        check_init(bnn, "map", 0, 8)
    assert str(caught.value) == "map_epochs must be an int >= 1, got 0"


def test_the_map_phase_is_named_in_its_divergence_and_its_progress_bar(capsys):
    X, y = _linear_data(40)
    bnn = _linear_bnn()
    with pytest.raises(
        bp.exceptions.TrainingDivergedError, match=r"^map: the loss is (nan|inf) at epoch 1"
    ):
        bnn.fit(X, y, epochs=1, lr=1e30, init="map", map_epochs=3, progress=False)
    capsys.readouterr()
    bnn = _linear_bnn()
    bnn.fit(X, y, epochs=0, init="map", map_epochs=2, progress=False, seed=0)
    assert capsys.readouterr().err == ""  # fit's progress=False reaches the MAP phase
    bnn = _linear_bnn()
    bnn.fit(X, y, epochs=0, init="map", map_epochs=2, progress=True, seed=0)
    assert re.search(r"(^|\s)map\b", capsys.readouterr().err)  # and progress=True
    from bnn_pyro.methods.vi.map_init import map_phase

    map_phase(bnn, lambda: [(X, y)], dataset_size=len(X), epochs=2, lr=0.01)  # default: a bar
    assert re.search(r"(^|\s)map\b", capsys.readouterr().err)


def test_local_reparameterization_is_back_on_after_the_map_phase():
    X, y = _linear_data(40)
    bnn = _linear_bnn(local_reparameterization=True)
    bnn.fit(X, y, epochs=1, init="map", map_epochs=2, progress=False, seed=0)
    assert bnn.local_reparameterization == "local"


def test_fit_runs_a_quarter_of_its_epochs_of_map_by_default():
    """``init="map"`` without ``map_epochs``: ``epochs // 4`` MAP epochs (at least one)."""
    X, y = _linear_data(40)
    for epochs, expected in ((12, 3), (2, 1)):
        bnn = _linear_bnn()
        bnn.fit(X, y, epochs=epochs, init="map", progress=False, seed=0)
        assert len(bnn.map_history["loss"]) == expected
