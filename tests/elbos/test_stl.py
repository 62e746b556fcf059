"""Sticking the landing (Roeder et al. 2017) against Trace_ELBO on Bayesian linear regression.

With orthogonal, centred features the exact posterior of ``y = [X, 1] w + eps`` (prior
``N(0, I)``, known noise ``s``) has a diagonal precision ``A = I + Phi^T Phi / s^2``, so the
mean-field guide can hold it exactly. There ``log p(w, y) - log q(w)`` is constant in ``w``:
the STL gradient is zero for every draw, while Trace_ELBO's still carries the score term of the
entropy (zero only on average). Both estimate the same loss: per draw their values are equal.
"""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch

import bnn_pyro as bp
from bnn_pyro.elbos.stl import StickingTheLanding_ELBO
from bnn_pyro.elbos.trace import FastTrace_ELBO
from bnn_pyro.guides import inverse_softplus

NOISE, N = 0.5, 64


def _orthogonal_data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    raw = torch.cat([torch.ones(N, 1), torch.randn(N, 3, generator=g)], 1)
    q, _ = torch.linalg.qr(raw.double())  # orthonormal columns, the first one constant
    X = (q[:, 1:] * N**0.5).float()  # centred (orthogonal to the constant) and mutually orthogonal
    y = X @ torch.tensor([[0.8], [-1.5], [0.3]]) + 0.7 + NOISE * torch.randn(N, 1, generator=g)
    return X, y


def _bnn_at_the_exact_posterior(X, y) -> bp.VariationalBNN:
    phi = torch.cat([X, torch.ones(N, 1)], 1).double()
    precision = torch.eye(4, dtype=torch.float64) + phi.T @ phi / NOISE**2
    off_diagonal = precision - torch.diag(torch.diagonal(precision))
    # the posterior is mean-field up to float32 rounding of X (~1e-7 relative)
    assert float(off_diagonal.abs().max()) < 1e-6 * float(torch.diagonal(precision).min())
    mean = torch.linalg.solve(precision, phi.T @ y.double() / NOISE**2).squeeze(-1)
    std = torch.diagonal(precision).rsqrt()
    bnn = bp.VariationalBNN(bp.nn.mlp(3, [], 1), bp.Gaussian(scale=NOISE))
    bnn.setup_guide(X[:2], y[:2])
    guide = bnn.guide
    with torch.no_grad():
        for name, value in (("weight", mean[:3].view(1, 3)), ("bias", mean[3:])):
            key = guide.param_key(f"net.0.{name}")
            guide.locs[key].copy_(value)
        for name, value in (("weight", std[:3].view(1, 3)), ("bias", std[3:])):
            key = guide.param_key(f"net.0.{name}")
            guide.rhos[key].copy_(inverse_softplus(value.float()))
    return bnn


def _draws(bnn, elbo, X, y, n=50):
    params = [p for p in bnn.guide.parameters()]
    losses, grads = [], []
    torch.manual_seed(1)
    for _ in range(n):
        loss = elbo.differentiable_loss(bnn.model, bnn.guide, X, y, dataset_size=N)
        grads.append(torch.cat([g.ravel() for g in torch.autograd.grad(loss, params)]))
        losses.append(float(loss.detach()))
    return torch.tensor(losses), torch.stack(grads)


def test_stl_gradient_vanishes_at_the_exact_posterior_where_trace_elbos_does_not():
    X, y = _orthogonal_data()
    bnn = _bnn_at_the_exact_posterior(X, y)
    trace_losses, trace_grads = _draws(bnn, FastTrace_ELBO(max_plate_nesting=1), X, y)
    stl_losses, stl_grads = _draws(bnn, StickingTheLanding_ELBO(max_plate_nesting=1), X, y)
    # the same draws (same seed) give the same loss values: STL changes only the gradient
    torch.testing.assert_close(stl_losses, trace_losses)
    trace_var = float(trace_grads.var(0).sum())
    stl_var = float(stl_grads.var(0).sum())
    # Tolerance: at the exact posterior every STL gradient is zero up to float32 rounding of
    # sums over 64 rows (~1e-5 relative to gradients of order 1e2); Trace_ELBO's score term has
    # variance of order N / s^2 per coordinate.
    assert stl_grads.abs().max() < 1e-2
    assert trace_var > 1.0
    assert stl_var < 1e-6 * trace_var, (stl_var, trace_var)


@pytest.mark.parametrize("elbo", ["stl", "trace"])
def test_fit_with_stl_recovers_the_exact_posterior_too(elbo):
    X, y = _orthogonal_data()
    target = _bnn_at_the_exact_posterior(X, y)
    torch.manual_seed(0)
    bnn = bp.VariationalBNN(bp.nn.mlp(3, [], 1), bp.Gaussian(scale=NOISE), init_scale=0.05)
    bnn.fit(
        X,
        y,
        epochs=2000,
        batch_size=None,
        lr=2e-2,
        elbo=elbo,
        lr_schedule="cosine",
        average=0.5,
        progress=False,
        seed=0,
    )
    got, want = bnn.guide.scales(), target.guide.scales()
    for name in want:
        # 5%: as in the exact-posterior test; a wrong entropy gradient biases the scales
        torch.testing.assert_close(got[name], want[name], rtol=0.05, atol=0.0)


def test_stl_handles_the_lognormal_site_of_a_learned_noise():
    # before: NotImplementedError for the guide's LogNormal (every fit with a learned noise).
    # A LogNormal guide equal to a LogNormal target: the STL gradient is zero for every draw
    # (log p - log q is constant), Trace_ELBO's is not.
    import pyro
    import pyro.distributions as dist

    loc = torch.tensor(0.3, requires_grad=True)
    scale = torch.tensor(0.5, requires_grad=True)

    def model():
        pyro.sample("s", dist.LogNormal(0.3, 0.5))

    def guide():
        pyro.sample("s", dist.LogNormal(loc, scale))

    torch.manual_seed(0)
    for elbo, zero in ((StickingTheLanding_ELBO(), True), (FastTrace_ELBO(), False)):
        grads = torch.stack(
            [
                torch.stack(
                    torch.autograd.grad(elbo.differentiable_loss(model, guide), [loc, scale])
                )
                for _ in range(20)
            ]
        )
        assert bool(grads.abs().max() < 1e-5) == zero
    X, y = _orthogonal_data()
    bnn = bp.VariationalBNN(bp.nn.mlp(3, [], 1), bp.Gaussian(scale="learned"))
    history = bnn.fit(X, y, epochs=20, batch_size=16, elbo="stl", progress=False, seed=0)
    assert all(map(torch.isfinite, map(torch.tensor, history["loss"])))


# ---- every kind of guide site STL scores, against the estimator written out in plain torch

XS = torch.tensor([[1.0, 0.5], [-1.0, 2.0], [0.3, -0.7]])
YS = torch.tensor([0.4, -1.2, 2.0])
KEEP = torch.tensor([True, False, True])  # the local latent of row 1 is masked out
SIZE = 6  # rows in all: the three given are a subsample, scale 6 / 3 = 2


def _model(x, y):
    w = pyro.sample("w", dist.Normal(torch.zeros(2), 1.0).to_event(1))
    s = pyro.sample("s", dist.LogNormal(0.0, 1.0))
    with pyro.plate("data", SIZE, subsample=torch.arange(3)):
        with pyro.poutine.mask(mask=KEEP):
            z = pyro.sample("z", dist.Normal(0.0, 1.0))
        pyro.sample("obs", dist.Normal(x @ w + z, s), obs=y)


def _params():
    return [
        torch.tensor([0.2, -0.4], requires_grad=True),  # m
        torch.tensor([0.5, 0.8], requires_grad=True),  # sw
        torch.tensor(-0.3, requires_grad=True),  # ls
        torch.tensor([0.1, 0.6, -0.2], requires_grad=True),  # mz
    ]


def _guide_of(params):
    m, sw, ls, mz = params

    def guide(x, y):
        pyro.sample("w", dist.Normal(m, sw).to_event(1))
        pyro.sample("s", dist.LogNormal(ls, 0.3))
        with pyro.plate("data", SIZE, subsample=torch.arange(3)), pyro.poutine.mask(mask=KEEP):
            pyro.sample("z", dist.Normal(mz, 0.5))

    return guide


def _stl_by_hand(params):
    """The single-draw STL loss: ``-(log p(w, s, z, y) - log q(w, s, z))`` with ``q``'s parameters
    detached in ``log q``, the local ``z`` terms times 2 and masked rows left out; the draws in
    the guide's order, ``w = m + sw eps``, ``s = exp(ls + 0.3 eps)``, ``z = mz + 0.5 eps``."""
    from torch.distributions import LogNormal, Normal

    m, sw, ls, mz = params
    w = m + sw * torch.randn(2)
    s = (ls + 0.3 * torch.randn(())).exp()
    z = mz + 0.5 * torch.randn(3)
    log_p = (
        Normal(0.0, 1.0).log_prob(w).sum()
        + LogNormal(0.0, 1.0).log_prob(s)
        + 2 * (Normal(0.0, 1.0).log_prob(z) * KEEP).sum()
        + 2 * Normal(XS @ w + z, s).log_prob(YS).sum()
    )
    log_q = (
        Normal(m.detach(), sw.detach()).log_prob(w).sum()
        + LogNormal(ls.detach(), 0.3).log_prob(s)
        + 2 * (Normal(mz.detach(), 0.5).log_prob(z) * KEEP).sum()
    )
    return -(log_p - log_q)


def test_stl_scores_scaled_masked_event_and_lognormal_sites_as_written_out():
    """Loss and gradient of every call (the first, Pyro's traces; the next, the fast path) are the
    plain-torch STL estimator's under the same draws."""
    params = _params()
    elbo = StickingTheLanding_ELBO(max_plate_nesting=1)
    for seed in (0, 1):
        torch.manual_seed(seed)
        got = elbo.differentiable_loss(_model, _guide_of(params), XS, YS)
        got_grads = torch.autograd.grad(got, params)
        torch.manual_seed(seed)
        want = _stl_by_hand(params)
        want_grads = torch.autograd.grad(want, params)
        torch.testing.assert_close(got, want)
        for a, b in zip(got_grads, want_grads, strict=True):
            torch.testing.assert_close(a, b)
    assert elbo.fast


def test_stl_refuses_a_guide_site_it_cannot_detach():
    rate = torch.tensor(2.0, requires_grad=True)

    def model():
        pyro.sample("g", dist.Gamma(2.0, 1.0).expand([2]).to_event(1))

    def guide():
        pyro.sample("g", dist.Gamma(2.0, rate).expand([2]).to_event(1))

    match = (
        r"^elbo='stl' needs guide sites drawn from a Normal \(the mean-field guide, AutoNormal\), "
        r"got Gamma$"
    )
    with pytest.raises(NotImplementedError, match=match):
        StickingTheLanding_ELBO().differentiable_loss(model, guide)


@pytest.mark.filterwarnings("ignore:Encountered NaN")
@pytest.mark.parametrize("validation", [True, False])
def test_a_degenerate_guide_gives_stl_the_loss_trace_elbo_gives_not_an_error(validation):
    """A guide scale of 0 (``softplus`` underflows there) in a Normal built without argument
    checks: the draw is ``loc``, ``log q(loc) = -0/0 - log 0`` is NaN for both ELBOs, and the
    detached copy STL scores with must not bring back the check the guide left out."""
    loc = torch.tensor(0.3, requires_grad=True)

    def model():
        pyro.sample("w", dist.Normal(0.0, 1.0))

    def guide():
        pyro.sample("w", dist.Normal(loc, torch.tensor(0.0), validate_args=False))

    with pyro.validation_enabled(validation):
        want = FastTrace_ELBO().differentiable_loss(model, guide)
        got = StickingTheLanding_ELBO().differentiable_loss(model, guide)
    assert torch.isnan(want) and torch.isnan(got)
