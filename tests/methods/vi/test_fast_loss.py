"""The plain-torch ELBO of bnn_pyro.methods.vi.fast_loss is Pyro's Trace_ELBO (and, with
``analytic_kl``, its TraceMeanField_ELBO): the same loss and gradients under the same draws,
for every configuration the objective covers (``fit`` chooses it by type: test_engine.py)."""

from __future__ import annotations

import pyro
import pytest
import torch
from pyro.infer import Trace_ELBO, TraceMeanField_ELBO

import bnn_pyro as bp
from bnn_pyro.elbos.alpha import AlphaELBO
from bnn_pyro.elbos.stl import StickingTheLanding_ELBO
from bnn_pyro.methods.vi.fast_loss import DirectLoss, direct_loss_for
from bnn_pyro.priors import HierarchicalNormalPrior
from bnn_pyro.priors.base import Prior
from bnn_pyro.weight_distributions import SharedNormal

N = 200


def _data(task: str):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(64, 4, generator=g)
    raw = X[:, :2].sum(-1, keepdim=True) + 0.1 * torch.randn(64, 1, generator=g)
    if task == "categorical":
        return X, (raw[:, 0] > 0).long() + (raw[:, 0] > 1).long(), 3
    if task == "bernoulli":
        return X, (raw > 0).float(), 1
    return X, raw, 1


class _ByName(Prior):
    """A prior that reads the site it scores: ``N(0.2, 1)`` for ``net.0.weight``, ``N(0, 1)``
    for the other weights and ``N(0, 3^2)`` for the biases."""

    def distribution(self, module, param_name, device, dtype, *, name=None):
        loc = 0.2 if name == "net.0.weight" else 0.0
        scale = 1.0 if param_name == "weight" else 3.0
        return pyro.distributions.Normal(
            torch.tensor(loc, device=device, dtype=dtype),
            torch.tensor(scale, device=device, dtype=dtype),
        )


class _ReadsLatents(bp.Gaussian):
    """A user's Gaussian whose density reads the latents it is given (a noise override by
    name, absent here): it has no latent sites, so every path hands it an empty dict."""

    def loc_scale(self, f, latents):
        return f, latents.get("likelihood.override", f.new_tensor(0.4))


class _Contaminated(bp.Gaussian):
    """A user's Gaussian whose noise scale is ``0.2 + c`` with a latent ``c`` in (0, 1) of its
    own (a Beta prior): a site on the unit interval, which the mean-field guide reaches through
    a sigmoid, neither real nor positive."""

    def sample_latents(self, f):
        return {"likelihood.c": pyro.sample("likelihood.c", pyro.distributions.Beta(2.0, 2.0))}

    def loc_scale(self, f, latents):
        c = latents["likelihood.c"]  # (), or (P, 1) under Pyro's particle plate
        return f, 0.2 + (c.unsqueeze(-1) if c.dim() else c)


class _TwoLatents(bp.Gaussian):
    """A user's Gaussian with two latents of its own, one on the unit interval and one
    positive (a sigmoid site, then a LogNormal one): each drawn and scored in its turn."""

    def sample_latents(self, f):
        beta, lognormal = pyro.distributions.Beta(2.0, 2.0), pyro.distributions.LogNormal(0.0, 0.5)
        return {
            "likelihood.c": pyro.sample("likelihood.c", beta),
            "likelihood.s": pyro.sample("likelihood.s", lognormal),
        }

    def loc_scale(self, f, latents):
        return f, 0.2 + latents["likelihood.c"] * latents["likelihood.s"]


class _WeightsAndBiases(Prior):
    """The library's SharedNormal on the weights, a scale of its own per layer (the flat
    vector's Gaussian sites), and a Laplace on the biases (scored site by site), interleaved."""

    def distribution(self, module, param_name, device, dtype, *, name=None):
        if param_name == "weight":
            return SharedNormal(0.2, 0.5 if name == "net.0.weight" else 1.5, device, dtype)
        t = lambda v: torch.tensor(v, device=device, dtype=dtype)  # noqa: E731
        return pyro.distributions.Laplace(t(0.1), t(2.0))


class _Offset(bp.Gaussian):
    """A user's Gaussian whose mean is shifted by a real latent ``b`` of its own (a Normal
    prior): a real site that is no net site, drawn in the weights' flat vector and scored by
    the likelihood's own terms (not the weights' Gaussian prior, whose mask leaves it out)."""

    def sample_latents(self, f):
        return {"likelihood.b": pyro.sample("likelihood.b", pyro.distributions.Normal(0.5, 2.0))}

    def loc_scale(self, f, latents):
        b = latents["likelihood.b"]  # (), or (P, 1) under Pyro's particle plate
        return f + (b.unsqueeze(-1) if b.dim() else b), f.new_tensor(0.3)


CASES = {
    "a real latent of a user's likelihood": (_Offset, None, "regression"),
    "a latent on the unit interval": (_Contaminated, None, "regression"),
    "two latents of a user's likelihood": (_TwoLatents, None, "regression"),
    "gaussian": (lambda: bp.Gaussian(0.3), None, "regression"),
    "learned noise": (lambda: bp.Gaussian("learned"), None, "regression"),
    "categorical": (bp.Categorical, None, "categorical"),
    "bernoulli": (bp.Bernoulli, None, "bernoulli"),
    "learned prior": (lambda: bp.Gaussian(0.3), bp.LearnedNormalPrior, "regression"),
    "scale mixture prior": (lambda: bp.Gaussian(0.3), bp.ScaleMixturePrior, "regression"),
    "layerwise prior": (lambda: bp.Gaussian(0.3), bp.LayerwiseNormalPrior, "regression"),
    "prior by site name": (lambda: bp.Gaussian(0.3), _ByName, "regression"),
    "noise with no closed-form kl": (  # KL(LogNormal || HalfCauchy): log q - log p of the draw
        lambda: bp.Gaussian("learned", scale_prior=pyro.distributions.HalfCauchy(1.0)),
        None,
        "regression",
    ),
    "point-estimate biases": (
        lambda: bp.Gaussian(0.3),
        lambda: bp.IIDPrior(pyro.distributions.Normal(0.0, 1.0), exclude="*.bias"),
        "regression",
    ),
    "a Gaussian prior on the weights, a Laplace one on the biases": (
        lambda: bp.Gaussian(0.3),
        _WeightsAndBiases,
        "regression",
    ),
    "shifted prior": (
        lambda: bp.Gaussian(0.3),
        lambda: bp.IIDPrior(pyro.distributions.Normal(1.0, 2.0)),
        "regression",
    ),
    "a user's likelihood reading its latents": (_ReadsLatents, None, "regression"),
    "local reparameterization": (lambda: bp.Gaussian("learned"), None, "regression", "local"),
    "flipout": (bp.Categorical, None, "categorical", "flipout"),
}


def _bnn(case: str):
    likelihood, prior, task, *estimator = CASES[case]
    X, y, out = _data(task)
    torch.manual_seed(0)
    bnn = bp.VariationalBNN(
        bp.nn.mlp(4, [6], out),
        likelihood(),
        prior=None if prior is None else prior(),
        init_scale=0.1,
        local_reparameterization=estimator[0] if estimator else False,
    )
    bnn.train()  # (local reparameterization acts in training mode)
    y = bnn.prepare_targets(y, X)
    bnn.setup_guide(X, y, (X, y))
    with torch.no_grad():  # move the guide off its initial values so every term matters
        for p in bnn.guide.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return bnn, X, y


def _loss_and_grads(loss_fn, bnn, seed):
    pyro.set_rng_seed(seed)
    loss = loss_fn()
    params = [p for p in bnn.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return loss.detach(), [
        torch.zeros_like(p) if g is None else g for g, p in zip(grads, params, strict=True)
    ]


def _pyros_loss_and_grads(elbo_class, bnn, X, y, seed, **kwargs):
    """Pyro's own ELBO (``Trace_ELBO`` or ``TraceMeanField_ELBO``) on the model and guide, under
    the seed ``seed``: the reference a direct loss is held to."""
    elbo = elbo_class(max_plate_nesting=1)
    return _loss_and_grads(
        lambda: elbo.differentiable_loss(bnn.model, bnn.guide, X, y, **kwargs), bnn, seed
    )


@pytest.mark.parametrize(
    ("reference", "analytic_kl"), [(Trace_ELBO, False), (TraceMeanField_ELBO, True)]
)
@pytest.mark.parametrize("kl_weight", [1.0, 0.3])
@pytest.mark.parametrize("case", sorted(CASES))
def test_direct_loss_is_pyros_elbo_under_the_same_draws(case, kl_weight, reference, analytic_kl):
    # analytic_kl: TraceMeanField_ELBO scores each site by its closed-form KL where Pyro has one
    # (the Normal priors, the learned noise's LogNormal) and by log q - log p of the draw where
    # it has none (the scale mixture): the direct loss must make the same choice site by site
    bnn, X, y = _bnn(case)
    direct = direct_loss_for(bnn, analytic_kl=analytic_kl)
    assert isinstance(direct, DirectLoss)
    kwargs = dict(dataset_size=N, kl_weight=kl_weight)
    for seed in (1, 2):
        got, got_grads = _loss_and_grads(lambda: direct(X, y, **kwargs)[0], bnn, seed)
        ref, ref_grads = _pyros_loss_and_grads(reference, bnn, X, y, seed, **kwargs)
        # the same sums in another order: float32 rounding only (loss ~1e2-1e3, 1e-5 relative)
        assert torch.allclose(got, ref, rtol=1e-5), (float(got), float(ref))
        for a, b in zip(got_grads, ref_grads, strict=True):
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-4 * float(b.abs().max()) + 1e-7)


@pytest.mark.parametrize("kl_weight", [1.0, 0.3])
@pytest.mark.parametrize(
    "case",
    sorted(
        c
        for c in CASES
        if len(CASES[c]) == 3
        # (a user's own latents under particles: fit keeps Pyro's plate, why_not_plain)
        and c
        not in (
            "a latent on the unit interval",
            "two latents of a user's likelihood",
            "a real latent of a user's likelihood",
        )
    ),
)
def test_the_direct_alpha_energy_is_the_alpha_elbo_under_the_same_draws(case, kl_weight):
    """``alpha`` with ``particles``: the black-box alpha energy of ``AlphaELBO``, whose P draws
    Pyro's vectorized particle plate makes site by site as one ``(P, *shape)`` tensor, which the
    direct loss draws the same way. Tolerance as above: the same sums in another order."""
    bnn, X, y = _bnn(case)
    direct = direct_loss_for(bnn, alpha=0.5, particles=4)
    assert isinstance(direct, DirectLoss)
    kwargs = dict(dataset_size=N, kl_weight=kl_weight)
    elbo = AlphaELBO(0.5, num_particles=4)
    for seed in (1, 2):
        got, got_grads = _loss_and_grads(lambda: direct(X, y, **kwargs)[0], bnn, seed)
        ref, ref_grads = _loss_and_grads(
            lambda: elbo.differentiable_loss(bnn.model, bnn.guide, X, y, **kwargs), bnn, seed
        )
        assert torch.allclose(got, ref, rtol=1e-5), (float(got), float(ref))
        for a, b in zip(got_grads, ref_grads, strict=True):
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-4 * float(b.abs().max()) + 1e-7)
        pyro.set_rng_seed(seed)  # the data term (fit's nll) of the same draws
        torch.testing.assert_close(direct(X, y, **kwargs)[1], elbo.last_nll, rtol=1e-5, atol=0)


def test_the_alpha_energy_with_local_reparameterization_keeps_the_pyro_path():
    """Each particle's pre-activations under local reparameterization are Pyro's vectorized
    path's to draw: no direct alpha energy for such a model (the ELBO runs its own)."""
    bnn, _, _ = _bnn("local reparameterization")
    assert direct_loss_for(bnn, alpha=0.5, particles=4) is None
    assert direct_loss_for(bnn) is not None  # the ELBO's direct loss stays


@pytest.mark.parametrize(
    "both",
    [
        dict(stl=True, analytic_kl=True),
        dict(stl=True, alpha=0.5),
        dict(analytic_kl=True, alpha=1.0),
    ],
)
def test_stl_the_closed_form_kl_and_alpha_are_not_one_loss(both):
    bnn, _, _ = _bnn("gaussian")
    with pytest.raises(
        ValueError, match=r"^stl, analytic_kl and alpha are different objectives: choose one$"
    ):
        DirectLoss(bnn, particles=3, **both)


def test_direct_stl_loss_matches_the_stl_elbo():
    bnn, X, y = _bnn("learned noise")
    direct = direct_loss_for(bnn, stl=True)
    stl = StickingTheLanding_ELBO(max_plate_nesting=1)
    got, got_grads = _loss_and_grads(lambda: direct(X, y, dataset_size=N)[0], bnn, 3)
    ref, ref_grads = _loss_and_grads(
        lambda: stl.differentiable_loss(bnn.model, bnn.guide, X, y, dataset_size=N), bnn, 3
    )
    assert torch.allclose(got, ref, rtol=1e-5)
    for a, b in zip(got_grads, ref_grads, strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-4 * float(b.abs().max()) + 1e-7)


@pytest.mark.parametrize("guide", ["normal"])
def test_models_it_does_not_cover_keep_the_pyro_path(guide):
    bnn = bp.VariationalBNN(bp.nn.mlp(4, [6], 1), bp.Gaussian(0.3), guide=guide)
    assert direct_loss_for(bnn) is None
    X, y, _ = _data("regression")
    hooked = bp.VariationalBNN(bp.nn.mlp(4, [6], 1), bp.Gaussian(0.3))
    hooked.setup_guide(X, y)
    assert direct_loss_for(hooked) is not None
    hooked.net[0].register_forward_pre_hook(lambda module, inputs: None)  # a user's hook
    assert direct_loss_for(hooked) is None


@pytest.mark.parametrize(
    ("reference", "analytic_kl"), [(Trace_ELBO, False), (TraceMeanField_ELBO, True)]
)
def test_without_a_dataset_size_the_likelihood_is_unscaled(reference, analytic_kl):
    """``dataset_size=None``: the model's plate has no subsample scale, the direct loss none
    either (scale 1), the same loss as Pyro's."""
    bnn, X, y = _bnn("shifted prior")
    direct = direct_loss_for(bnn, analytic_kl=analytic_kl)
    got, _ = _loss_and_grads(lambda: direct(X, y)[0], bnn, 8)
    ref, _ = _pyros_loss_and_grads(reference, bnn, X, y, 8)
    assert torch.allclose(got, ref, rtol=1e-5)


def test_in_evaluation_mode_local_reparameterization_is_off_as_in_the_model():
    """The model samples weights, not pre-activations, outside training: so does the direct
    loss (the same draws, the same loss)."""
    bnn, X, y = _bnn("local reparameterization")
    bnn.eval()
    direct = direct_loss_for(bnn)
    got, _ = _loss_and_grads(lambda: direct(X, y, dataset_size=N)[0], bnn, 9)
    ref, _ = _pyros_loss_and_grads(Trace_ELBO, bnn, X, y, 9, dataset_size=N)
    assert torch.allclose(got, ref, rtol=1e-5)


def test_a_prior_with_latent_sites_of_its_own_keeps_the_pyro_path():
    X, y, _ = _data("regression")
    bnn = bp.VariationalBNN(bp.nn.mlp(4, [6], 1), bp.Gaussian(0.3), prior=HierarchicalNormalPrior())
    bnn.setup_guide(X, y)
    assert bnn.prior_sites and direct_loss_for(bnn) is None


class _NamedLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fX = torch.nn.Linear(4, 1)  # a module path ending in "X" (sites "net.fX.*")

    def forward(self, x):
        return self.fX(x)


class _Gained(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.gain = torch.nn.Parameter(torch.tensor(2.0))  # no layer's: a point estimate

    def forward(self, x):
        return self.gain * self.lin(x)


@pytest.mark.parametrize("net", [lambda: torch.nn.Linear(4, 1), _NamedLayer, _Gained])
def test_a_bare_layer_as_the_net_and_the_constructors_defaults_are_pyros_trace_elbo(net):
    """A net that is one layer (its sites ``net.weight``, ``net.bias``: the module path is
    ``net`` itself), holds one under a plain name or beside a point-estimate parameter (which
    the twin must be handed, and its gradient reach), and ``DirectLoss(bnn)`` with its defaults
    (``Trace_ELBO``'s estimator: no STL, no closed-form KL): Pyro's loss and gradients under the
    same draws."""
    X, y, _ = _data("regression")
    torch.manual_seed(0)
    bnn = bp.VariationalBNN(net(), bp.Gaussian(0.3), init_scale=0.1)
    bnn.setup_guide(X, y)
    direct = DirectLoss(bnn)
    got, got_grads = _loss_and_grads(lambda: direct(X, y, dataset_size=N)[0], bnn, 10)
    ref, ref_grads = _loss_and_grads(
        lambda: Trace_ELBO().differentiable_loss(bnn.model, bnn.guide, X, y, dataset_size=N),
        bnn,
        10,
    )
    assert torch.allclose(got, ref, rtol=1e-5)
    for a, b in zip(got_grads, ref_grads, strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-4 * float(b.abs().max()) + 1e-7)


def test_why_no_direct_loss_names_each_model_it_does_not_cover():
    """Read off the model's parts alone (no guide set up): a guide that is not the library's
    mean-field one, a subclass of it with its own ``forward`` too; a model without a guide
    spec named by the guide's class; missing ``prior_sites`` read as none."""
    from types import SimpleNamespace

    from bnn_pyro.guides import MeanFieldNormalGuide
    from bnn_pyro.methods.vi.fast_loss import why_no_direct_loss

    class _OwnForward(MeanFieldNormalGuide):
        def forward(self, *args, **kwargs):  # pragma: no cover - never called
            raise AssertionError

    net = torch.nn.Linear(2, 1)
    plain = object.__new__(MeanFieldNormalGuide)  # the type is what is read
    assert why_no_direct_loss(SimpleNamespace(guide=plain, net=net)) is None
    own = SimpleNamespace(guide=object.__new__(_OwnForward), net=net, guide_spec="custom")
    assert why_no_direct_loss(own) == (
        "guide='custom' is not the library's mean-field guide (guide='meanfield')"
    )
    unnamed = SimpleNamespace(guide=object(), net=net)  # no guide_spec: the guide's class
    assert why_no_direct_loss(unnamed) == (
        "guide='object' is not the library's mean-field guide (guide='meanfield')"
    )
