"""The variational Bayesian last layer (Harrison, Willes and Snoek, ICLR 2024): a Gaussian
``q(W)`` over the last layer's weights, trained by a deterministic ELBO, predicting in closed
form.

For features ``φ (N, F)`` and ``O`` outputs, each output's weight row ``w_o ~ N(m_o, L_o L_oᵀ)``
(a dense Cholesky factor ``L_o (F, F)``, or a diagonal one), rows independent, the prior
``w_o ~ N(0, s I)``. The output ``f = W φ`` is Gaussian with mean ``M φ`` and per-output variance
``φᵀ L_o L_oᵀ φ``, so the expected log-likelihood needs no sampling:

- regression, ``y ~ N(W φ, diag(σ²))``:
  ``E_q log p(y | W φ) = Σ_o log N(y_o | m_oᵀφ, σ_o²) − ½ φᵀΣ_oφ / σ_o²`` (exact);
- classification, ``y ~ softmax(W φ + ε)``, ``ε ~ N(0, diag(σ²))`` (the logit noise of the
  paper): Jensen's bound ``m_yᵀφ − logsumexp_c(m_cᵀφ + ½(φᵀΣ_cφ + σ_c²))``.

The ELBO per row is that term's mean over the rows minus ``(KL(q ‖ p) − log p(σ)) / N``, with
``log p(σ)`` the paper's Wishart term on the noise precision,
``dof · log det Λ − ½ · wishart_scale · tr Λ`` (``Λ = diag(σ⁻²)``, ``dof = (dof₀ + O + 1) / 2``),
and no term where the noise is fixed. The ``vbll`` package (MIT) is the reference this is held
to: the same predictive and, for one output, the same loss up to the KL's constant, which
``vbll`` leaves out (``tests/methods/vbll/test_vbll_peer.py``).
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn as nn

from bnn_pyro._checks import check_choice
from bnn_pyro.likelihoods.resolve import check_noise_scale

__all__ = ["COVARIANCES", "VBLLHead"]

#: The covariance of ``q(w_o)``: a dense Cholesky factor per output, or a diagonal.
COVARIANCES = ("dense", "diagonal")
#: ``L``'s strictly lower part ``(O, F, F)`` (``None`` for a diagonal ``q``) and its diagonal
#: ``(O, F)`` (:meth:`VBLLHead._factor`).
Factor = tuple[torch.Tensor | None, torch.Tensor]


class VBLLHead(nn.Module):
    """A variational Bayesian last layer ``O × F``: its ``q(W)``, ELBO and predictive moments.
    ``q`` starts at the prior's spread with a zero mean (:class:`~bnn_pyro.methods.vbll.VBLL`
    puts the net's last layer in the mean); the prior and Wishart settings are the method's,
    which gives them their defaults.

    Args:
        in_features: ``F``, the features it reads (a bias is one more feature, constant 1).
        out_features: ``O``.
        classifies: a softmax classifier (logit noise, Jensen's bound) rather than a Gaussian
            regression.
        prior_variance: ``s``, the prior variance of each weight.
        wishart_scale: the Wishart term's scale.
        dof: its degrees of freedom ``dof₀``.
        covariance: ``"dense"`` (a Cholesky factor ``(O, F, F)``) or ``"diagonal"``.
        noise_scale: a fixed regression noise std (float or ``(O,)``), or ``None``: learned,
            under the Wishart term (a classifier's logit noise is always learned).
        device: where its parameters are made (as ``nn.Linear``'s).
        dtype: their floating type.

    Example:
        >>> head = VBLLHead(4, 1, classifies=False, prior_variance=0.25, wishart_scale=1e-2, dof=1)
        >>> phi = torch.randn(10, 4)
        >>> mean, var = head.output_moments(phi)
        >>> mean.shape, var.shape, bool((var > 0).all())
        (torch.Size([10, 1]), torch.Size([10, 1]), True)
        >>> head.loss(phi, torch.randn(10, 1), n=10).shape
        torch.Size([])
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        classifies: bool,
        prior_variance: float,
        wishart_scale: float,
        dof: float,
        covariance: str = "dense",
        noise_scale: float | torch.Tensor | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        where = {"device": device, "dtype": dtype}
        self.covariance = check_choice("covariance", covariance, COVARIANCES)
        self.classifies = classifies
        self.prior_variance = float(prior_variance)
        self.wishart_scale = float(wishart_scale)
        self.dof = (float(dof) + out_features + 1.0) / 2.0
        shape = (out_features, in_features)
        self.mean = nn.Parameter(torch.zeros(shape, **where))
        # q starts at the prior's spread: each Cholesky diagonal sqrt(s), no correlation
        self.log_diag = nn.Parameter(
            torch.full(shape, 0.5 * math.log(self.prior_variance), **where)
        )
        if self.covariance == "dense":
            self.off_diag = nn.Parameter(
                torch.zeros(out_features, in_features, in_features, **where)
            )
        self.noise_log_scale = nn.Parameter(torch.zeros(out_features, **where))
        self.set_noise(None if classifies else noise_scale)

    def set_noise(self, noise_scale: float | torch.Tensor | None) -> None:
        """Fix the regression noise at ``noise_scale`` (a float or ``(O,)`` std), or let it be
        learned (``None``: from where it is, under the Wishart term).

        Raises:
            ValueError, TypeError: a noise that is not a positive finite float or tensor.

        Example:
            >>> head = VBLLHead(2, 1, classifies=False, prior_variance=1, wishart_scale=1, dof=1)
            >>> head.set_noise(0.5)
            >>> head.learned_noise, head.noise_variance()
            (False, tensor([0.2500]))
        """
        noise_scale = check_noise_scale(noise_scale)
        self.learned_noise = noise_scale is None
        self.noise_log_scale.requires_grad_(self.learned_noise)
        if noise_scale is not None:
            where = {"dtype": self.mean.dtype, "device": self.mean.device}
            with torch.no_grad():  # σ a float or (O,): its log for each output
                log = torch.as_tensor(noise_scale, **where).log()
                self.noise_log_scale.copy_(log.expand_as(self.noise_log_scale))

    # ------------------------------------------------------------------ q(W)
    def scale_tril(self) -> torch.Tensor:
        """``L (O, F, F)``: the lower Cholesky factor of each output's ``Σ_o = L_o L_oᵀ``."""
        lower, diag = self._factor()
        diag = torch.diag_embed(diag)
        return diag if lower is None else lower + diag

    def _factor(self) -> Factor:
        """``L``'s strictly lower part ``(O, F, F)`` (``None`` for a diagonal ``q``) and its
        diagonal ``(O, F)``, apart: what the ELBO reads, without an ``(O, F, F)`` diagonal
        matrix. The lower part is ``off_diag`` times a constant mask (``tril`` costs more, and
        so does its backward)."""
        diag = self.log_diag.exp()
        if self.covariance == "diagonal":
            return None, diag
        return self.off_diag * _strictly_lower(self.off_diag), diag

    def output_moments(
        self, phi: torch.Tensor, factor: Factor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The mean ``(N, O)`` and variance ``(N, O)`` of ``W φ`` under ``q`` (no noise).

        Args:
            phi: ``(N, F)`` features.
            factor: :meth:`_factor`'s parts, where the caller has them already.
        """
        mean = phi @ self.mean.T
        lower, diag = self._factor() if factor is None else factor
        if lower is None:
            return mean, (phi**2) @ (diag**2).T
        # Lᵀ φ = (strictly lower)ᵀ φ + diag ∘ φ, per row and output: one matrix product for
        # every output, φ (N, F) @ (F, O·F)
        o, f = diag.shape
        spread = phi @ lower.permute(1, 0, 2).reshape(f, o * f)
        spread = spread.view(len(phi), o, f) + diag * phi.unsqueeze(-2)
        return mean, spread.pow(2).sum(-1)

    def noise_variance(self) -> torch.Tensor:
        """``σ² (O,)``: the regression noise, or a classifier's logit noise."""
        return (2 * self.noise_log_scale).exp()

    def kl(self, factor: Factor | None = None) -> torch.Tensor:
        """``Σ_o KL(N(m_o, Σ_o) ‖ N(0, s I))`` in nats, ``()``; ``factor`` as in
        :meth:`output_moments`."""
        s, f = self.prior_variance, self.mean.shape[-1]
        lower, diag = self._factor() if factor is None else factor
        trace = diag.pow(2).sum(-1)  # tr Σ_o = ‖L_o‖²_F
        if lower is not None:
            trace = trace + lower.pow(2).sum((-2, -1))
        log_det = 2 * self.log_diag.sum(-1)
        per_output = trace / s + self.mean.pow(2).sum(-1) / s - f + f * math.log(s) - log_det
        return 0.5 * per_output.sum()

    def noise_log_prior(self) -> torch.Tensor:
        """The Wishart term on the noise precision, ``()``; ``0`` for a fixed noise."""
        if not self.learned_noise:
            return self.mean.new_zeros(())
        precision = (-2 * self.noise_log_scale).exp()
        log_det = -2 * self.noise_log_scale.sum()
        return self.dof * log_det - 0.5 * self.wishart_scale * precision.sum()

    # ------------------------------------------------------------------ the ELBO
    def expected_log_lik(
        self,
        phi: torch.Tensor,
        y: torch.Tensor,
        factor: Factor | None = None,
    ) -> torch.Tensor:
        """Each row's expected log-likelihood under ``q`` (a bound for a classifier), ``(N,)``.

        Args:
            phi: ``(N, F)`` features.
            y: ``(N, O)`` regression targets or ``(N,)`` class indices.
            factor: as in :meth:`output_moments`.
        """
        mean, var = self.output_moments(phi, factor)
        noise = self.noise_variance()
        if self.classifies:
            spread = mean + 0.5 * (var + noise)
            return mean.gather(-1, y.long().unsqueeze(-1)).squeeze(-1) - spread.logsumexp(-1)
        resid = (y - mean).pow(2) + var
        log_norm = self.noise_log_scale + 0.5 * math.log(2 * math.pi)
        return (-0.5 * resid / noise - log_norm).sum(-1)

    def loss(
        self, phi: torch.Tensor, y: torch.Tensor, n: int, kl_weight: float = 1.0
    ) -> torch.Tensor:
        """The negative ELBO per row of a data set of ``n`` rows, on the minibatch ``(phi, y)``:
        ``−mean(E_q log p(y | φ)) + kl_weight · (KL − log p(σ)) / n``, ``()``.

        Example:
            >>> head = VBLLHead(3, 2, classifies=True, prior_variance=1, wishart_scale=1, dof=1)
            >>> loss = head.loss(torch.zeros(5, 3), torch.zeros(5, dtype=torch.long), n=5)
            >>> loss.shape, loss.requires_grad
            (torch.Size([]), True)
        """
        factor = self._factor()  # L once, for the KL and the likelihood both
        penalty = (self.kl(factor) - self.noise_log_prior()) * (kl_weight / n)
        return penalty - self.expected_log_lik(phi, y, factor).mean()

    # ------------------------------------------------------------------ draws
    def sample_outputs(self, phi: torch.Tensor, num_samples: int) -> torch.Tensor:
        """``(S, N, O)`` outputs ``W_s φ`` for ``S`` draws ``W_s ~ q`` (one ``W`` per draw for
        every row), from the global generator. A classifier's logit noise is one draw ``ε_s``
        per sample too, shared by the rows: each row's logits are then exactly the predictive's
        ``N(m_cᵀφ, φᵀΣ_cφ + σ_c²)``, and a row's draws do not depend on which rows come with
        it."""
        o, f = self.mean.shape
        eps = torch.randn(num_samples, o, f, dtype=phi.dtype, device=phi.device)
        lower, diag = self._factor()
        spread = diag * eps
        if lower is not None:  # L_o ε_so: one product per output for all draws
            spread = spread + torch.einsum("ofg,sog->sof", lower, eps)
        weights = self.mean + spread  # (S, O, F)
        out = torch.einsum("sof,nf->sno", weights, phi)
        if self.classifies:
            noise = torch.randn(num_samples, 1, o, dtype=phi.dtype, device=phi.device)
            out = out + self.noise_log_scale.exp() * noise
        return out

    def extra_repr(self) -> str:
        """The head's sizes and covariance, for ``repr``.

        Example:
            >>> VBLLHead(3, 1, classifies=False, prior_variance=1, wishart_scale=1, dof=1)
            VBLLHead(features=3, outputs=1, covariance='dense')
        """
        o, f = self.mean.shape
        return f"features={f}, outputs={o}, covariance={self.covariance!r}"


@functools.lru_cache(maxsize=8)
def _mask(size: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return torch.ones(size, size, device=device, dtype=dtype).tril(-1)


def _strictly_lower(like: torch.Tensor) -> torch.Tensor:
    """``(F, F)``: ones below the diagonal, zeros elsewhere, on ``like``'s device and dtype
    (made once per size, device and dtype)."""
    return _mask(like.shape[-1], like.device, like.dtype)
