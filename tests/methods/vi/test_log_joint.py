"""LogJoint, the model's log joint at given weights (one model or K stacked), term by term:
against Pyro's own distributions on the same values, its refusals word for word, which priors
it takes as one, its caches, and its tensors on the values' device (a ``meta`` default device
standing in for a GPU).

Tolerances: float64 values throughout, the same sums in another order, so 1e-12 relative."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch

import bnn_pyro as bp
from bnn_pyro.methods.vi.log_joint import LogJoint, _one_setting
from bnn_pyro.priors.base import Prior
from bnn_pyro.weight_distributions import SharedNormal

K, D = 3, 4


def _bnns(likelihood=lambda k: bp.Gaussian(0.3 + 0.1 * k), prior=lambda k: None, k=K):
    models = []
    for i in range(k):
        torch.manual_seed(i)
        models.append(
            bp.VariationalBNN(bp.nn.mlp(D, [5], 2), likelihood(i), prior=prior(i)).double()
        )
    return models


def _values(bnns, lead=(K,), seed=0):
    g = torch.Generator().manual_seed(seed)
    return {
        s.name: torch.randn(*lead, *s.shape, generator=g, dtype=torch.float64)
        for s in bnns[0].evaluator.sites
    }


def _own_log_prior(bnn, values):
    """Pyro's own density of one model's weights: each site's prior distribution, summed."""
    from bnn_pyro.nn.pyro_net import site_prior

    modules = dict(bnn.net.named_modules(prefix="net"))
    total = 0.0
    for s in bnn.evaluator.sites:
        d = site_prior(
            modules[f"net.{s.module_name}".rstrip(".")],
            prior=bnn.prior,
            param_name=s.param_name,
            shape=s.shape,
            name=s.name,
        )
        total = total + dist.Normal(d.mean, d.stddev).log_prob(values[s.name]).sum()
    return total


@pytest.mark.parametrize("particles", [0, 2])
def test_the_stacked_prior_is_each_members_own(particles):
    """K members with their own Normal priors (another loc and scale each), with and without
    particles: row k (and particle p) is member k's prior density of its own values, as
    ``torch.distributions.Normal`` scores them."""
    bnns = _bnns(prior=lambda k: bp.IIDPrior(dist.Normal(0.1 * k, 0.5 + k)))
    joint = LogJoint(bnns, stacked=True, particles=particles)
    lead = (K, particles) if particles else (K,)
    values = _values(bnns, lead)
    got = joint.log_prior(values, values["net.0.weight"])
    assert got.shape == lead
    for k in range(K):
        for p in range(particles or 1):
            own = {n: v[k, p] if particles else v[k] for n, v in values.items()}
            want = _own_log_prior(bnns[k], own)
            torch.testing.assert_close(got[k, p] if particles else got[k], want, rtol=1e-12, atol=0)
    assert all(kind == "normal" for kind, _ in joint.priors(values["net.0.weight"]).values())


def test_one_models_prior_and_its_particles():
    bnn = _bnns(k=1)[0]
    one, particles = LogJoint([bnn], stacked=False), LogJoint([bnn], stacked=False, particles=3)
    values = _values([bnn], ())
    torch.testing.assert_close(one.log_prior(values, values["net.0.weight"]),
                               _own_log_prior(bnn, values), rtol=1e-12, atol=0)  # fmt: skip
    draws = _values([bnn], (3,), seed=1)
    got = particles.log_prior(draws, draws["net.0.weight"])
    want = [_own_log_prior(bnn, {n: v[p] for n, v in draws.items()}) for p in range(3)]
    torch.testing.assert_close(got, torch.stack(want), rtol=1e-12, atol=0)
    leads = [one.lead, particles.lead, LogJoint([bnn], stacked=False, particles=1).lead]
    assert leads + [LogJoint(_bnns(), stacked=True, particles=2).lead] == [0, 1, 1, 2]


def test_one_models_shifted_prior_site_by_site():
    """The site-by-site path (the stacked SG-MCMC potential's) of a prior whose loc is a
    number other than 0 centres the weights on it: Pyro's density of the same values."""
    bnn = _bnns(prior=lambda k: bp.IIDPrior(dist.Normal(1.0, 2.0)), k=1)[0]
    values = _values([bnn], ())
    got = LogJoint([bnn], stacked=False).log_prior(values, values["net.0.weight"])
    torch.testing.assert_close(got, _own_log_prior(bnn, values), rtol=1e-12, atol=0)


class _Mixed(Prior):
    """Member ``k``'s prior: ``N(1 + k/10, s^2)`` on the weights, the library's SharedNormal
    with a scale of its own per layer (``s = 0.5`` on the first, 1.5 after), and a Laplace on
    the biases (sites the flat vector's Gaussian terms leave to their own density), the two
    kinds interleaved in the model's order."""

    def __init__(self, k: int = 0) -> None:
        super().__init__()
        self.k = k

    def scale(self, name):
        return 0.5 if name == "net.0.weight" else 1.5

    def distribution(self, module, param_name, device, dtype, *, name=None):
        if param_name == "weight":
            return SharedNormal(1.0 + self.k / 10, self.scale(name), device, dtype)
        t = lambda v: torch.tensor(v, device=device, dtype=dtype)  # noqa: E731
        return dist.Laplace(t(0.1), t(2.0))


def _mixed_layout(bnns):
    """The net's sites end to end, then a real site that is no net site (a likelihood's)."""
    return [(s.name, s.shape.numel()) for s in bnns[0].evaluator.sites] + [("likelihood.c", 3)]


def _parts(flat, layout):
    """``{name: (*lead, size)}`` slices of a flat tensor, by the layout."""
    return dict(zip((n for n, _ in layout), flat.split([n for _, n in layout], -1), strict=True))


@pytest.mark.parametrize("stacked", [False, True])
def test_the_flat_priors_score_as_torchs_own_distributions(stacked):
    """The weights of a flat vector that also holds Laplace-prior biases and a site with no
    prior of the net's: ``log p`` (flat Gaussian weights + the biases site by site) is the sum of
    torch's ``Normal``/``Laplace`` densities, member by member, with and without the flat
    vector; ``kl`` is torch's closed-form ``KL(N(m, s) || N(loc0, scale0))`` over the weights
    alone (its mask leaves out the biases' and the other site's log-scales)."""
    k = K if stacked else 1
    bnns = _bnns(prior=_Mixed, k=k)
    lead = (K,) if stacked else ()
    layout, joint = _mixed_layout(bnns), LogJoint(bnns, stacked=stacked)
    g = torch.Generator().manual_seed(3)
    z = torch.randn(*lead, sum(n for _, n in layout), generator=g, dtype=torch.float64)
    scale = torch.rand(z.shape, generator=g, dtype=torch.float64) + 0.1
    sites = {s.name: s for s in bnns[0].evaluator.sites}
    values = {
        n: v.reshape(*lead, *sites[n].shape) for n, v in _parts(z, layout).items() if n in sites
    }
    flat = joint.flat_priors(z, layout)
    assert flat.sites == {n for n in sites if n.endswith("weight")}

    def own(i, of, kl):  # member i's terms from torch's distributions
        total, t = 0.0, lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
        for n, v in _parts(of, layout).items():
            v = v[i] if stacked else v
            prior = _Mixed(i)
            if n.endswith("weight"):
                p = torch.distributions.Normal(t(1.0 + i / 10), t(prior.scale(n)))
                if kl:
                    s = _parts(scale, layout)[n]
                    q = torch.distributions.Normal(v, s[i] if stacked else s)
                    total = total + torch.distributions.kl_divergence(q, p).sum()
                    continue
            elif n.endswith("bias") and not kl:
                p = torch.distributions.Laplace(t(0.1), t(2.0))
            else:
                continue
            total = total + p.log_prob(v).sum()
        return total

    want = torch.stack([own(i, z, False) for i in range(k)]).reshape(lead)
    torch.testing.assert_close(joint.log_prior(values, z, (z, layout)), want, rtol=1e-12, atol=0)
    torch.testing.assert_close(joint.log_prior(values, z), want, rtol=1e-12, atol=0)
    want_kl = torch.stack([own(i, z, True) for i in range(k)]).reshape(lead)
    torch.testing.assert_close(flat.kl(z, scale, len(lead)), want_kl, rtol=1e-12, atol=0)


def test_the_flat_priors_are_kept_per_dtype_and_prior_on_the_values_device():
    """Kept per dtype and prior objects (another prior object is read anew); made in the
    values' dtype (a float32 constant is another number) and on their device: under a ``meta``
    default device the same float64 CPU tensors as outside it."""
    bnns = _bnns(prior=_Mixed)
    layout, joint = _mixed_layout(bnns), LogJoint(bnns, stacked=True)
    like = torch.zeros((), dtype=torch.float64)
    first = joint.flat_priors(like, layout)
    assert joint.flat_priors(like, layout) is first
    single = joint.flat_priors(like.float(), layout)
    assert single is not first and single.half_precision.dtype == torch.float32
    bnns[1].prior = _Mixed(5)
    again = joint.flat_priors(like, layout)
    assert again is not first  # (the distributions themselves are cached on the layers)
    with torch.device("meta"):
        moved = LogJoint(bnns, stacked=True).flat_priors(like, layout)
    for name in ("loc", "half_precision", "mask", "norm", "kl_const"):
        got, want = getattr(moved, name), getattr(again, name)
        assert got.device.type == "cpu" and got.dtype == torch.float64, name
        assert torch.equal(got, want), name


def test_refusals_name_the_problem():
    with pytest.raises(ValueError) as info:
        LogJoint(_bnns(k=2), stacked=False)
    assert str(info.value) == "one model's log joint takes one model"
    mixed = _bnns(likelihood=lambda k: bp.Gaussian(0.3) if k == 0 else bp.Bernoulli(), k=2)
    with pytest.raises(ValueError) as info:
        LogJoint(mixed, stacked=True)
    assert str(info.value) == "the models' likelihoods must be of one class"


def test_which_priors_count_as_one():
    """One object, or equal settings; other settings, settings that hold several-element
    tensors, or settings that cannot be written out count as the members' own."""
    a = bp.IIDPrior(dist.Laplace(0.0, 1.0))
    assert _one_setting([a, a]) and _one_setting([a, bp.IIDPrior(dist.Laplace(0.0, 1.0))])
    assert not _one_setting([a, bp.IIDPrior(dist.Laplace(0.0, 2.0))])
    assert not _one_setting([bp.IIDPrior(dist.Laplace(0.0, 2.0)), a, a])  # the first against all

    class Vector(bp.IIDPrior):  # settings with a two-element tensor: no one truth value
        def config(self):
            return {"loc": torch.zeros(2)}

    assert not _one_setting([Vector(dist.Normal(0.0, 1.0)), Vector(dist.Normal(0.0, 1.0))])

    class Unwritable(bp.IIDPrior):
        def config(self):
            raise ValueError("cannot be saved")

    unwritable = Unwritable(dist.Normal(0.0, 1.0))
    assert not _one_setting([unwritable, Unwritable(dist.Normal(0.0, 1.0))])
    assert _one_setting([unwritable, unwritable])  # one object: its settings are not read
    laplace = _bnns(prior=lambda k: bp.IIDPrior(dist.Laplace(0.0, 1.0)))
    assert LogJoint(laplace, stacked=True).one_prior
    own = _bnns(prior=lambda k: bp.IIDPrior(dist.Laplace(0.0, 1.0 + k)))
    assert not LogJoint(own, stacked=True).one_prior
    values = _values(own)
    got = LogJoint(own, stacked=True).log_prior(values, values["net.0.weight"])
    from bnn_pyro.nn.pyro_net import site_prior

    for k, bnn in enumerate(own):
        modules = dict(bnn.net.named_modules(prefix="net"))
        want = sum(
            site_prior(modules[f"net.{s.module_name}"], prior=bnn.prior, param_name=s.param_name,
                       shape=s.shape, name=s.name).log_prob(values[s.name][k]).sum()
            for s in bnn.evaluator.sites
        )  # fmt: skip
        torch.testing.assert_close(got[k], want, rtol=1e-12, atol=0)


def test_the_priors_are_read_once_per_device_dtype_and_prior():
    """Fixed priors are kept (site_priors is not called again), per dtype and per prior
    object: a dtype of its own gets constants of its own, and another prior object is read
    anew (the distributions themselves are the prior's, cached on the layers)."""
    bnns = _bnns()
    joint = LogJoint(bnns, stacked=True)
    calls = []
    read = joint.site_priors
    joint.site_priors = lambda site: calls.append(site.name) or read(site)
    values = _values(bnns)
    first = joint.log_prior(values, values["net.0.weight"])
    sites = len(calls)
    again = joint.log_prior(values, values["net.0.weight"])
    assert len(calls) == sites and torch.equal(first, again)
    single = {n: v.float() for n, v in values.items()}
    assert joint.log_prior(single, single["net.0.weight"]).dtype == torch.float32
    assert len(calls) == 2 * sites
    bnns[1].prior = bp.IIDPrior(dist.Normal(0.0, 1.0))
    joint.log_prior(values, values["net.0.weight"])
    assert len(calls) == 3 * sites


def test_the_members_fixed_noise_is_stacked_once():
    calls = []

    class Counted(bp.Gaussian):
        def fixed_latents(self, f):
            calls.append(f.shape)
            return super().fixed_latents(f)

    bnns = _bnns(likelihood=lambda k: Counted(0.2 + 0.1 * k))
    joint = LogJoint(bnns, stacked=True)
    f, y = torch.randn(K, 5, 2, dtype=torch.float64), torch.randn(K, 5, 2, dtype=torch.float64)
    first = joint.row_log_likelihood(f, y, {})
    assert len(calls) == K
    torch.testing.assert_close(joint.row_log_likelihood(f, y, {}), first, rtol=0, atol=0)
    assert len(calls) == K
    for k in range(K):
        want = dist.Normal(f[k], 0.2 + 0.1 * k).log_prob(y[k]).sum(-1)
        torch.testing.assert_close(first[k], want, rtol=1e-12, atol=0)


@pytest.mark.parametrize("own", [False, True], ids=["one noise prior", "one each"])
def test_a_learned_noise_with_particles_is_each_draws_own(own):
    """K members x P particles of a learned noise ``(K, P, O)``: row ``k * P + p`` of the
    rows' log-likelihood is scored at draw ``(k, p)``, and the latent term is each draw's
    prior density: in one pass where the members' likelihoods are one, member by member where
    each has its own noise prior."""

    def likelihood(k):
        scale_prior = dist.LogNormal(0.0, 0.5 + k) if own else None
        return bp.Gaussian("learned", **({"scale_prior": scale_prior} if own else {}))

    bnns = _bnns(likelihood=likelihood)
    joint = LogJoint(bnns, stacked=True, particles=2)
    assert joint.one_likelihood is (not own)
    g = torch.Generator().manual_seed(3)
    noise = torch.rand(K, 2, 2, generator=g, dtype=torch.float64) + 0.5
    f = torch.randn(K * 2, 5, 2, generator=g, dtype=torch.float64)
    y = torch.randn(K * 2, 5, 2, generator=g, dtype=torch.float64)
    values = {**_values(bnns, (K, 2)), "likelihood.scale": noise}
    rows = joint.row_log_likelihood(f, y, values)
    latent, _ = joint.latent_terms(values, f)
    assert rows.shape == (K * 2, 5) and latent.shape == (K, 2)
    for k in range(K):
        for p in range(2):
            want = dist.Normal(f[k * 2 + p], noise[k, p]).log_prob(y[k * 2 + p]).sum(-1)
            torch.testing.assert_close(rows[k * 2 + p], want, rtol=1e-12, atol=0)
            prior = bnns[k].likelihood.noise_prior(f).log_prob(noise[k, p])
            torch.testing.assert_close(latent[k, p], prior, rtol=1e-12, atol=0)


def test_its_tensors_follow_the_values_not_the_default_device():
    """The stacked prior constants and the latent term are made on the values' device and
    dtype: under a ``meta`` default device the same float64 CPU numbers as outside it."""
    bnns = _bnns(likelihood=lambda k: bp.Gaussian("learned"))
    values = {**_values(bnns), "likelihood.scale": torch.full((K, 2), 0.7, dtype=torch.float64)}
    f = torch.zeros(K, 5, 2, dtype=torch.float64)

    def terms():
        joint = LogJoint(bnns, stacked=True)
        return joint.log_prior(values, f), joint.latent_terms(values, f)[0]

    want = terms()
    with torch.device("meta"):
        got = terms()
    for a, b in zip(got, want, strict=True):
        assert a.device.type == "cpu" and a.dtype == torch.float64
        assert torch.equal(a, b)


@pytest.mark.parametrize("stacked", [False, True])
def test_a_latent_score_is_told_whose_value_it_scores(stacked):
    """``latent_terms(score=...)`` (the mean-field objective's KL of a learned noise) hands the
    score member k's value with ``k`` (``None`` for one model), and stacks what it returns."""
    bnns = _bnns(likelihood=lambda k: bp.Gaussian("learned"), k=K if stacked else 1)
    joint = LogJoint(bnns, stacked=stacked)
    noise = torch.rand(K, 2, dtype=torch.float64) + 0.5
    values = {"likelihood.scale": noise if stacked else noise[0]}
    seen = []

    def score(k, name, prior, value):
        seen.append((k, name))
        return value.sum()

    term, _ = joint.latent_terms(values, torch.zeros(5, 2, dtype=torch.float64), score)
    members = list(range(K)) if stacked else [None]
    assert seen == [(k, "likelihood.scale") for k in members]
    torch.testing.assert_close(term, noise.sum(-1) if stacked else noise[0].sum())


@pytest.mark.parametrize("stacked", [False, True])
def test_the_librarys_latents_are_read_without_pyro_and_a_users_are_replayed(stacked):
    """A learned noise's prior comes from ``latent_priors`` (no ``sample_latents`` call, so no
    Pyro site inside a compiled graph); a user's likelihood drawing latents of its own is
    replayed through its ``sample_latents``, handed the net output (its prior may read it)."""
    k = K if stacked else 1
    bnns = _bnns(likelihood=lambda i: bp.Gaussian("learned"), k=k)
    for b in bnns:  # the instance's own attribute: the class is still the library's

        def refuse(f):
            raise AssertionError("sample_latents ran")

        b.likelihood.sample_latents = refuse
    noise = torch.rand(K, 2, dtype=torch.float64) + 0.5
    values = {"likelihood.scale": noise if stacked else noise[0]}
    f = torch.zeros(5, 2, dtype=torch.float64)
    term, _ = LogJoint(bnns, stacked=stacked).latent_terms(values, f)
    want = bp.Gaussian("learned").noise_prior(f).log_prob(noise)
    torch.testing.assert_close(term, want if stacked else want[0], rtol=1e-12, atol=0)

    class PerOutput(bp.Gaussian):  # a prior shaped by the net's output width
        def sample_latents(self, f):
            prior = dist.LogNormal(0.0, 1.0).expand([f.shape[-1]]).to_event(1)
            return {"likelihood.s": pyro.sample("likelihood.s", prior)}

    users = _bnns(likelihood=lambda i: PerOutput(0.3), k=k)
    values = {"likelihood.s": noise if stacked else noise[0]}
    term, latents = LogJoint(users, stacked=stacked).latent_terms(values, f)
    want = dist.LogNormal(0.0, 1.0).log_prob(noise).sum(-1)
    torch.testing.assert_close(term, want if stacked else want[0], rtol=1e-12, atol=0)
    assert list(latents) == ["likelihood.s"]
