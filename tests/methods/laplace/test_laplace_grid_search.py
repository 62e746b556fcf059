"""The prior precision chosen on held-out rows (``method="gridsearch"``): the criterion against
the linear-Gaussian closed form, and the choice against laplace-torch's on a classifier."""

import copy
import math

import pytest
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import bnn_pyro as bp

GRID = [10.0**k for k in torch.linspace(-3, 3, 13).tolist()]


def _linear():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 3, generator=g, dtype=torch.float64)
    w = torch.tensor([[1.0], [-2.0], [0.5]], dtype=torch.float64)
    y = x @ w + 0.3 + 0.5 * torch.randn(40, 1, generator=g, dtype=torch.float64)
    x_val = 3 * torch.randn(25, 3, generator=g, dtype=torch.float64)
    y_val = x_val @ w + 0.3 + 0.5 * torch.randn(25, 1, generator=g, dtype=torch.float64)
    net = nn.Linear(3, 1).double()
    with torch.no_grad():  # somewhere off the data's own fit, so λ matters to the variance
        net.weight.copy_(torch.tensor([[0.8, -1.7, 0.2]]))
        net.bias.fill_(0.1)
    return net, x, y, x_val, y_val


def _closed_form(net, x, x_val, y_val, lam, sigma=0.5):
    """mean log N(y; x̃ θ*, x̃ A⁻¹ x̃ᵀ + σ²) with A = X̃ᵀX̃/σ² + λ I (weight, then bias)."""
    ones = lambda t: torch.cat([t, torch.ones(len(t), 1, dtype=t.dtype)], 1)  # noqa: E731
    a = ones(x).T @ ones(x) / sigma**2 + lam * torch.eye(4, dtype=torch.float64)
    xt = ones(x_val)
    var = (xt @ torch.linalg.inv(a) * xt).sum(1) + sigma**2
    mean = net(x_val).detach()[:, 0]
    return float(
        (-0.5 * ((y_val[:, 0] - mean) ** 2 / var + var.log() + math.log(2 * math.pi))).mean()
    )


@pytest.mark.parametrize("structure", ["full", "kron"])  # kron is exact for one output, no cross
def test_the_held_out_criterion_and_its_argmax_are_the_closed_forms(structure):
    net, x, y, x_val, y_val = _linear()
    la = bp.LaplaceApproximation(net, "regression", hessian_structure=structure, noise_scale=0.5)
    la.fit(DataLoader(TensorDataset(x, y), batch_size=10))
    if structure == "full":  # the closed form keeps the weight-bias terms KFAC drops
        for lam in (0.01, 1.0, 30.0):
            expected = _closed_form(net, x, x_val, y_val, lam)
            assert la.validation_log_likelihood(x_val, y_val, lam) == pytest.approx(
                expected, rel=1e-10
            )
    chosen = la.optimize_prior_precision(method="gridsearch", validation=(x_val, y_val), grid=GRID)
    scores = [la.validation_log_likelihood(x_val, y_val, v) for v in GRID]
    assert chosen == GRID[scores.index(max(scores))] and la.prior_precision == chosen
    if structure == "full":
        closed = [_closed_form(net, x, x_val, y_val, v) for v in GRID]
        assert chosen == GRID[closed.index(max(closed))]
    assert max(scores) - min(scores) > 1e-3  # λ moves the criterion: the choice means something


def test_laplace_torch_chooses_the_same_lambda_on_a_classifier():
    # laplace-torch 0.3's validate() never resets a torchmetrics metric, so its default
    # RunningNLLMetric scores each grid point by the running mean over all points so far; an
    # offline loss (the mean NLL of the probit probabilities) is scored afresh per point
    laplace = pytest.importorskip(
        "laplace", reason="laplace-torch, the peer, is not installed: pip install -e '.[ood]'"
    )

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 3)).double()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(120, 2, generator=g, dtype=torch.float64)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()
    opt = torch.optim.Adam(net.parameters(), lr=0.02)
    for _ in range(300):
        opt.zero_grad()
        nn.functional.cross_entropy(net(x[:80]), y[:80]).backward()
        opt.step()
    ours = bp.LaplaceApproximation(copy.deepcopy(net), "classification", hessian_structure="kron")
    ours.fit(DataLoader(TensorDataset(x[:80], y[:80]), batch_size=40))
    chosen = ours.optimize_prior_precision(method="gridsearch", validation=(x[80:], y[80:]),
                                           grid=GRID)  # fmt: skip
    theirs = laplace.Laplace(copy.deepcopy(net), "classification", subset_of_weights="all",
                             hessian_structure="kron")  # fmt: skip
    theirs.fit(DataLoader(TensorDataset(x[:80], y[:80]), batch_size=40))
    theirs.optimize_prior_precision(
        method="gridsearch", pred_type="glm", link_approx="probit",
        loss=lambda probs, labels: nn.functional.nll_loss(probs.log(), labels),
        val_loader=DataLoader(TensorDataset(x[80:], y[80:]), batch_size=40),
        log_prior_prec_min=-3, log_prior_prec_max=3, grid_size=13,
    )  # fmt: skip
    assert chosen == pytest.approx(float(theirs.prior_precision), rel=1e-6)


def test_bad_grid_search_calls_are_refused_by_name():
    net, x, y, x_val, y_val = _linear()
    la = bp.LaplaceApproximation(net, "regression", noise_scale=0.5)
    la.fit(DataLoader(TensorDataset(x, y), batch_size=10))
    with pytest.raises(ValueError, match="needs validation"):
        la.optimize_prior_precision(method="gridsearch")
    with pytest.raises(ValueError, match="one scalar"):
        la.optimize_prior_precision(layerwise=True, method="gridsearch", validation=(x_val, y_val))
    with pytest.raises(ValueError, match="for method='gridsearch'"):
        la.optimize_prior_precision(validation=(x_val, y_val))
    with pytest.raises(ValueError, match="method"):
        la.optimize_prior_precision(method="grid")
    with pytest.raises(ValueError, match="y must have 25 rows"):
        la.validation_log_likelihood(x_val, y_val[:3])
    with pytest.raises(ValueError, match="grid"):
        la.optimize_prior_precision(method="gridsearch", validation=(x_val, y_val), grid=[-1.0])
