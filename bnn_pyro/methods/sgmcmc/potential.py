"""``PyroPotential``: the potential ``U(θ)`` of a :class:`~bnn_pyro.VariationalBNN`'s Pyro model
over one flat vector of unconstrained coordinates, and its gradient by autograd.

``U(θ) = -log p(θ) - (N/B) Σ_batch log p(y|x, θ) - log|det J(θ)|``: the model is traced
conditioned on the weights ``T(θ)`` (each latent site through ``biject_to`` of its support: the
identity for weights, ``exp`` for a learned noise scale, whose Jacobian enters ``U``), and the
trace's ``log_prob_sum()`` gives the prior and the minibatch likelihood, which the model's data
plate already scales by ``N/B``. Nothing here restates a prior or a likelihood.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyro.poutine as poutine
import torch
from pyro.infer.autoguide.initialization import init_to_median
from pyro.poutine.util import site_is_subsample
from torch.distributions import biject_to
from torch.distributions.transforms import ComposeTransform, IndependentTransform, Transform

__all__ = ["PyroPotential", "SiteLayout"]


@dataclass(frozen=True)
class SiteLayout:
    """One latent site of the model inside the flat vector: ``name``, ``shape``, its slice
    ``[start, start + numel)`` and the bijection from unconstrained to the site's support.

    Example:
        >>> layout = SiteLayout("w", (2, 3), 0, biject_to(torch.distributions.constraints.real))
        >>> layout.numel
        6
    """

    name: str
    shape: tuple[int, ...]
    start: int
    transform: Transform

    @property
    def numel(self) -> int:
        """The number of coordinates of the site."""
        return math.prod(self.shape)


class PyroPotential:
    """``U`` of ``model(x, y, dataset_size)`` over the flat unconstrained vector ``θ (P,)``.

    Args:
        model: a Pyro model ``model(x, y=None, dataset_size=None) -> f`` whose latent sites are
            global (outside any plate), e.g. ``VariationalBNN.model``.
        x: ``(n, ...)`` a few inputs to discover the sites with (one trace, no gradient).
        y: their targets, or ``None`` (sampled).
        observed: the observation site's name (not a latent site, even when ``y`` is None).

    Shapes:
        ``θ``: ``(P,)``; :meth:`constrain` maps ``(..., P)`` to ``(..., P)``;
        :meth:`unflatten` maps ``(S, P)`` to ``{site: (S, *shape)}``.

    Example:
        >>> import pyro, pyro.distributions as dist
        >>> def model(x, y=None, dataset_size=None):
        ...     w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
        ...     with pyro.plate("data", dataset_size or len(x), subsample=torch.arange(len(x))):
        ...         return pyro.sample("obs", dist.Normal(x @ w, 1.0), obs=y)
        >>> potential = PyroPotential(model, torch.ones(1, 2), torch.zeros(1))
        >>> value, grad = potential.gradient(torch.zeros(2), torch.ones(4, 2), torch.ones(4), 8)
        >>> round(value, 4)  # -log N(0; 0, I₂) - (8/4) Σ_4 log N(1; 0, 1)
        13.1894
        >>> grad.tolist()  # ∇U / N = -(N/B) Σ x (y - x·w) / N
        [-1.0, -1.0]
    """

    def __init__(
        self,
        model: Callable[..., Any],
        x: torch.Tensor,
        y: torch.Tensor | None,
        observed: str = "obs",
    ) -> None:
        self.model = model
        self.observed = observed
        with poutine.block(), torch.no_grad():
            trace = poutine.trace(model).get_trace(x, y)
        self.sites: list[SiteLayout] = []
        self.initial: dict[str, torch.Tensor] = {}
        start = 0
        for name, site in trace.iter_stochastic_nodes():
            if site["is_observed"] or site_is_subsample(site) or name == observed:
                continue
            if site["cond_indep_stack"]:
                raise NotImplementedError(
                    f"SG-MCMC samples global latent sites only; {name!r} sits inside a plate"
                )
            shape, transform = tuple(site["value"].shape), biject_to(site["fn"].support)
            if transform.inverse_shape(shape) != shape:  # e.g. a simplex: one coordinate less
                raise NotImplementedError(
                    f"SG-MCMC samples sites whose unconstrained coordinates have the site's "
                    f"shape; {name!r} of shape {shape} has {transform.inverse_shape(shape)}"
                )
            layout = SiteLayout(name, shape, start, transform)
            self.sites.append(layout)
            self.initial[name] = init_to_median(site).detach()
            start += layout.numel
        if not self.sites:
            raise ValueError("the model has no latent sites: there is nothing to sample")
        self.size = start

    def flat(self, values: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
        """``θ (P,)``: the unconstrained coordinates of ``values`` (``{site: value}`` in the
        sites' own spaces), each site missing from it at its prior median."""
        values = dict(values or {})
        parts = []
        for site in self.sites:
            value = values.get(site.name, self.initial[site.name])
            ref = self.initial[site.name]
            value = torch.as_tensor(value, dtype=ref.dtype, device=ref.device).reshape(site.shape)
            parts.append(site.transform.inv(value).reshape(-1))
        return torch.cat(parts).detach()

    def constrain(self, theta: torch.Tensor) -> torch.Tensor:
        """``(..., P)`` unconstrained → ``(..., P)`` in the sites' own spaces."""
        parts = []
        for site in self.sites:
            part = theta[..., site.start : site.start + site.numel]
            parts.append(part if _identity(site) else site.transform(part))
        return torch.cat(parts, -1)

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """``(S, P)`` constrained samples → ``{site: (S, *shape)}``."""
        return {
            site.name: flat[:, site.start : site.start + site.numel].reshape(-1, *site.shape)
            for site in self.sites
        }

    def gradient(
        self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor, dataset_size: int
    ) -> tuple[float, torch.Tensor]:
        """``U(θ)`` on the minibatch ``(x (B, ...), y)`` standing for ``dataset_size`` points,
        and the per-datum gradient ``∇U / N`` ``(P,)``.

        Returns:
            ``(U, g)``.
        """
        theta = theta.detach().requires_grad_(True)
        values, log_det = {}, theta.new_zeros(())
        for site in self.sites:
            part = theta[site.start : site.start + site.numel].reshape(site.shape)
            if _identity(site):
                values[site.name] = part
            else:
                value = site.transform(part)
                values[site.name] = value
                log_det = log_det + site.transform.log_abs_det_jacobian(part, value).sum()
        conditioned = poutine.condition(self.model, data=values)
        trace = poutine.trace(conditioned).get_trace(x, y, dataset_size)
        potential = -(trace.log_prob_sum() + log_det)
        (grad,) = torch.autograd.grad(potential, theta)
        return float(potential.detach()), grad / dataset_size


def _identity(site: SiteLayout) -> bool:
    """Whether the site lives on the real line (no transform, no Jacobian)."""
    transform = site.transform
    while isinstance(transform, IndependentTransform):
        transform = transform.base_transform
    return isinstance(transform, ComposeTransform) and not transform.parts
