"""The black-box alpha energy (Hernandez-Lobato et al. 2016; Li & Gal 2017): ``fit(elbo="alpha")``.

For a guide ``q`` and ``P`` joint draws ``w_1..w_P`` of every latent site,

    ``L_alpha(q) = -sum_n (1/alpha) log( (1/P) sum_p p(y_n | x_n, w_p)^alpha ) + KL(q || p)``

(the data term over the ``B`` rows of a minibatch, times ``N / B``; the KL estimated by the
particles' mean of ``log q - log p``, or by the caller's ``kl_weight`` times it). As
``alpha -> 0`` the data term becomes the expected log-likelihood and ``L_alpha`` the negative
ELBO; ``alpha = 1`` is the predictive's own log-likelihood (an EP-like fit); ``alpha = 0.5``,
the value both papers recommend, makes the mean-field fit mass-covering rather than
mode-seeking: it no longer pays for every draw's error at every row, and keeps a wider posterior
(``tests/elbos/test_alpha.py`` checks it on a Bayesian linear regression).
The ``P`` draws are the estimator's: ``log mean exp`` over them falls short of ``log E`` by
about ``alpha^2 Var(log p(y_n | w)) / (2P)`` per row, a penalty on the posterior's variance of
``alpha / P`` times the data term's own, so ``num_particles`` is part of the method (10 in Li &
Gal's experiments and the default here: variances about ``alpha / P`` = 5% below the energy's
exact optimum; the test uses 100).

Measured on the UCI benchmark, paired split by split against the ELBO (``python -m
benchmarks.uci.variants alpha``): ``benchmarks/results/uci/variants/``; the ``bb_alpha`` row of
the main table: ``benchmarks/results/uci/uci.md``.

The model's observed sites give the per-row likelihood factors: each must have its rows in
its leading batch dimension under the particle plate (a ``pyro.plate`` over the data, as every
model of this library has).
"""

from __future__ import annotations

from typing import Any

import torch
from pyro.distributions.util import scale_and_mask
from pyro.infer import Trace_ELBO
from pyro.poutine.util import site_is_subsample

from bnn_pyro._checks import check_float, check_int

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_PARTICLES",
    "AlphaELBO",
    "alpha_particles",
    "check_alpha",
    "log_mean_exp",
]

#: Draws per step unless told otherwise (Li & Gal's choice; see the module docstring).
DEFAULT_PARTICLES = 10

#: The ``alpha`` of ``fit(elbo="alpha")`` (Hernandez-Lobato et al.'s and Li & Gal's choice).
DEFAULT_ALPHA = 0.5

_PARTICLES = "num_particles_vectorized"  # the name of Pyro's particle plate


class AlphaELBO(Trace_ELBO):
    """The black-box alpha energy as a Pyro ELBO (see the module docstring).

    Args:
        alpha: the divergence's ``alpha`` in ``(0, 1]`` (0.5: Hernandez-Lobato et al.'s and Li &
            Gal's choice; near 0 it is ``Trace_ELBO``).
        num_particles: ``P >= 2`` joint draws per step, vectorized.
        max_plate_nesting: plates in the model besides the particles' (1: the data plate).

    ``last_nll`` is minus the ``N / B``-scaled data term (what ``fit`` reports as ``nll``).

    Example:
        >>> import pyro, pyro.distributions as dist
        >>> def model(y):
        ...     w = pyro.sample("w", dist.Normal(0.0, 1.0))
        ...     with pyro.plate("data", len(y)):
        ...         pyro.sample("obs", dist.Normal(w, 1.0), obs=y)
        >>> loc = torch.tensor(0.3, requires_grad=True)
        >>> def guide(y):
        ...     pyro.sample("w", dist.Normal(loc, 0.5))
        >>> loss = AlphaELBO(0.5, num_particles=20).differentiable_loss(model, guide, torch.ones(4))
        >>> loss.shape, loss.requires_grad
        (torch.Size([]), True)
    """

    def __init__(
        self,
        alpha: float = DEFAULT_ALPHA,
        num_particles: int = DEFAULT_PARTICLES,
        max_plate_nesting: int = 1,
    ):
        alpha, num_particles = check_alpha(alpha, num_particles)
        max_plate_nesting = check_int("max_plate_nesting", max_plate_nesting, minimum=1)
        super().__init__(
            num_particles=num_particles,
            vectorize_particles=True,
            max_plate_nesting=max_plate_nesting,
        )
        self.alpha = alpha
        self.last_nll = torch.tensor(float("nan"))

    def _energy(self, model_trace: Any, guide_trace: Any) -> torch.Tensor:
        """``L_alpha`` from one vectorized trace pair (log-densities computed)."""
        p = self.num_particles
        # sum over the sites of log p - log q, every particle's draw at once: every latent site's
        # log-density carries the particle plate's dimension, so / P is the particles' mean
        latent: Any = 0.0
        data = torch.zeros(())
        for name, site in model_trace.nodes.items():
            if site["type"] != "sample" or site_is_subsample(site):
                continue
            if site["is_observed"]:
                rows = _per_particle_rows(name, site, p)  # (P, B)
                data = data + (log_mean_exp(self.alpha * rows) / self.alpha).sum() * _scale(site)
            elif name not in guide_trace.nodes:
                raise ValueError(
                    f"elbo='alpha' needs every latent site in the guide; {name!r} is drawn by "
                    f"the model only"
                )
            else:
                latent = latent + site["log_prob"].sum()
        for site in guide_trace.nodes.values():
            if site["type"] == "sample" and not site["is_observed"] and not site_is_subsample(site):
                latent = latent - site["log_prob"].sum()
        self.last_nll = -data.detach()
        return -(data + latent / p)

    def differentiable_loss(self, model: Any, guide: Any, *args: Any, **kwargs: Any) -> Any:
        """``L_alpha`` as a differentiable scalar (one vectorized pass of ``P`` draws)."""
        model_trace, guide_trace = self._get_vectorized_trace(model, guide, args, kwargs)
        return self._energy(model_trace, guide_trace)

    def loss(self, model: Any, guide: Any, *args: Any, **kwargs: Any) -> float:
        """``L_alpha`` as a float."""
        with torch.no_grad():
            return float(self.differentiable_loss(model, guide, *args, **kwargs))

    def loss_and_grads(self, model: Any, guide: Any, *args: Any, **kwargs: Any) -> float:
        """``L_alpha``, its gradients accumulated into the parameters' ``.grad``."""
        loss = self.differentiable_loss(model, guide, *args, **kwargs)
        if loss.requires_grad:
            loss.backward()
        return float(loss.detach())


def check_alpha(alpha: float, num_particles: int) -> tuple[float, int]:
    """``(alpha, num_particles)`` checked: ``alpha`` a float in ``(0, 1]``, ``num_particles`` an
    int ``>= 2`` (one draw has no ``log mean exp``).

    Raises:
        TypeError, ValueError: naming the argument.

    Example:
        >>> check_alpha(0.5, 10)
        (0.5, 10)
        >>> check_alpha(1.5, 10)
        Traceback (most recent call last):
        ...
        ValueError: alpha must be in (0, 1], got 1.5
    """
    alpha = check_float("alpha", alpha, minimum=0.0, strict=True)
    if alpha > 1.0:
        raise ValueError(f"alpha must be in (0, 1], got {alpha}")
    return alpha, check_int("num_particles", num_particles, minimum=2)


def alpha_particles(num_particles: int) -> int:
    """The draws per step that ``elbo="alpha"`` uses for a ``num_particles`` setting: 1 (``fit``'s
    default, meaningless for ``log mean exp``) means :data:`DEFAULT_PARTICLES`.

    Example:
        >>> alpha_particles(1), alpha_particles(32)
        (10, 32)
    """
    num_particles = check_int("num_particles", num_particles)
    return DEFAULT_PARTICLES if num_particles == 1 else num_particles


def log_mean_exp(z: torch.Tensor) -> torch.Tensor:
    """``log mean_p exp(z_p)`` over dim 0 (``(P, *rest)`` → ``rest``), exact for small spreads:
    ``max + log1p(mean(expm1(z - max)))`` keeps the digits that ``logsumexp(z) - log P`` cancels
    away when ``alpha`` is small.

    Example:
        >>> z = torch.tensor([[1e-7], [3e-7]])
        >>> float(log_mean_exp(z)[0]) / 2e-7  # the mean of z, to float precision
        1.0...
    """
    if not isinstance(z, torch.Tensor) or z.dim() == 0 or z.shape[0] == 0:
        raise ValueError(f"z must be a tensor with draws along dim 0, got {z!r}")
    top = z.detach().max(0).values
    return top + torch.log1p(torch.expm1(z - top).mean(0))


def _scale(site: dict) -> Any:
    """The site's subsample scale (``N / B``, times any ``poutine.scale``)."""
    scale = site["scale"]
    return scale.detach() if isinstance(scale, torch.Tensor) else scale


def _per_particle_rows(name: str, site: dict, p: int) -> torch.Tensor:
    """``(P, B)``: an observed site's log-likelihood factors, one per element of its batch shape
    under the plates (the rows; events already summed; masked rows 0)."""
    log_prob = scale_and_mask(site["unscaled_log_prob"], 1.0, site["mask"])
    plates = [f for f in site["cond_indep_stack"] if f.name != _PARTICLES]
    if not plates or log_prob.dim() < 2 or log_prob.shape[0] != p:
        raise ValueError(
            f"elbo='alpha' needs the observed site {name!r} drawn under the particle plate with "
            f"its rows in a plate; its log-density has shape {tuple(log_prob.shape)}"
        )
    return log_prob.reshape(p, -1)
