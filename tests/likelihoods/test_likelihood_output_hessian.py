"""``Likelihood.output_hessian``: the Hessian of each row's negative log-likelihood in the net
output, owned by the likelihood and read by the Laplace approximation's Gauss-Newton curvature.

Each likelihood's ``(w, coupled)`` is checked against the Hessian that autograd takes of its
own :meth:`log_prob` row by row (an independent computation of the same second derivative)."""

from __future__ import annotations

import pytest
import torch
from torch.func import hessian

import bnn_pyro as bp
from bnn_pyro.likelihoods import NOISE_SITE, noise_latents

D = torch.float64


def _rows(o: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(5, o, generator=g, dtype=D), torch.randn(5, o, generator=g, dtype=D)


def _autograd(lik: bp.Likelihood, f: torch.Tensor, y: torch.Tensor, latents) -> torch.Tensor:
    """``(N, O, O)``: the Hessian of ``-log p(y_n | f_n)`` in ``f_n``, one row at a time."""
    return torch.stack(
        [
            hessian(lambda fn, yn=yn: -lik.log_prob(fn[None], yn[None], latents).sum())(fn)
            for fn, yn in zip(f, y, strict=True)
        ]
    )


def _from_weights(w: torch.Tensor, coupled: bool) -> torch.Tensor:
    lam = torch.diag_embed(w)
    return lam - w[:, :, None] * w[:, None, :] if coupled else lam


@pytest.mark.parametrize(
    "lik, latents, targets",
    [
        (bp.Gaussian(scale=0.3), {}, "real"),
        (
            bp.Gaussian(scale="learned"),
            {NOISE_SITE: torch.tensor([0.5, 2.0, 1.5], dtype=D)},
            "real",
        ),
        (bp.Categorical(), {}, "labels"),
        (bp.Bernoulli(), {}, "binary"),
    ],
    ids=["gaussian-fixed", "gaussian-noise-latent", "categorical", "bernoulli"],
)
def test_the_output_hessian_is_autograds_hessian_of_the_log_likelihood(lik, latents, targets):
    f, y = _rows(3)
    if targets == "labels":
        y = torch.tensor([0, 2, 1, 1, 0])
    elif targets == "binary":
        y = (y > 0).to(D)
    w, coupled = lik.output_hessian(f, latents)
    assert w.shape == f.shape
    assert coupled is isinstance(lik, bp.Categorical)
    # float64 second derivatives of closed forms: only rounding separates the two
    torch.testing.assert_close(_from_weights(w, coupled), _autograd(lik, f, y, latents))


def test_a_net_that_predicts_its_own_scale_has_no_output_hessian():
    f, _ = _rows(2)
    with pytest.raises(
        TypeError,
        match="^HeteroscedasticGaussian gives no Hessian of its log-likelihood in the net output, "
        "which a Gauss-Newton curvature needs$",
    ):
        bp.HeteroscedasticGaussian().output_hessian(f, {})


@pytest.mark.parametrize(
    "lik", [bp.Gaussian(scale=0.3), bp.Categorical(), bp.Bernoulli()], ids=lambda x: repr(x)
)
def test_stacked_outputs_give_each_members_own_weights(lik):
    """``(K, N, O)`` outputs (stacked members): member k's weights are those of its own
    ``(N, O)`` outputs (a softmax over the last axis, never over the rows)."""
    f = torch.randn(2, 5, 3, generator=torch.Generator().manual_seed(1), dtype=D)
    w, coupled = lik.output_hessian(f, {})
    assert w.shape == f.shape
    for k in range(2):
        own, own_coupled = lik.output_hessian(f[k], {})
        # the same elementwise formula: a vectorised kernel may round a last bit differently
        torch.testing.assert_close(w[k], own, rtol=1e-14, atol=0)
        assert own_coupled is coupled


def test_a_noise_given_from_outside_is_the_gaussians_latent():
    """``noise_latents(sigma)``: what the Laplace curvature and ``VariationalBayesNN`` hand a
    likelihood as their noise std; none for ``None``, and a tensor only."""
    sigma = torch.tensor([0.5, 2.0], dtype=D)
    f, y = _rows(2)
    w, _ = bp.Gaussian(scale="learned").output_hessian(f, noise_latents(sigma))
    torch.testing.assert_close(w, (1 / sigma**2).expand(f.shape))
    assert noise_latents(None) == {}
    with pytest.raises(TypeError, match="^sigma must be a torch.Tensor or None, got float$"):
        noise_latents(0.5)
