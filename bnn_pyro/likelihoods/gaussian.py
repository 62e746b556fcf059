"""Gaussian likelihoods: fixed or learned homoscedastic noise, and heteroscedastic."""

from __future__ import annotations

import math
from abc import abstractmethod
from contextlib import nullcontext
from typing import Any

import pyro
import pyro.distributions as dist
import torch
import torch.nn.functional as F

from bnn_pyro.likelihoods.base import Likelihood, float_targets
from bnn_pyro.likelihoods.noise_init import residual_scale
from bnn_pyro.priors._latent import check_scale_prior
from bnn_pyro.weight_distributions import LOG_SQRT_2PI, rebuild_on

__all__ = [
    "NOISE_SITE",
    "Gaussian",
    "GaussianLikelihood",
    "HeteroscedasticGaussian",
    "noise_latents",
]

NOISE_SITE = "likelihood.scale"


def noise_latents(sigma: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """A Gaussian noise std given from outside the model (a classic method's ``noise_scale``)
    as the ``latents`` of :meth:`Likelihood.log_prob` and
    :meth:`Likelihood.output_hessian`: ``{NOISE_SITE: sigma}``, or none for ``None`` (a
    likelihood without a noise).

    Args:
        sigma: a scalar or ``(O,)`` tensor of positive stds, or ``None``.

    Example:
        >>> noise_latents(torch.tensor([0.5])), noise_latents(None)
        ({'likelihood.scale': tensor([0.5000])}, {})
    """
    if sigma is None:
        return {}
    if not isinstance(sigma, torch.Tensor):
        raise TypeError(f"sigma must be a torch.Tensor or None, got {type(sigma).__name__}")
    return {NOISE_SITE: sigma}


class GaussianLikelihood(Likelihood):
    """``y ~ Normal(loc, scale)`` independent over rows and columns; subclasses say where
    ``loc`` and ``scale`` come from.

    Example:
        >>> f = torch.zeros(3, 5, 1)  # (S, N, O)
        >>> Gaussian(scale=0.5).noise_variance(f, {})
        tensor(0.2500)
    """

    gaussian = True

    def target_dim(self, out_dim: int) -> int:
        return out_dim

    def check_targets(self, y: torch.Tensor, out_dim: int) -> torch.Tensor:
        return float_targets(y, self.target_dim(out_dim), "a Gaussian likelihood")

    @abstractmethod
    def loc_scale(
        self, f: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The observation Normal's ``(loc, scale)``, each ``(..., N, O)``, from the net's
        output ``f`` (``(..., N, O)``, or ``(..., N, 2O)`` for a heteroscedastic head) and the
        model's latent sites (a learned noise scale)."""

    def distribution(
        self, f: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> dist.TorchDistribution:
        loc, scale = self.loc_scale(f, latents)
        return dist.Normal(loc, scale, validate_args=False).to_event(1)

    def log_prob(
        self, f: torch.Tensor, y: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """``sum_o log Normal(y_no; loc_no, scale_no)`` per row, in plain torch (see
        :meth:`Likelihood.log_prob`).

        Example:
            >>> f, y = torch.zeros(2, 3, 1), torch.zeros(3, 1)  # (S, N, O), (N, O)
            >>> Gaussian(scale=1.0).log_prob(f, y, {})[0, 0].item()  # -log(2 pi) / 2
            -0.9189385175704956
        """
        loc, scale = self.loc_scale(f, latents)
        z = (y - loc) / scale
        return (-0.5 * z * z - scale.log() - LOG_SQRT_2PI).sum(-1)

    def mean(self, f: torch.Tensor) -> torch.Tensor:
        return f[..., : self.target_dim(f.shape[-1])]

    def noise_variance(
        self, f: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> torch.Tensor | None:
        return self.loc_scale(f, latents)[1] ** 2

    def null_nll(self, y: torch.Tensor) -> float | None:
        """``y (N, O)`` predicted by its column means, with the noise this likelihood has: its
        fixed scale, or one fitted to the columns (their std) where it is learned.

        Example:
            >>> y = torch.tensor([[0.0], [2.0]])
            >>> round(Gaussian(scale=1.0).null_nll(y), 4)  # 2 * (0.5 * log(2 pi) + 0.5)
            2.8379
        """
        y = y.double()
        fixed = getattr(self, "scale", None)
        if isinstance(fixed, float):
            sd = y.new_tensor(fixed)  # one scale for every column, broadcast
        else:
            sd = y.std(0, unbiased=False).clamp_min(1e-12)
        return float(-torch.distributions.Normal(y.mean(0), sd).log_prob(y).sum())


class Gaussian(GaussianLikelihood):
    """``y ~ Normal(f(x), scale)``, independent over rows and output columns.

    Args:
        scale: the noise standard deviation: a positive float (fixed, known noise) or
            ``"learned"`` (a latent site ``"likelihood.scale"`` of shape ``(O,)``, one noise
            level per output, with prior ``scale_prior``).
        scale_prior: prior of the learned scale, on the positive reals (``HalfCauchy``,
            ``HalfNormal``, ``Gamma``, ...); default ``LogNormal(0, 1)`` (median 1, 95% of
            its mass in [0.14, 7.1]), suited to standardised targets.
        scale_init: where the learned scale starts (the guide's median): ``"data"`` (default:
            the residual std of a least-squares linear fit to the training data, per output;
            see :mod:`bnn_pyro.likelihoods.noise_init`), ``"prior"`` (the prior's median) or a
            positive float.

    Example:
        >>> Gaussian(scale=0.1)
        Gaussian(scale=0.1)
    """

    homoscedastic = True

    def __init__(
        self,
        scale: float | str = 1.0,
        scale_prior: dist.TorchDistribution | None = None,
        scale_init: float | str = "data",
    ) -> None:
        if isinstance(scale, str):
            if scale != "learned":
                raise ValueError(f"scale must be a positive float or 'learned', got {scale!r}")
        elif isinstance(scale, bool) or not isinstance(scale, (int, float)):
            raise TypeError(f"scale must be a positive float or 'learned', got {scale!r}")
        elif not (scale > 0 and math.isfinite(scale)):
            raise ValueError(f"scale must be positive and finite, got {scale}")
        if scale_init != "data" and scale != "learned":
            raise ValueError("scale_init is only used with scale='learned'")
        if scale_prior is not None and scale != "learned":
            raise ValueError("scale_prior is only used with scale='learned'")
        if scale_prior is None:
            scale_prior = dist.LogNormal(0.0, 1.0)
        scale_prior = check_scale_prior("scale_prior", scale_prior)
        if isinstance(scale_init, str):
            if scale_init not in ("data", "prior"):
                raise ValueError(
                    f"scale_init must be 'data', 'prior' or a positive float, got {scale_init!r}"
                )
        elif isinstance(scale_init, bool) or not isinstance(scale_init, (int, float)):
            raise TypeError(
                f"scale_init must be 'data', 'prior' or a positive float, got {scale_init!r}"
            )
        elif not (scale_init > 0 and math.isfinite(scale_init)):
            raise ValueError(f"scale_init must be positive and finite, got {scale_init}")
        self.scale = scale if isinstance(scale, str) else float(scale)
        self.scale_prior = scale_prior
        self.scale_init = scale_init if isinstance(scale_init, str) else float(scale_init)
        self._prior_cache: dict[tuple, dist.TorchDistribution] = {}

    def log_prob(
        self, f: torch.Tensor, y: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """As :meth:`GaussianLikelihood.log_prob`; a fixed scale (no latent given) in fewer
        operations: ``-0.5 / s**2 * sum_o (y - f)**2 - O (log s + log sqrt(2 pi))``, the hot
        path of every fit with a known noise.

        Example:
            >>> lp = Gaussian(scale=2.0).log_prob(torch.zeros(1, 3), torch.ones(1, 3), {})
            >>> round(lp.item(), 4)  # 3 log N(1; 0, 2^2) = -3/8 - 3 log(2 sqrt(2 pi))
            -5.2113
        """
        if self.learned or NOISE_SITE in latents or type(self).loc_scale is not Gaussian.loc_scale:
            return super().log_prob(f, y, latents)  # (a subclass's own loc_scale is read)
        s = self.scale
        d = y - f
        return (d * d).sum(-1) * (-0.5 / s**2) - f.shape[-1] * (math.log(s) + LOG_SQRT_2PI)

    def output_hessian(
        self, f: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, bool]:
        """``(1 / scale**2, False)``: the Hessian in the location is ``diag(1/σ²)`` (see
        :meth:`Likelihood.output_hessian`).

        Example:
            >>> Gaussian(scale=0.5).output_hessian(torch.zeros(1, 2), {})
            (tensor([[4., 4.]]), False)
        """
        loc, scale = self.loc_scale(f, latents)
        return (1.0 / scale**2).expand(loc.shape), False

    def predictive_log_prob(
        self, f: torch.Tensor, var: torch.Tensor, y: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """``sum_o log N(y_no; f_no, var_no + σ_o²)`` per row: exact, the output's variance
        added to the noise's (see :meth:`Likelihood.predictive_log_prob`).

        Example:
            >>> lp = Gaussian(scale=1.0).predictive_log_prob(
            ...     torch.zeros(1, 1), torch.full((1, 1), 3.0), torch.zeros(1, 1), {})
            >>> round(lp.item(), 4)  # log N(0; 0, 4) = -log(2 sqrt(2 pi))
            -1.6121
        """
        loc, scale = self.loc_scale(f, latents)
        total = var + scale**2
        return (-0.5 * (y - loc) ** 2 / total - 0.5 * total.log() - LOG_SQRT_2PI).sum(-1)

    def point_loss(self, f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Each row's squared error, averaged over the outputs: ``mean_o (y_no - f_no)**2``, the
        least-squares loss of a point fit whatever the scale (a classic method estimates its
        noise after the fit). ``f: (*S, N, O)``, ``y: (*S, N, O)`` or ``(N, O)`` → ``(*S, N)``.

        Example:
            >>> Gaussian(scale=2.0).point_loss(torch.zeros(1, 2), torch.tensor([[1.0, 3.0]]))
            tensor([5.])
        """
        return (f - y).pow(2).mean(-1)

    @property
    def learned(self) -> bool:
        """Whether the noise scale is a latent site (``scale="learned"``)."""
        return self.scale == "learned"

    def sample_latents(self, f: torch.Tensor) -> dict[str, torch.Tensor]:
        if not self.learned:
            return {}
        return {NOISE_SITE: pyro.sample(NOISE_SITE, self.noise_prior(f))}

    def latent_priors(self, f: torch.Tensor) -> dict[str, dist.TorchDistribution] | None:
        """``{"likelihood.scale": noise_prior(f)}`` for a learned noise, ``{}`` for a fixed one
        (see :meth:`Likelihood.latent_priors`); ``None`` for a subclass that draws its own.

        Example:
            >>> sorted(Gaussian(scale="learned").latent_priors(torch.zeros(5, 2)))
            ['likelihood.scale']
        """
        if type(self).sample_latents is not Gaussian.sample_latents:
            return None
        # not validating its draws: the objectives score their own values, and a check of
        # them would break a compiled graph
        return {NOISE_SITE: self.noise_prior(f, validate=False)} if self.learned else {}

    def noise_prior(self, f: torch.Tensor, validate: bool = True) -> dist.TorchDistribution:
        """The prior of the learned noise site for net outputs ``f (..., O)``: ``scale_prior``
        on ``f``'s device and dtype, one scale per output (event shape ``(O,)``), cached;
        ``validate=False``: one that does not check the values it scores.

        Example:
            >>> Gaussian(scale="learned").noise_prior(torch.zeros(5, 2)).event_shape
            torch.Size([2])
        """
        key = (f.shape[-1], f.device, f.dtype, validate)
        prior = self._prior_cache.get(key)
        if prior is None:
            with nullcontext() if validate else pyro.validation_enabled(False):
                prior = rebuild_on(self.scale_prior, f.device, f.dtype)
                prior = prior.expand(key[:1]).to_event(1)
            self._prior_cache[key] = prior
        return prior

    def initial_latents(self, X: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{"likelihood.scale": (O,)}`` from ``scale_init`` (nothing for a fixed scale or
        ``scale_init="prior"``).

        Example:
            >>> g = torch.Generator().manual_seed(0)
            >>> X = torch.randn(200, 1, generator=g)
            >>> y = 3 * X + 0.5 * torch.randn(200, 1, generator=g)
            >>> s = Gaussian(scale="learned").initial_latents(X, y)["likelihood.scale"]
            >>> bool(0.4 < s.item() < 0.6)
            True
        """
        if not self.learned or self.scale_init == "prior":
            return {}
        if self.scale_init == "data":
            return {NOISE_SITE: residual_scale(X, y)}
        value = torch.full(y.shape[-1:], self.scale_init, dtype=y.dtype, device=y.device)
        return {NOISE_SITE: value}

    def fixed_latents(self, f: torch.Tensor) -> dict[str, torch.Tensor]:
        """A fixed scale as the value of the noise site, one per output ``(O,)`` (none when
        the scale is learned: it is sampled).

        Example:
            >>> Gaussian(scale=0.5).fixed_latents(torch.zeros(4, 2))
            {'likelihood.scale': tensor([0.5000, 0.5000])}
        """
        if self.learned:
            return {}
        return {NOISE_SITE: f.new_full(f.shape[-1:], self.scale)}

    def loc_scale(
        self, f: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(f, scale)``: the scale is ``latents["likelihood.scale"]`` where given (a learned
        scale's draw, or stacked models' own fixed scales, :meth:`fixed_latents`), else the
        fixed one."""
        scale = latents.get(NOISE_SITE)
        if scale is None:
            if self.learned:
                raise KeyError(f"a learned scale needs its latent {NOISE_SITE!r}")
            return f, f.new_tensor(self.scale)
        # (O,), or (*S, 1, O) under sample plates
        if scale.dim() == 2:  # (S, O) posterior samples: align with f's (S, N, O)
            scale = scale.unsqueeze(-2)
        return f, scale

    @classmethod
    def _from_config(cls, own: dict[str, Any]) -> Likelihood:
        prior = own.get("scale_prior")
        if prior is not None:
            prior = getattr(dist, prior["distribution"])(**prior["params"])
        return cls(scale=own["scale"], scale_prior=prior, scale_init=own.get("scale_init", "data"))

    def _own_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"scale": self.scale}
        if self.learned:
            config["scale_init"] = self.scale_init
            prior = self.scale_prior
            config["scale_prior"] = {
                "distribution": type(prior).__name__,
                "params": {k: torch.as_tensor(getattr(prior, k)) for k in prior.arg_constraints},
            }
        return config

    def __repr__(self) -> str:
        if self.learned:
            init = "" if self.scale_init == "data" else f", scale_init={self.scale_init!r}"
            return f"Gaussian(scale='learned', scale_prior={self.scale_prior!r}{init})"
        return f"Gaussian(scale={self.scale!r})"


class HeteroscedasticGaussian(GaussianLikelihood):
    """``y ~ Normal(loc(x), scale(x))``: the net predicts its own noise.

    The net has ``2*O`` outputs: the first ``O`` are the location, the last ``O`` pass through
    ``softplus(.) + min_scale`` to give the scale (Nix & Weigend 1994; Lakshminarayanan et al.
    2017).

    Args:
        min_scale: a floor on the predicted scale, for numerical stability.

    Example:
        >>> lik = HeteroscedasticGaussian()
        >>> lik.output_dim(1)
        2
    """

    def __init__(self, min_scale: float = 1e-3) -> None:
        if isinstance(min_scale, bool) or not isinstance(min_scale, (int, float)):
            raise TypeError(f"min_scale must be a float >= 0, got {min_scale!r}")
        if not (min_scale >= 0 and math.isfinite(min_scale)):
            raise ValueError(f"min_scale must be a finite float >= 0, got {min_scale!r}")
        self.min_scale = float(min_scale)

    def output_dim(self, target_dim: int) -> int:
        return 2 * target_dim

    def target_dim(self, out_dim: int) -> int:
        if out_dim % 2:
            raise ValueError(
                "HeteroscedasticGaussian needs an even number of net outputs (a loc and a scale "
                f"per target), got {out_dim}"
            )
        return out_dim // 2

    def loc_scale(
        self, f: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        o = self.target_dim(f.shape[-1])
        return f[..., :o], F.softplus(f[..., o:]) + self.min_scale

    def _own_config(self) -> dict[str, Any]:
        return {"min_scale": self.min_scale}
