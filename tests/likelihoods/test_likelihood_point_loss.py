"""``Likelihood.point_loss``: the per-row loss a point fit of the net trains on, owned by the
likelihood and read by every classic method's fit (single and stacked) and the ensemble's.

Each value is checked against an independent formula (``torch.distributions`` or the plain
definition); the fits are checked by a likelihood whose point loss is not the default one."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import bnn_pyro as bp
from bnn_pyro.likelihoods import GaussianLikelihood


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_categorical_point_loss_is_the_cross_entropy_of_each_row():
    f = torch.randn(2, 5, 4, generator=_gen(), dtype=torch.float64)  # (K, N, C)
    y = torch.randint(0, 4, (2, 5), generator=_gen(1))
    expected = -torch.log_softmax(f, -1).gather(-1, y.unsqueeze(-1)).squeeze(-1)
    got = bp.Categorical().point_loss(f, y)
    assert got.shape == (2, 5)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    # one net's rows (N, C) with labels (N,)
    torch.testing.assert_close(bp.Categorical().point_loss(f[0], y[0]), expected[0])


@pytest.mark.parametrize("scale", [0.1, 3.0, "learned"])
def test_gaussian_point_loss_is_the_squared_error_averaged_over_outputs_whatever_the_scale(scale):
    f = torch.randn(3, 6, 2, generator=_gen(), dtype=torch.float64)  # (K, N, O)
    y = torch.randn(3, 6, 2, generator=_gen(1), dtype=torch.float64)
    expected = ((f[..., 0] - y[..., 0]) ** 2 + (f[..., 1] - y[..., 1]) ** 2) / 2
    got = bp.Gaussian(scale=scale).point_loss(f, y)
    assert got.shape == (3, 6)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    # targets without the members' dimension broadcast against every member
    torch.testing.assert_close(bp.Gaussian(scale=scale).point_loss(f, y[0]), got.new_tensor(
        (((f - y[0]) ** 2).mean(-1)).tolist()))  # fmt: skip


def test_heteroscedastic_point_loss_is_the_negative_log_density_of_its_own_head():
    f = torch.randn(7, 4, generator=_gen(), dtype=torch.float64)  # (N, 2O): loc, raw scale
    y = torch.randn(7, 2, generator=_gen(1), dtype=torch.float64)
    lik = bp.HeteroscedasticGaussian(min_scale=0.05)
    scale = F.softplus(f[:, 2:]) + 0.05
    expected = -torch.distributions.Normal(f[:, :2], scale).log_prob(y).sum(-1)
    torch.testing.assert_close(lik.point_loss(f, y), expected, rtol=1e-12, atol=1e-12)


def test_bernoulli_point_loss_is_the_binary_cross_entropy_summed_over_columns():
    f = torch.randn(5, 3, generator=_gen(), dtype=torch.float64)
    y = torch.randint(0, 2, (5, 3), generator=_gen(1)).double()
    p = torch.sigmoid(f)
    expected = -(y * p.log() + (1 - y) * (1 - p).log()).sum(-1)
    torch.testing.assert_close(bp.Bernoulli().point_loss(f, y), expected, rtol=1e-10, atol=1e-10)


class _ScaleTwo(GaussianLikelihood):
    """A Gaussian whose scale is a latent it fixes at 2 (no point loss of its own)."""

    def loc_scale(self, f, latents):  # noqa: ANN001, ANN201
        return f, latents["s"]

    def fixed_latents(self, f):  # noqa: ANN001, ANN201
        return {"s": f.new_tensor(2.0)}


def test_the_default_point_loss_reads_the_likelihoods_fixed_latents():
    """A likelihood without a point loss of its own scores ``-log p`` at its fixed latents."""
    f = torch.randn(4, 2, generator=_gen(), dtype=torch.float64)
    y = torch.randn(4, 2, generator=_gen(1), dtype=torch.float64)
    expected = -torch.distributions.Normal(f, 2.0).log_prob(y).sum(-1)
    torch.testing.assert_close(_ScaleTwo().point_loss(f, y), expected, rtol=1e-12, atol=1e-12)


class _AbsoluteError(bp.Gaussian):
    """A Gaussian whose point fit minimises the absolute error (a median regression)."""

    def point_loss(self, f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (f - y).abs().mean(-1)


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = _gen(3)
    x = torch.randn(12, 2, generator=g)
    return x, 5.0 + torch.randn(12, 1, generator=g)


def _first_epoch_loss(method: bp.BaseBayesianMethod, x, y) -> float:
    # one full batch: the epoch's loss is the loss at the starting weights
    history = method.fit(x, y, epochs=1, batch_size=len(x), lr=1e-3, seed=0, progress=False)
    return history["loss"][0]


@pytest.mark.parametrize(
    "build",
    [
        lambda net, lik: bp.SWAG(net, likelihood=lik),
        lambda net, lik: bp.LaplaceApproximation(net, lik),
    ],
    ids=["swag", "laplace"],
)
def test_a_classic_fit_trains_on_the_likelihoods_point_loss(build):
    """The first epoch's loss is the likelihood's own point loss at the starting weights: the
    absolute error for a likelihood that says so, the squared error for a plain Gaussian."""
    x, y = _data()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1))
    start = [p.detach().clone() for p in net.parameters()]
    with torch.no_grad():
        out = net.eval()(x)
    absolute, squared = float((out - y).abs().mean()), float(((out - y) ** 2).mean())
    assert squared > absolute + 1.0  # targets near 5: the two losses are far apart
    got = _first_epoch_loss(build(net, _AbsoluteError(scale=1.0)), x, y)
    tol = 1e-5  # float32 rounding of a mean of 12 rows of size ~5
    assert got == pytest.approx(absolute, abs=tol)
    with torch.no_grad():
        for p, p0 in zip(net.parameters(), start, strict=True):
            p.copy_(p0)
    assert _first_epoch_loss(build(net, bp.Gaussian(scale=1.0)), x, y) == pytest.approx(
        squared, abs=tol
    )


@pytest.mark.parametrize("stacked", [True, False])
def test_stacked_fits_train_each_member_on_the_likelihoods_point_loss(stacked):
    """``fit_stacked`` of classic methods and a deep ensemble (its members stacked or one by
    one): each member's first-epoch loss is its own absolute error at its starting weights."""
    x, y = _data()
    torch.manual_seed(0)
    nets = [nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1)) for _ in range(2)]
    with torch.no_grad():
        expected = [float((n(x) - y).abs().mean()) for n in nets]
    models = [bp.SWAG(n, likelihood=_AbsoluteError(scale=1.0)) for n in nets]
    result = bp.fit_stacked(
        models, x, y, seeds=[0, 1], epochs=1, batch_size=len(x), lr=1e-3, progress=False
    )
    assert list(result["member_loss"][0]) == pytest.approx(expected, abs=1e-5)

    torch.manual_seed(1)
    ensemble = bp.DeepEnsemble(
        lambda: nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1)),
        num_models=2,
        likelihood=_AbsoluteError(scale=1.0),
    )
    with torch.no_grad():
        members = [float((m(x) - y).abs().mean()) for m in ensemble.models]
    single = ensemble.fit(
        x, y, epochs=1, batch_size=len(x), lr=1e-3, seed=0, progress=False, stacked=stacked
    )
    assert members[0] != pytest.approx(members[1], abs=1e-3)  # two different starts
    assert single["loss"][0] == pytest.approx(sum(members) / 2, abs=1e-5)
