"""SNGP's output layer (Liu et al. 2020): a Gaussian process on the net's features through
random Fourier features, its output weights under a Gaussian prior, their posterior a Laplace
approximation (exact for a Gaussian likelihood)."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from bnn_pyro._checks import check_float, check_int

__all__ = ["RandomFeatureGP"]


class RandomFeatureGP(nn.Module):
    """``f(h) = β φ(h) + b``: random Fourier features ``φ(h) = sqrt(2 / D) cos(Ω h / ℓ + τ)``
    (``Ω (D, H)`` standard normal, ``τ`` uniform on ``[0, 2π)``, both fixed buffers) and output
    weights ``β (O, D)`` under the prior ``N(0, s²)``, so that each output is a Gaussian process
    with kernel ``s² φ(h)ᵀ φ(h')``, which tends to the RBF kernel ``s² exp(-|h - h'|² / 2ℓ²)``
    as ``D`` grows. The bias ``b`` (optional) is a point estimate without a prior.

    The posterior of each output's weights is ``N(β_o, A_o⁻¹)`` with precision
    ``A_o = I / s² + Σ_n λ_no φ_n φ_nᵀ``, ``λ_no`` the ``o``-th diagonal entry of the Hessian of
    row ``n``'s negative log-likelihood in the output (``1 / σ²`` for a Gaussian, ``p (1 - p)``
    for a softmax or sigmoid): the Laplace approximation, exact for a Gaussian likelihood. The
    head keeps the Cholesky factor ``L_o`` of each ``A_o`` (``(O, D, D)``); a new head holds the
    prior's.

    Args:
        in_features: ``H``, the width of the features the head reads.
        out_features: ``O``.
        num_features: ``D``, random features.
        lengthscale: ``ℓ > 0``.
        prior_scale: ``s > 0``, the prior std of each output weight (the kernel's amplitude).
        bias: learn a bias ``b``.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> head = RandomFeatureGP(3, 2, num_features=64, lengthscale=1.0, prior_scale=1.0)
        >>> h = torch.randn(5, 3)
        >>> head.features(h).shape, head(h).shape
        (torch.Size([5, 64]), torch.Size([5, 2]))
        >>> mean, var = head.output_moments(head.features(h))  # the prior: var = s² |φ|²
        >>> torch.allclose(var[:, 0], head.features(h).square().sum(-1))
        True
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        num_features: int,
        lengthscale: float,
        prior_scale: float,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        for name, value in (("in_features", in_features), ("out_features", out_features)):
            check_int(name, value)
        check_int("num_features", num_features)
        check_float("lengthscale", lengthscale, minimum=0.0, strict=True)
        check_float("prior_scale", prior_scale, minimum=0.0, strict=True)
        like = {"device": device, "dtype": dtype or torch.get_default_dtype()}
        self.lengthscale, self.prior_scale = float(lengthscale), float(prior_scale)
        self.register_buffer("frequencies", torch.randn(num_features, in_features, **like))
        self.register_buffer("phases", 2 * math.pi * torch.rand(num_features, **like))
        bound = 1 / math.sqrt(num_features)  # nn.Linear's start
        self.weight = nn.Parameter(
            torch.empty(out_features, num_features, **like).uniform_(-bound, bound)
        )
        self.bias = nn.Parameter(torch.zeros(out_features, **like)) if bias else None
        eye = torch.eye(num_features, **like) / self.prior_scale
        self.register_buffer("precision_cholesky", eye.expand(out_features, -1, -1).clone())

    @property
    def num_features(self) -> int:
        """``D``."""
        return self.weight.shape[1]

    def features(self, h: torch.Tensor) -> torch.Tensor:
        """``φ(h) (N, D)`` of ``h (N, H)``."""
        projected = (h @ self.frequencies.t()) / self.lengthscale + self.phases
        return math.sqrt(2.0 / self.num_features) * torch.cos(projected)

    def outputs(self, phi: torch.Tensor) -> torch.Tensor:
        """``β φ + b (N, O)`` of features ``phi (N, D)``."""
        out = phi @ self.weight.t()
        return out if self.bias is None else out + self.bias

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """``(N, O)``: the outputs at the weights' mean."""
        return self.outputs(self.features(h))

    def log_prior_penalty(self) -> torch.Tensor:
        """``|β|² / (2 s²)``: the negative log prior of the output weights, up to a constant."""
        return self.weight.square().sum() / (2 * self.prior_scale**2)

    @torch.no_grad()
    def set_posterior(self, gram: torch.Tensor) -> None:
        """Put ``L_o = cholesky(I / s² + G_o)`` for the curvature ``gram (O, D, D)``
        (``Σ_n λ_no φ_n φ_nᵀ``)."""
        eye = torch.eye(self.num_features, dtype=gram.dtype, device=gram.device)
        self.precision_cholesky.copy_(torch.linalg.cholesky(gram + eye / self.prior_scale**2))

    @torch.no_grad()
    def solve_mean(self, moment: torch.Tensor) -> None:
        """Put ``β_o = A_o⁻¹ m_o`` for ``moment (O, D)``: the exact posterior mean of a Gaussian
        likelihood, ``m_o = Σ_n φ_n (y_no - b_o) / σ_o²``."""
        solved = torch.cholesky_solve(moment.unsqueeze(-1), self.precision_cholesky)
        self.weight.copy_(solved.squeeze(-1))

    def output_moments(self, phi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The posterior mean and variance ``(N, O)`` of the outputs at features ``phi (N, D)``:
        ``β_o φ + b_o`` and ``φᵀ A_o⁻¹ φ = |L_o⁻¹ φ|²``."""
        # (O, D, D) \ (D, N) for every output at once
        whitened = torch.linalg.solve_triangular(self.precision_cholesky, phi.t(), upper=False)
        return self.outputs(phi), whitened.square().sum(-2).t()

    def sample_outputs(self, phi: torch.Tensor, num_samples: int) -> torch.Tensor:
        """``(S, N, O)`` outputs for ``S`` draws of ``β`` from its posterior (global RNG):
        ``β_o + L_o⁻ᵀ ε``."""
        out_features, d = self.weight.shape
        eps = torch.randn(out_features, d, num_samples, dtype=phi.dtype, device=phi.device)
        chol_t = self.precision_cholesky.transpose(-1, -2)
        noise = torch.linalg.solve_triangular(chol_t, eps, upper=True)  # (O, D, S)
        weights = self.weight + noise.permute(2, 0, 1)  # (S, O, D)
        out = phi @ weights.transpose(-1, -2)
        return out if self.bias is None else out + self.bias
