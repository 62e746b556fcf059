"""Closed-form KLs against torch.distributions, and the ELBO loss."""

import pytest
import torch
import torch.nn.functional as F
from torch.distributions import Normal, kl_divergence

from bnn_pyro.losses import elbo_loss, gaussian_kl, kl_cost


def test_gaussian_kl_matches_torch_distributions():
    g = torch.Generator().manual_seed(0)
    mean = torch.randn(5, 7, generator=g)
    std = torch.rand(5, 7, generator=g) * 2 + 0.05
    for prior_std in (1.0, 0.3, 2.5):
        ref = kl_divergence(Normal(mean, std), Normal(0.0, prior_std))
        elementwise = gaussian_kl(mean, std, prior_std, reduction="none")
        torch.testing.assert_close(elementwise, ref)
        torch.testing.assert_close(gaussian_kl(mean, std, prior_std), ref.sum())


def test_gaussian_kl_tensor_prior_broadcasts():
    mean, std = torch.zeros(3, 2), torch.ones(3, 2)
    prior = torch.tensor([1.0, 2.0])
    ref = kl_divergence(Normal(mean, std), Normal(torch.zeros(2), prior)).sum()
    torch.testing.assert_close(gaussian_kl(mean, std, prior), ref)


def test_kl_cost_uses_softplus_scale():
    g = torch.Generator().manual_seed(1)
    mu, rho = torch.randn(4, 3, generator=g), torch.randn(4, 3, generator=g)
    ref = kl_divergence(Normal(mu, F.softplus(rho)), Normal(0.0, 0.7)).sum()
    torch.testing.assert_close(kl_cost(mu, rho, prior_sigma=0.7), ref)
    assert kl_cost(mu, rho).dim() == 0


def test_kl_cost_gradient_flows():
    mu = torch.randn(3, requires_grad=True)
    rho = torch.randn(3, requires_grad=True)
    kl_cost(mu, rho).backward()
    assert mu.grad is not None and rho.grad is not None
    # d KL / d mu = mu / prior_sigma^2
    torch.testing.assert_close(mu.grad, mu.detach())


def test_elbo_loss_mse_and_cross_entropy():
    g = torch.Generator().manual_seed(2)
    pred, target = torch.randn(6, 2, generator=g), torch.randn(6, 2, generator=g)
    kl = torch.tensor(4.0)
    expected = ((pred - target) ** 2).mean() + 0.25 * 4.0
    torch.testing.assert_close(elbo_loss(pred, target, kl, beta=0.25), expected)
    logits, labels = torch.randn(6, 3, generator=g), torch.tensor([0, 1, 2, 2, 1, 0])
    log_p = torch.log_softmax(logits, -1)[torch.arange(6), labels]
    torch.testing.assert_close(
        elbo_loss(logits, labels, kl, beta=0.0, loss_fn="cross_entropy"), -log_p.mean()
    )


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: gaussian_kl([0.0], torch.ones(1)), TypeError, "mean"),
        (lambda: gaussian_kl(torch.zeros(2), torch.ones(3)), ValueError, "std"),
        (lambda: gaussian_kl(torch.zeros(2), torch.ones(2), -1.0), ValueError, "prior_std"),
        (lambda: gaussian_kl(torch.zeros(2), torch.ones(2), "1"), TypeError, "prior_std"),
        (
            lambda: gaussian_kl(torch.zeros(2), torch.ones(2), reduction="mean"),
            ValueError,
            "reduction",
        ),
        (
            lambda: kl_cost(torch.zeros(2), torch.zeros(2), prior_sigma=0.0),
            ValueError,
            "prior_sigma",
        ),
        (lambda: kl_cost(torch.zeros(2), torch.zeros(3)), ValueError, "rho"),
        (lambda: elbo_loss(torch.zeros(2, 1), torch.zeros(2, 1), torch.zeros(1)), ValueError, "kl"),
        (
            lambda: elbo_loss(torch.zeros(2, 1), torch.zeros(2, 1), torch.tensor(0.0), beta=-1.0),
            ValueError,
            "beta",
        ),
        (
            lambda: elbo_loss(
                torch.zeros(2, 1), torch.zeros(2, 1), torch.tensor(0.0), loss_fn="l1"
            ),
            ValueError,
            "loss_fn",
        ),
        (
            lambda: elbo_loss(torch.zeros(2, 1), torch.zeros(3, 1), torch.tensor(0.0)),
            ValueError,
            "targets",
        ),
        (
            lambda: elbo_loss(torch.zeros(2, 1), torch.zeros(2, 2), torch.tensor(0.0)),
            ValueError,
            "targets",
        ),
    ],
)
def test_argument_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()
