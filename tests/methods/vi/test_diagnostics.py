"""Per-layer diagnostics (issue 12, item 5): ``kl/<site>`` and ``std/<site>`` in the history,
checked against closed forms computed independently, and the PosteriorCollapseWarning."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F

import bnn_pyro as bp
import bnn_pyro.training.resume as resume_module
from bnn_pyro.methods.vi.diagnostics import LayerDiagnostics

torch.manual_seed(0)
X = torch.randn(64, 2)
Y = torch.sin(2 * X[:, :1]) + 0.5 * X[:, 1:] + 0.05 * torch.randn(64, 1)


def _fit(bnn, expect_quiet: bool = False, **options):
    kw = {"epochs": 1, "batch_size": None, "progress": False, "seed": 0, **options}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", bp.PosteriorCollapseWarning)
        history = bnn.fit(X, Y, **kw)
    found = [w for w in caught if issubclass(w.category, bp.PosteriorCollapseWarning)]
    if expect_quiet:
        assert not found, [str(w.message) for w in found]
    return history, [str(w.message) for w in found]


def _vbnn(hidden=(8,), prior_scale=1.0):
    torch.manual_seed(1)
    prior = bp.IIDPrior(bp.dist.Normal(0.0, prior_scale))
    return bp.VariationalBNN(bp.nn.mlp(2, list(hidden), 1), bp.Gaussian(0.1), prior=prior)


def test_layer_kls_sum_to_the_meanfield_elbo_kl():
    # SGD with lr=1e-30 leaves every float32 parameter bit-identical (|lr * g| is far below
    # half an ulp of any parameter), so the row's KL, read after the step, is taken at the
    # parameters the ELBO saw. Under elbo="meanfield" the history's "kl" is (loss - nll): the
    # exact Gaussian KL of TraceMeanField_ELBO, up to float32 rounding of the difference of two
    # sums of size |loss| ~ 1e3: a few ulp of 1e3, i.e. ~1e-4 absolute.
    bnn = _vbnn()
    history, _ = _fit(bnn, epochs=2, elbo="meanfield", optimizer=torch.optim.SGD, lr=1e-30)
    sites = bnn.guide.site_names()
    for epoch in range(2):
        parts = sum(history[f"kl/{s}"][epoch] for s in sites)
        assert parts == pytest.approx(history["kl"][epoch], rel=1e-5, abs=1e-3)
    # and against the model's own closed form (a Pyro trace of the priors) at the end
    assert math.fsum(history[f"kl/{s}"][-1] for s in sites) == pytest.approx(
        float(bnn.kl_divergence().detach()), rel=1e-6
    )
    assert history["kl"][-1] > 1.0  # not a vacuous 0 == 0


def test_layer_kl_matches_the_gaussian_formula_and_std_the_softplus_mean():
    bnn = _vbnn(prior_scale=0.5)
    history, _ = _fit(bnn, epochs=5, lr=0.05)
    for site in bnn.guide.site_names():
        key = site.replace(".", "__")
        m, s = bnn.guide.locs[key].detach().double(), F.softplus(bnn.guide.rhos[key].detach())
        s = s.double()
        # KL(N(m, s) || N(0, sp)) = log(sp / s) + (s^2 + m^2) / (2 sp^2) - 1/2, elementwise
        kl = (math.log(0.5) - s.log() + (s**2 + m**2) / (2 * 0.25) - 0.5).sum()
        # float32 sums of ~100 terms against a float64 one: relative error ~1e-6
        assert history[f"kl/{site}"][-1] == pytest.approx(float(kl), rel=1e-5)
        assert history[f"std/{site}"][-1] == pytest.approx(float(s.mean()), rel=1e-6)
    assert len(history["std/net.0.weight"]) == 5


def test_hidden_layer_bnn_layer_kls_sum_to_its_own_kl():
    torch.manual_seed(2)
    bnn = bp.HiddenLayerBNN(2, [8], 1, bp.Gaussian(0.1), prior_scale=0.7)
    history, _ = _fit(bnn, epochs=3, lr=0.05)
    total = history["kl/layer0"][-1] + history["kl/layer1"][-1]
    # HiddenLayer's own KL formula (bnn_pyro.distributions), float32 against float32
    assert total == pytest.approx(float(bnn.kl_divergence().detach()), rel=1e-5)
    hand = F.softplus(bnn.rhos[1].detach()).mean()
    assert history["std/layer1"][-1] == pytest.approx(float(hand), rel=1e-6)


def test_unchanged_scales_warn_and_name_the_layers():
    _, messages = _fit(_vbnn(), epochs=1, lr=1e-6)
    assert len(messages) == 1
    assert "stayed at their initial value" in messages[0]
    for site in ("net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"):
        assert f"'{site}' (" in messages[0]
    assert "more epochs" in messages[0] and "higher lr" in messages[0]


def test_a_trained_regression_does_not_warn():
    bnn = _vbnn(hidden=(16,))
    history, _ = _fit(bnn, expect_quiet=True, epochs=300, lr=0.03)
    assert history["nll"][-1] < history["nll"][0] / 10  # it did learn


def test_a_layer_forced_onto_its_prior_warns():
    # kl_weight=1e4 makes the KL outweigh the data 10^4 to 1: every layer's posterior goes to
    # its prior N(0, 1) (KL per weight -> 0, std -> 1), i.e. the net learns nothing.
    bnn = _vbnn()
    history, messages = _fit(bnn, epochs=300, lr=0.05, kl_weight=1e4)
    assert len(messages) == 1
    assert "'net.0.weight' (" in messages[0] and "collapsed onto its prior" in messages[0]
    assert "kl_weight" in messages[0]
    # the prior's std is 1; the noise of SVI keeps a forced layer within ~10% of it (0.93-0.96
    # seen), a layer trained at kl_weight=1 is at 0.03-0.1 (test_a_trained_regression...)
    assert history["std/net.0.weight"][-1] == pytest.approx(1.0, abs=0.15)


def test_other_guides_get_no_layer_entries():
    torch.manual_seed(1)
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1), guide="lowrank")
    history, messages = _fit(bnn, epochs=2)
    assert not [k for k in history if "/" in k] and not messages
    assert LayerDiagnostics.for_model(torch.nn.Linear(1, 1)) is None


def test_history_plot_draws_layer_keys():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    history, _ = _fit(_vbnn(), epochs=3, lr=0.05)
    ax = history.plot(keys=("kl/net.0.weight", "std/net.2.weight"))
    assert [line.get_label() for line in ax.get_lines()] == ["kl/net.0.weight", "std/net.2.weight"]
    assert list(ax.get_lines()[0].get_ydata()) == history["kl/net.0.weight"]


class _Stop(Exception):
    pass


def test_layer_entries_survive_a_resume(tmp_path, monkeypatch):
    monkeypatch.setattr(resume_module, "SAVE_SECONDS", 0.0)

    def stop_at(epoch_to_stop):
        def callback(method, epoch, history):
            if epoch == epoch_to_stop:
                raise _Stop

        return callback

    opts = {"epochs": 6, "lr": 0.05}
    full, _ = _fit(_vbnn(), **opts)
    with pytest.raises(_Stop):
        _fit(_vbnn(), callbacks=[stop_at(3)], resume=tmp_path / "run.pt", **opts)
    resumed, _ = _fit(_vbnn(), resume=tmp_path / "run.pt", **opts)
    keys = [k for k in full if "/" in k]
    assert keys and all(resumed[k] == full[k] for k in keys)  # bit-identical, all 6 epochs


def _sites(**shapes_and_moved):
    """Synthetic mean-field sites: ``name=(shape, moved)``; a moved site's stds are 3x the
    initial 0.01, an unmoved one's 0.01 exactly."""
    from bnn_pyro.guides import inverse_softplus

    sites = {}
    for name, (shape, moved) in shapes_and_moved.items():
        std = torch.full(shape, 0.03 if moved else 0.01)
        sites[name] = (torch.zeros(shape), inverse_softplus(std))
    return sites


def test_a_small_site_that_stayed_is_not_flagged_while_the_others_moved():
    """An output bias or a learned noise (one element) can sit at the initial std where it
    belongs; judged alone, only sites of MIN_ELEMENTS or more are flagged, or all when none
    moved."""
    from bnn_pyro.methods.vi.diagnostics import MIN_ELEMENTS

    small = (MIN_ELEMENTS - 1,)
    diag = LayerDiagnostics(_sites(w=((4, 5), True), b=(small, False)), {}, 0.01)
    assert diag.problems() == []
    diag = LayerDiagnostics(_sites(w=((4, 5), True), v=((MIN_ELEMENTS,), False)), {}, 0.01)
    assert "'v' (0.00%)" in diag.problems()[0] and "'w'" not in diag.problems()[0]
    diag = LayerDiagnostics(_sites(w=((4, 5), False), b=(small, False)), {}, 0.01)
    assert "'w' (" in diag.problems()[0] and "'b' (" in diag.problems()[0]


def test_a_layer_at_its_prior_is_underfitting_only_where_the_fit_is_no_better_than_none():
    """The middle layer of a 2-32-32-2 net on two moons sits at its prior (mean-field VI prunes
    a layer it does not need) while the fit's NLL is about half the class frequencies': no
    warning. The same layer's figures with an NLL no better than the null one: the warning."""
    from bnn_pyro.datasets import two_moons

    X2, y2 = two_moons(n=500, noise=0.15, seed=0)
    torch.manual_seed(0)
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [32, 32], 2), bp.Categorical())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", bp.PosteriorCollapseWarning)
        history = bnn.fit(X2, y2, epochs=200, batch_size=64, lr=1e-2, progress=False, seed=0)
    assert not [str(w.message) for w in caught if w.category is bp.PosteriorCollapseWarning]
    null = bp.Categorical().null_nll(y2)
    assert history["nll"][-1] < 0.6 * null  # the fit is good ...
    diag = LayerDiagnostics.for_model(bnn)
    assert history["kl/net.2.weight"][-1] / (32 * 32) < 0.1  # ... with its middle layer pruned
    assert diag.problems(history["nll"][-1], null) == []
    found = diag.problems(null, null)  # an NLL no better than the null one
    assert "'net.2.weight' (" in found[0] and "collapsed onto its prior" in found[0]


# ------------------------------------------------------------------ the parts, on given numbers
def _diagnostics(stds: dict[str, float], prior_std: float = 2.0, numel: int = 20):
    """Sites of ``numel`` weights at mean 0 with the given posterior stds, each against a
    ``Normal(0, prior_std)`` prior, started at ``init_scale`` 0.01."""
    from bnn_pyro.guides import inverse_softplus

    sites = {
        name: (torch.zeros(numel), inverse_softplus(torch.full((numel,), std)))
        for name, std in stds.items()
    }
    priors = {name: torch.distributions.Normal(0.0, prior_std) for name in stds}
    return LayerDiagnostics(sites, priors, 0.01)


def test_a_posterior_is_at_its_prior_only_with_its_std_near_the_priors():
    """KL per weight below 0.1 nats in both cases (``r = s / s_p`` of 1.1 and 1.3: 0.0097 and
    0.083 nats); only the std within 25% of the prior's (1.1, not 1.3) is a collapse."""
    near, far = _diagnostics({"near": 2.2, "far": 2.6}).problems()[0], _diagnostics({"far": 2.6})
    assert near.startswith("the posterior of 'near' (0.0097 nats/weight, std 2.2) collapsed")
    assert "'far'" not in near and far.problems() == []


def test_both_findings_are_warned_as_one_message():
    diag = _diagnostics({"stayed": 0.01, "collapsed": 2.2})
    with pytest.warns(bp.exceptions.PosteriorCollapseWarning) as caught:
        diag.check()
    assert str(caught[0].message) == (
        "the posterior stds of 'stayed' (0.00%) stayed at their initial value 0.01 (mean "
        "relative change in brackets): train for more epochs or with a higher lr; the posterior "
        "of 'collapsed' (0.0097 nats/weight, std 2.2) collapsed onto its prior: the layer "
        "learned nothing from the data (underfitting); use a smaller kl_weight or KL annealing "
        "(linear_annealing), a smaller prior scale, or more epochs"
    )


def test_a_prior_without_a_closed_form_kl_gets_no_kl_entry_and_is_not_tried_again():
    diag = _diagnostics({"w": 0.5})
    diag.priors["w"] = torch.distributions.StudentT(3.0)  # no KL(Normal || StudentT) in torch
    assert set(diag.row()) == {"std/w"} and "w" not in diag.priors


def test_a_learned_priors_kl_is_read_against_its_scales_as_they_are_now():
    """The prior's scales move during the fit: each row's KL is against the current ones (the
    model's own closed-form KL after the fit)."""
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [8], 1), bp.Gaussian(0.1), prior=bp.LearnedNormalPrior())
    history = bnn.fit(X, Y, epochs=20, lr=0.05, progress=False, seed=0)
    kl = sum(v[-1] for k, v in history.items() if k.startswith("kl/"))
    assert kl == pytest.approx(float(bnn.kl_divergence().detach()), rel=1e-5)
    assert bnn.prior.scales()["0"] != pytest.approx(1.0, abs=1e-3)  # the prior did move


def test_a_float64_model_is_diagnosed_in_float64():
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [8], 1), bp.Gaussian(0.1)).double()
    history = bnn.fit(X.double(), Y.double(), epochs=2, progress=False, seed=0)
    assert any(k.startswith("kl/") for k in history)
