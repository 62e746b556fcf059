"""The KL term and the minibatch scaling, against closed forms computed by hand."""

from __future__ import annotations

import math

import pyro
import pyro.poutine as poutine
import pytest
import torch
import torch.nn.functional as F
from pyro.infer import Trace_ELBO, TraceMeanField_ELBO

import bnn_pyro as bp


def _fitted(X, y, **kwargs) -> bp.VariationalBNN:
    torch.manual_seed(0)
    bnn = bp.VariationalBNN(bp.nn.mlp(3, [4], 1), bp.Gaussian(scale=0.3), **kwargs)
    bnn.fit(X, y, epochs=3, batch_size=16, progress=False, seed=0)
    return bnn


def _kl_by_hand(bnn: bp.VariationalBNN, prior_scale: float = 1.0) -> float:
    """sum over weights of log(sp/sq) + (sq^2 + mq^2) / (2 sp^2) - 1/2, prior N(0, sp^2)."""
    total = 0.0
    for name, loc in bnn.guide.means().items():
        scale = bnn.guide.scales()[name]
        total += float(
            (
                math.log(prior_scale)
                - scale.log()
                + (scale**2 + loc**2) / (2 * prior_scale**2)
                - 0.5
            ).sum()
        )
    return total


def test_exact_kl_equals_the_closed_form_and_torch(regression_data):
    bnn = _fitted(*regression_data)
    by_hand = _kl_by_hand(bnn)
    assert math.isclose(float(bnn.kl_divergence().detach()), by_hand, rel_tol=1e-5)
    # what TraceMeanField_ELBO computes when the likelihood is removed is exactly the KL
    x = regression_data[0][:4]
    latent_only = poutine.block(bnn.model, hide=["obs"])
    loss = TraceMeanField_ELBO().differentiable_loss(latent_only, bnn.guide, x)
    assert math.isclose(float(loss.detach()), by_hand, rel_tol=1e-5)
    # and torch.distributions.kl_divergence, site by site
    torch_kl = sum(
        float(
            torch.distributions.kl_divergence(
                torch.distributions.Normal(bnn.guide.means()[n], bnn.guide.scales()[n]),
                torch.distributions.Normal(0.0, 1.0),
            ).sum()
        )
        for n in bnn.site_names
    )
    assert math.isclose(torch_kl, by_hand, rel_tol=1e-5)


def test_trace_elbo_kl_estimate_averages_to_the_exact_kl(regression_data):
    bnn = _fitted(*regression_data)
    exact = float(bnn.kl_divergence().detach())
    x = regression_data[0][:4]
    latent_only = poutine.block(bnn.model, hide=["obs"])
    pyro.set_rng_seed(0)
    draws = torch.stack(
        [Trace_ELBO().differentiable_loss(latent_only, bnn.guide, x).detach() for _ in range(4000)]
    )
    # The Monte Carlo estimate log q(w) - log p(w) is unbiased; its mean over 4000 independent
    # draws is within 4 standard errors of the exact KL with probability > 0.9999.
    stderr = float(draws.std()) / math.sqrt(len(draws))
    assert abs(float(draws.mean()) - exact) < 4 * stderr


def test_minibatch_loss_is_n_over_b_loglik_plus_full_kl(regression_data):
    X, y = regression_data
    # A guide this narrow puts every weight at its mean (to ~1e-7): the loss is deterministic.
    torch.manual_seed(0)
    bnn = bp.VariationalBNN(bp.nn.mlp(3, [4], 1), bp.Gaussian(scale=0.3), init_scale=1e-7)
    bnn.fit(X, y, epochs=0, progress=False)  # sets up the guide
    xb, yb = X[:16], y[:16]
    n = len(X)
    loss = TraceMeanField_ELBO().differentiable_loss(bnn.model, bnn.guide, xb, yb, dataset_size=n)
    means = bnn.guide.means()
    h = torch.relu(F.linear(xb, means["net.0.weight"], means["net.0.bias"]))
    f = F.linear(h, means["net.2.weight"], means["net.2.bias"])
    loglik = torch.distributions.Normal(f, 0.3).log_prob(yb).sum()
    expected = -(n / len(xb)) * float(loglik) + _kl_by_hand(bnn)
    assert math.isclose(float(loss.detach()), expected, rel_tol=1e-4)


@pytest.mark.parametrize("engine", ["plain torch", "Pyro's SVI"])
def test_fit_counts_the_kl_once_per_step_whatever_the_batch_size(regression_data, engine):
    """On both engines: the plain-torch objective, and Pyro's ``SVI`` (which a ``pyro.optim``
    optimizer chooses), whose model is handed the data set size."""
    X, y = regression_data
    losses = {}
    for batch in (8, 64):
        bnn = _fitted(X, y, init_scale=1e-7)
        optimizer = pyro.optim.Adam({"lr": 1e-12}) if engine == "Pyro's SVI" else None
        history = bnn.fit(
            X, y, epochs=1, batch_size=batch, lr=1e-12, elbo="meanfield", progress=False,
            seed=0, optimizer=optimizer,
        )  # fmt: skip
        losses[batch] = history["loss"][0]
        assert bnn.dataset_size == len(X)
        # each step's loss stands for the whole data set: its KL part is the full KL
        assert math.isclose(history["kl"][0], float(bnn.kl_divergence().detach()), rel_tol=1e-4)
    # with (almost) no weight noise and no learning, the full-data loss estimate does not depend
    # on the batch size: the N/B scaling is right
    assert math.isclose(losses[8], losses[64], rel_tol=1e-4)
