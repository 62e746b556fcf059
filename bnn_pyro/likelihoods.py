"""Likelihoods: the observation site of a BNN, and what its predictions mean.

A likelihood turns the net's output ``f: (N, O)`` (or ``(S, N, O)`` for S weight samples) into
the observation site ``"obs"`` inside ``pyro.plate("data", size=N_total)``, and tells
:meth:`bnn_pyro.VariationalBNN.predict` how to summarise ``f``:

===========================  =====================  ==========================  ===================
likelihood                   net output             ``predict`` mean            aleatoric variance
===========================  =====================  ==========================  ===================
``Gaussian``                 ``(N, O)`` locations   ``E[y]`` ``(N, O)``         ``scale**2``
``HeteroscedasticGaussian``  ``(N, 2*O)`` loc, raw  ``E[y]`` ``(N, O)``         ``softplus(raw)**2``
``Categorical``              ``(N, C)`` logits      class probabilities         --
``Bernoulli``                ``(N, O)`` logits      ``P(y = 1)``                --
===========================  =====================  ==========================  ===================

Learned noise (``Gaussian(scale="learned")``) is a latent site ``"likelihood.scale"`` with a
``LogNormal`` prior, so it gets a posterior like the weights and works unchanged under MCMC.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

import pyro
import pyro.distributions as dist
import torch
import torch.nn.functional as F

__all__ = [
    "Likelihood",
    "GaussianLikelihood",
    "Gaussian",
    "HeteroscedasticGaussian",
    "Categorical",
    "Bernoulli",
    "likelihood_from_config",
]

NOISE_SITE = "likelihood.scale"


def _data_plate(batch: int, dataset_size: int | None, dim: int = -1) -> pyro.plate:
    size = batch if dataset_size is None else dataset_size
    if size < batch:
        raise ValueError(
            f"dataset_size must be >= the number of rows passed, got dataset_size={size}, "
            f"batch={batch}"
        )
    subsample = None if size == batch else torch.arange(batch)
    return pyro.plate("data", size=size, subsample=subsample, dim=dim)


#: How argument errors describe a likelihood argument.
LIKELIHOOD_EXPECTED = "a bnn_pyro.likelihoods.Likelihood (e.g. Gaussian(), Categorical())"


class Likelihood(ABC):
    """Base class of the observation models.

    Subclasses define :meth:`distribution` (of ``y`` given one net output; the Pyro site of
    :meth:`observe` and :meth:`log_prob` use it), :meth:`mean` (the predictive mean of ``y``
    given one net output) and :meth:`check_targets`; likelihoods with latent variables of their
    own (a learned noise scale) also :meth:`sample_latents`. ``name`` is the observation site.

    Example:
        >>> lik: Likelihood = Categorical()
        >>> lik.mean(torch.zeros(1, 2, 4)).shape  # (S, N, C) logits -> class probabilities
        torch.Size([1, 2, 4])
    """

    name = "obs"

    def output_dim(self, target_dim: int) -> int:
        """The net output width needed for targets of width ``target_dim``."""
        return target_dim

    @abstractmethod
    def check_targets(self, y: torch.Tensor, out_dim: int) -> torch.Tensor:
        """Validate ``y`` against a net output of width ``out_dim`` and return it in the shape and
        dtype the observation site needs (raises ``ValueError``/``TypeError``)."""

    def sample_latents(self, f: torch.Tensor) -> dict[str, torch.Tensor]:
        """Declare the likelihood's own latent sites (none by default) for net output ``f``."""
        return {}

    def distribution(
        self, f: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> dist.TorchDistribution:
        """The distribution of each row's ``y`` given net output ``f: (*S, N, O)``: batch shape
        ``(*S, N)``, the output columns in its event. Subclasses define it (or override both
        :meth:`observe` and :meth:`log_prob`)."""
        raise NotImplementedError(f"{type(self).__name__} defines no distribution()")

    def observe(
        self,
        f: torch.Tensor,
        y: torch.Tensor | None,
        latents: dict[str, torch.Tensor],
        dataset_size: int | None = None,
    ) -> None:
        """Declare the observation site for net output ``f`` inside the data plate.

        Args:
            f: ``(N, O)`` or ``(*S, N, O)`` net output.
            y: targets as returned by :meth:`check_targets`, or ``None`` to sample.
            latents: what :meth:`sample_latents` returned.
            dataset_size: total number of data points; the ``N`` rows stand for it (their
                log-likelihood is scaled by ``dataset_size / N``). ``None``: the rows are all.
        """
        with _data_plate(f.shape[-2], dataset_size):
            pyro.sample(self.name, self.distribution(f, latents), obs=y)

    @abstractmethod
    def mean(self, f: torch.Tensor) -> torch.Tensor:
        """The predictive mean of ``y`` given net output ``f: (S, N, O)`` → ``(S, N, O')``."""

    def log_prob(
        self, f: torch.Tensor, y: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """``log p(y_n | f_s)`` for net outputs ``f: (S, N, O)`` and checked targets ``y`` →
        ``(S, N)`` (summed over output columns)."""
        return self.distribution(f, latents).log_prob(y)

    def noise_variance(
        self, f: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> torch.Tensor | None:
        """Aleatoric variance per sample, broadcastable to :meth:`mean`; None if not Gaussian."""
        return None

    _subclasses: dict[str, type[Likelihood]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        Likelihood._subclasses[cls.__name__] = cls

    @classmethod
    def _from_config(cls, own: dict[str, Any]) -> Likelihood:
        """The inverse of :meth:`config` (``own``: the settings without ``type``)."""
        return cls(**own)

    def config(self) -> dict[str, Any]:
        """A ``weights_only``-safe description, inverse of :func:`likelihood_from_config`."""
        return {"type": type(self).__name__, **self._own_config()}

    def _own_config(self) -> dict[str, Any]:
        return {}

    def __repr__(self) -> str:
        own = ", ".join(f"{k}={v!r}" for k, v in self._own_config().items())
        return f"{type(self).__name__}({own})"


def _float_targets(y: torch.Tensor, out_dim: int, what: str) -> torch.Tensor:
    if not torch.is_floating_point(y):
        y = y.float()
    if y.dim() == 1:
        y = y.unsqueeze(-1)
    if y.dim() != 2 or y.shape[1] != out_dim:
        raise ValueError(
            f"y must have shape (N,) or (N, {out_dim}) for {what} with {out_dim} output(s), "
            f"got {tuple(y.shape)}"
        )
    return y


class GaussianLikelihood(Likelihood):
    """``y ~ Normal(loc, scale)`` independent over rows and columns; subclasses say where
    ``loc`` and ``scale`` come from.

    Example:
        >>> f = torch.zeros(3, 5, 1)  # (S, N, O)
        >>> Gaussian(scale=0.5).noise_variance(f, {})
        tensor(0.2500)
    """

    def target_dim(self, out_dim: int) -> int:
        return out_dim

    def check_targets(self, y: torch.Tensor, out_dim: int) -> torch.Tensor:
        return _float_targets(y, self.target_dim(out_dim), "a Gaussian likelihood")

    @abstractmethod
    def _loc_scale(
        self, f: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def distribution(
        self, f: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> dist.TorchDistribution:
        loc, scale = self._loc_scale(f, latents)
        return dist.Normal(loc, scale, validate_args=False).to_event(1)

    def mean(self, f: torch.Tensor) -> torch.Tensor:
        return f[..., : self.target_dim(f.shape[-1])]

    def noise_variance(
        self, f: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> torch.Tensor | None:
        return self._loc_scale(f, latents)[1] ** 2


class Gaussian(GaussianLikelihood):
    """``y ~ Normal(f(x), scale)``, independent over rows and output columns.

    Args:
        scale: the noise standard deviation: a positive float (fixed, known noise) or
            ``"learned"`` (a latent site ``"likelihood.scale"`` of shape ``(O,)``, one noise
            level per output, with prior ``scale_prior``).
        scale_prior: prior of the learned scale; default ``LogNormal(0, 1)`` (median 1, 95% of
            its mass in [0.14, 7.1]), suited to standardised targets.

    Example:
        >>> Gaussian(scale=0.1)
        Gaussian(scale=0.1)
    """

    def __init__(
        self, scale: float | str = 1.0, scale_prior: dist.TorchDistribution | None = None
    ) -> None:
        if isinstance(scale, str):
            if scale != "learned":
                raise ValueError(f"scale must be a positive float or 'learned', got {scale!r}")
        elif isinstance(scale, bool) or not isinstance(scale, (int, float)):
            raise TypeError(f"scale must be a positive float or 'learned', got {scale!r}")
        elif not (scale > 0 and math.isfinite(scale)):
            raise ValueError(f"scale must be positive and finite, got {scale}")
        if scale_prior is not None and scale != "learned":
            raise ValueError("scale_prior is only used with scale='learned'")
        if scale_prior is None:
            scale_prior = dist.LogNormal(0.0, 1.0)
        if scale_prior.support is not dist.constraints.positive or scale_prior.batch_shape != ():
            raise ValueError(
                "scale_prior must be a scalar distribution on the positive reals, got "
                f"{scale_prior!r}"
            )
        self.scale = scale if isinstance(scale, str) else float(scale)
        self.scale_prior = scale_prior
        self._prior_cache: dict[tuple, dist.TorchDistribution] = {}

    @property
    def learned(self) -> bool:
        """Whether the noise scale is a latent site (``scale="learned"``)."""
        return self.scale == "learned"

    def sample_latents(self, f: torch.Tensor) -> dict[str, torch.Tensor]:
        if not self.learned:
            return {}
        key = (f.shape[-1], f.device, f.dtype)
        prior = self._prior_cache.get(key)
        if prior is None:
            from bnn_pyro.priors import _rebuild

            prior = _rebuild(self.scale_prior, f.device, f.dtype).expand(key[:1]).to_event(1)
            self._prior_cache[key] = prior
        return {NOISE_SITE: pyro.sample(NOISE_SITE, prior)}

    def _loc_scale(
        self, f: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.learned:
            return f, torch.as_tensor(self.scale, dtype=f.dtype, device=f.device)
        scale = latents[NOISE_SITE]  # (O,), or (*S, 1, O) under sample plates
        if scale.dim() == 2:  # (S, O) posterior samples: align with f's (S, N, O)
            scale = scale.unsqueeze(-2)
        return f, scale

    @classmethod
    def _from_config(cls, own: dict[str, Any]) -> Likelihood:
        prior = own.get("scale_prior")
        if prior is not None:
            prior = getattr(dist, prior["distribution"])(**prior["params"])
        return cls(scale=own["scale"], scale_prior=prior)

    def _own_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"scale": self.scale}
        if self.learned:
            prior = self.scale_prior
            config["scale_prior"] = {
                "distribution": type(prior).__name__,
                "params": {k: torch.as_tensor(getattr(prior, k)) for k in prior.arg_constraints},
            }
        return config

    def __repr__(self) -> str:
        if self.learned:
            return f"Gaussian(scale='learned', scale_prior={self.scale_prior!r})"
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

    def _loc_scale(
        self, f: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        o = self.target_dim(f.shape[-1])
        return f[..., :o], F.softplus(f[..., o:]) + self.min_scale

    def _own_config(self) -> dict[str, Any]:
        return {"min_scale": self.min_scale}


class Categorical(Likelihood):
    """``y ~ Categorical(logits=f(x))`` for class labels ``0..C-1``.

    Example:
        >>> Categorical().check_targets(torch.tensor([0, 2, 1]), out_dim=3)
        tensor([0, 2, 1])
    """

    def check_targets(self, y: torch.Tensor, out_dim: int) -> torch.Tensor:
        if y.dim() == 2 and y.shape[1] == 1:
            y = y.squeeze(1)
        if y.dim() != 1:
            raise ValueError(f"y must be a vector of class labels (N,), got shape {tuple(y.shape)}")
        if y.dtype == torch.bool:
            raise TypeError("y must hold integer class labels, got a bool tensor")
        if torch.is_floating_point(y) and not bool((y == y.round()).all()):
            raise ValueError("y must hold integer class labels, got non-integer values")
        y = y.long()
        if y.numel() and (int(y.min()) < 0 or int(y.max()) >= out_dim):
            raise ValueError(
                f"y labels must be in [0, {out_dim - 1}] for a net with {out_dim} outputs, got "
                f"labels in [{int(y.min())}, {int(y.max())}]"
            )
        return y

    def distribution(
        self, f: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> dist.TorchDistribution:
        return dist.Categorical(logits=f, validate_args=False)

    def mean(self, f: torch.Tensor) -> torch.Tensor:
        return torch.softmax(f, dim=-1)


class Bernoulli(Likelihood):
    """``y ~ Bernoulli(logits=f(x))`` for binary targets in {0, 1} (one or several columns).

    Example:
        >>> Bernoulli().check_targets(torch.tensor([0, 1, 1]), out_dim=1).shape
        torch.Size([3, 1])
    """

    def check_targets(self, y: torch.Tensor, out_dim: int) -> torch.Tensor:
        y = _float_targets(y, out_dim, "a Bernoulli likelihood")
        if not bool(((y == 0) | (y == 1)).all()):
            raise ValueError("y must hold binary targets in {0, 1} for a Bernoulli likelihood")
        return y

    def distribution(
        self, f: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> dist.TorchDistribution:
        return dist.Bernoulli(logits=f, validate_args=False).to_event(1)

    def mean(self, f: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(f)


def likelihood_from_config(config: dict[str, Any]) -> Likelihood:
    """Rebuild a likelihood from :meth:`Likelihood.config` (used when loading a checkpoint).

    The ``type`` names a :class:`Likelihood` subclass: every subclass is registered by its
    class name when it is defined, so a user's own likelihood reloads once its module is
    imported.

    Example:
        >>> likelihood_from_config(Gaussian(scale=0.5).config())
        Gaussian(scale=0.5)
    """
    config = dict(config)
    kind = config.pop("type", None)
    if kind not in Likelihood._subclasses:
        raise ValueError(
            f"unknown likelihood type {kind!r} in checkpoint (known: "
            f"{sorted(Likelihood._subclasses)}); import the module that defines it before loading"
        )
    return Likelihood._subclasses[kind]._from_config(config)
