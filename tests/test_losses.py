"""Closed-form KLs against torch.distributions, and the ELBO loss."""

import math

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


Z2, O2, S0 = torch.zeros(2), torch.ones(2), torch.tensor(0.0)
P2, T2 = torch.zeros(2, 1), torch.zeros(2, 1)


@pytest.mark.parametrize(
    "call, exc, message",
    [
        (lambda: gaussian_kl([0.0], O2), TypeError, "mean must be a torch.Tensor, got list"),
        (lambda: gaussian_kl(Z2, [1.0]), TypeError, "std must be a torch.Tensor, got list"),
        (lambda: gaussian_kl(Z2, torch.ones(3)), ValueError,
         "std must have the shape of mean (2,), got (3,)"),
        (lambda: gaussian_kl(Z2, O2, -1.0), ValueError,
         "prior_std must be a finite float > 0, got -1.0"),
        (lambda: gaussian_kl(Z2, O2, "1"), TypeError,
         "prior_std must be a float or a tensor, got str"),
        (lambda: gaussian_kl(Z2, O2, True), TypeError,
         "prior_std must be a float or a tensor, got bool"),
        # a tensor prior: every entry finite and > 0 (a zero alone, an inf alone, refused)
        (lambda: gaussian_kl(Z2, O2, torch.tensor([1.0, 0.0])), ValueError,
         "prior_std must be finite and > 0 everywhere, got tensor([1., 0.])"),
        (lambda: gaussian_kl(Z2, O2, torch.tensor([1.0, math.inf])), ValueError,
         "prior_std must be finite and > 0 everywhere, got tensor([1., inf])"),
        (lambda: gaussian_kl(Z2, O2, reduction="mean"), ValueError,
         "reduction must be 'sum' or 'none', got 'mean'"),
        (lambda: kl_cost([0.0], Z2), TypeError, "mu must be a torch.Tensor, got list"),
        (lambda: kl_cost(Z2, [0.0]), TypeError, "rho must be a torch.Tensor, got list"),
        (lambda: kl_cost(Z2, torch.zeros(3)), ValueError,
         "rho must have the shape of mu (2,), got (3,)"),
        (lambda: kl_cost(Z2, Z2, prior_sigma=0.0), ValueError,
         "prior_sigma must be a finite float > 0, got 0.0"),
        (lambda: elbo_loss([0.0], T2, S0), TypeError,
         "predictions must be a torch.Tensor, got list"),
        (lambda: elbo_loss(P2, [0.0], S0), TypeError, "targets must be a torch.Tensor, got list"),
        (lambda: elbo_loss(P2, T2, 0.0), TypeError, "kl must be a torch.Tensor, got float"),
        (lambda: elbo_loss(P2, T2, torch.zeros(1)), ValueError,
         "kl must be a scalar tensor, got shape (1,)"),
        (lambda: elbo_loss(P2, T2, S0, beta=-1.0), ValueError,
         "beta must be a finite float >= 0, got -1.0"),
        (lambda: elbo_loss(P2, T2, S0, beta=True), TypeError, "beta must be a float, got bool"),
        (lambda: elbo_loss(P2, T2, S0, beta="1"), TypeError, "beta must be a float, got str"),
        (lambda: elbo_loss(P2, T2, S0, loss_fn="l1"), ValueError,
         "loss_fn must be one of ('mse', 'cross_entropy'), got 'l1'"),
        (lambda: elbo_loss(P2, torch.zeros(3, 1), S0), ValueError,
         "targets must have 2 rows like predictions, got 3"),
        (lambda: elbo_loss(P2, torch.zeros(2, 2), S0), ValueError,
         "targets must have the shape of predictions (2, 1) for loss_fn='mse', got (2, 2)"),
    ],
)  # fmt: skip
def test_argument_errors_name_the_argument_and_what_came(call, exc, message):
    with pytest.raises(exc) as caught:
        call()
    assert str(caught.value) == message


def test_elbo_loss_weighs_the_kl_by_one_unless_told():
    pred, target = torch.zeros(3, 1), torch.ones(3, 1)
    torch.testing.assert_close(elbo_loss(pred, target, torch.tensor(2.0)), torch.tensor(3.0))


def test_gaussian_kl_takes_the_prior_in_the_means_dtype():
    """A float64 KL works with the prior in float64: the KL of N(0, 0.1²) against N(0, 0.1²)
    is 0 to float64 round-off, while a float32 prior (0.1 is not a float32 number, and its log
    rounds at about 1e-7) would leave an error near 1e-7."""
    std = torch.full((3,), 0.1, dtype=torch.float64)
    kl = gaussian_kl(torch.zeros(3, dtype=torch.float64), std, 0.1)
    assert kl.dtype == torch.float64 and abs(float(kl)) < 1e-15


def test_gaussian_kl_makes_the_prior_on_the_means_device_whatever_the_default_device():
    """Under a ``meta`` default device (a stand-in for a second device), a KL of CPU tensors is
    the same CPU number: a prior made on the default device would make it ``meta``."""
    mean, std = torch.randn(4), torch.rand(4) + 0.1
    want = gaussian_kl(mean, std, 0.7)
    with torch.device("meta"):
        got = gaussian_kl(mean, std, 0.7)
    assert got.device.type == "cpu"
    torch.testing.assert_close(got, want, rtol=0, atol=0)
