"""``MeanFieldNormalGuide``: the library's own guide, one plain ``Normal`` site per latent tensor.

``LogNormal`` for positive sites such as a learned noise scale; no auxiliary or ``Delta`` sites.
With it ``TraceMeanField_ELBO`` computes the KL term in closed form, and ``Trace_ELBO`` estimates
it by Monte Carlo. Its parameters live in the module (never in Pyro's global param store), so two
models in one process never share them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import nullcontext
from typing import Any

import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import torch
import torch.nn as nn
import torch.nn.functional as F
from pyro.distributions.transforms import ExpTransform
from pyro.infer import autoguide
from pyro.poutine.util import site_is_subsample
from torch.distributions import biject_to

from bnn_pyro.nn.pyro_net import param_statement
from bnn_pyro.poutine.kl_weight import KLWeight
from bnn_pyro.weight_distributions import ReparamNormal

__all__ = ["MeanFieldNormalGuide", "inverse_softplus"]


def inverse_softplus(x: torch.Tensor) -> torch.Tensor:
    """``rho`` with ``softplus(rho) = x`` (``x > 0``), stable for small and large ``x``.

    Example:
        >>> x = torch.tensor([1e-3, 1.0, 30.0])
        >>> torch.allclose(torch.nn.functional.softplus(inverse_softplus(x)), x)
        True
    """
    return x + torch.log(-torch.expm1(-x))


class _SiteSpec:
    """What the guide needs to know about one latent site."""

    def __init__(self, name: str, fn: dist.Distribution) -> None:
        self.name = name
        self.event_dim = fn.event_dim
        self.shape = fn.batch_shape + fn.event_shape
        support = fn.support
        while isinstance(support, dist.constraints.independent):
            support = support.base_constraint  # elementwise: the guide adds its own event dims
        self.support = support
        # biject_to(positive) is exp followed by a shift of 0; use exp itself so positive sites
        # get a LogNormal, whose KL to a LogNormal prior is closed-form.
        lower = getattr(support, "lower_bound", None)
        positive = isinstance(support, dist.constraints.greater_than) and lower == 0
        self.transform = ExpTransform() if positive else biject_to(support)
        self.exp = positive


class MeanFieldNormalGuide(nn.Module):
    """A fully factorised Gaussian guide: ``q(w) = prod_i Normal(w_i; loc_i, scale_i)``.

    One ``pyro.sample`` site per latent tensor of the model, with the same name and shape. Real
    sites get ``Normal(loc, scale).to_event(k)``; positive sites ``LogNormal(loc, scale)`` (a
    Normal on the log); other supports a Normal pushed through ``biject_to(support)``.
    ``scale = softplus(rho)``.

    The sites are discovered lazily from the first call (a trace of the model), like Pyro's
    autoguides; the means start at ``init_loc[name]`` when given (:class:`VariationalBNN` passes
    the net's own initial weights) and otherwise at the prior's median-ish value
    (``init_to_median``).

    Args:
        model: the Pyro model (a callable).
        init_loc: initial means per site name, in constrained space, shapes as the sites.
        init_scale: initial standard deviation of every site (in unconstrained space).
        name: prefix of the param statements (``"guide.loc.<site>"``).

    Example:
        >>> import pyro, pyro.distributions as dist
        >>> def model():
        ...     pyro.sample("w", dist.Normal(torch.zeros(3), 1.).to_event(1))
        >>> guide = MeanFieldNormalGuide(model, init_scale=0.1)
        >>> guide()["w"].shape
        torch.Size([3])
        >>> guide.scales()["w"]
        tensor([0.1000, 0.1000, 0.1000])
    """

    def __init__(
        self,
        model: Callable[..., Any],
        init_loc: Mapping[str, torch.Tensor] | None = None,
        init_scale: float = 0.01,
        name: str = "guide",
    ) -> None:
        super().__init__()
        if not callable(model):
            raise TypeError(f"model must be callable, got {type(model).__name__}")
        if not (isinstance(init_scale, (int, float)) and init_scale > 0):
            raise ValueError(f"init_scale must be a positive float, got {init_scale!r}")
        self._model = (model,)  # a tuple: never registered as a submodule
        self.init_loc = dict(init_loc or {})
        self.init_scale = float(init_scale)
        self.name = name
        self.locs = nn.ParameterDict()
        self.rhos = nn.ParameterDict()
        #: The latent sites, in the model's order (known after the first call or :meth:`setup`).
        self.site_specs: list[_SiteSpec] = []
        #: Announce loc/rho as Pyro param sites on every call, so a plain ``SVI`` with a
        #: ``pyro.optim`` optimizer finds and trains them. ``VariationalBNN.fit`` optimizes the
        #: module's parameters directly and switches this off while it trains.
        self.emit_params = True

    @property
    def is_setup(self) -> bool:
        """Whether the sites are known (after the first call or :meth:`setup`)."""
        return bool(self.site_specs)

    @staticmethod
    def param_key(name: str) -> str:
        """The key of site ``name``'s parameters in ``locs`` and ``rhos`` (dots are not allowed
        in a ``ParameterDict`` key).

        Example:
            >>> MeanFieldNormalGuide.param_key("net.0.weight")
            'net__0__weight'
        """
        return name.replace(".", "__")

    def setup(self, *args: Any, **kwargs: Any) -> None:
        """Trace the model with these arguments and create one loc/scale pair per latent site."""
        model = self._model[0]
        with poutine.block(), torch.no_grad():
            trace = poutine.trace(model).get_trace(*args, **kwargs)
        device = None
        self.site_specs = []
        for name, site in trace.iter_stochastic_nodes():
            if site["is_observed"] or site_is_subsample(site) or site["infer"].get("is_auxiliary"):
                continue
            if site["cond_indep_stack"]:
                raise NotImplementedError(
                    f"latent site {name!r} sits inside a plate; MeanFieldNormalGuide handles "
                    "global latents only — use an autoguide (e.g. AutoNormal) for local latents"
                )
            spec = _SiteSpec(name, site["fn"])
            value = self.init_loc.get(name)
            if value is None:
                value = autoguide.initialization.init_to_median(site)
            value = torch.as_tensor(value, dtype=site["value"].dtype, device=site["value"].device)
            if value.shape != spec.shape:
                raise ValueError(
                    f"init_loc[{name!r}] has shape {tuple(value.shape)}, the site has "
                    f"{tuple(spec.shape)}"
                )
            loc = spec.transform.inv(value).detach().clone()
            rho = inverse_softplus(torch.full_like(loc, self.init_scale))
            self.locs[self.param_key(name)] = nn.Parameter(loc)
            self.rhos[self.param_key(name)] = nn.Parameter(rho)
            self.site_specs.append(spec)
            device = loc.device
        if device is None:
            raise ValueError("the model has no latent sites: there is nothing to infer")

    def site_distribution(
        self, spec: _SiteSpec, loc: torch.Tensor, scale: torch.Tensor
    ) -> dist.TorchDistribution:
        """The guide's distribution of site ``spec`` (one of :attr:`site_specs`) at ``loc`` and
        ``scale`` (unconstrained space, the site's shape): a ``Normal``, a ``LogNormal`` for a
        positive site, or a ``Normal`` pushed through the site's support transform."""
        if spec.exp:
            d = dist.LogNormal(loc, scale, validate_args=False)
        elif spec.support is dist.constraints.real:
            d = ReparamNormal(loc, scale, validate_args=False)
        else:
            d = dist.TransformedDistribution(
                dist.Normal(loc, scale, validate_args=False), [spec.transform]
            )
        return d.to_event(spec.event_dim) if spec.event_dim else d

    def forward(self, *args: Any, kl_weight: float = 1.0, **kwargs: Any) -> dict[str, torch.Tensor]:
        """Sample every latent site once; returns ``{site name: value}``.

        ``args``/``kwargs`` are the model's (used only on the first call, to find the sites);
        ``kl_weight`` scales the guide's log-density the way the model scales its prior.
        """
        if not self.is_setup:
            self.setup(*args, **kwargs)
        values = {}
        with KLWeight(kl_weight) if kl_weight != 1.0 else nullcontext():
            for spec in self.site_specs:
                key = self.param_key(spec.name)
                loc, rho = self.locs[key], self.rhos[key]
                if self.emit_params:
                    loc = param_statement(f"{self.name}.loc.{spec.name}", loc)
                    rho = param_statement(f"{self.name}.rho.{spec.name}", rho)
                d = self.site_distribution(spec, loc, F.softplus(rho))
                values[spec.name] = pyro.sample(spec.name, d)
        return values

    def _check_setup(self) -> None:
        if not self.is_setup:
            from bnn_pyro.exceptions import NotFittedError

            raise NotFittedError("the guide has no sites yet: call it (or fit) first")

    def distributions(self) -> dict[str, dist.Distribution]:
        """The variational distribution of every site, ``{name: Distribution}``."""
        self._check_setup()
        return {
            s.name: self.site_distribution(
                s, self.locs[self.param_key(s.name)], F.softplus(self.rhos[self.param_key(s.name)])
            )
            for s in self.site_specs
        }

    @torch.no_grad()
    def sample_posterior(
        self, num_samples: int, generator: torch.Generator | None = None
    ) -> dict[str, torch.Tensor]:
        """Draw ``num_samples`` joint samples of every site in one vectorized pass.

        Returns:
            ``{name: (S, *site_shape)}`` in constrained space.
        """
        self._check_setup()
        out = {}
        for spec in self.site_specs:
            key = self.param_key(spec.name)
            loc, scale = self.locs[key], F.softplus(self.rhos[key])
            eps = torch.randn(
                (num_samples, *loc.shape), generator=generator, device=loc.device, dtype=loc.dtype
            )
            out[spec.name] = spec.transform(loc + scale * eps)
        return out

    @torch.no_grad()
    def means(self) -> dict[str, torch.Tensor]:
        """The variational means ``loc`` of every site (unconstrained space)."""
        self._check_setup()
        return {s.name: self.locs[self.param_key(s.name)].detach().clone() for s in self.site_specs}

    @torch.no_grad()
    def scales(self) -> dict[str, torch.Tensor]:
        """The variational standard deviations of every site (unconstrained space)."""
        self._check_setup()
        return {
            s.name: F.softplus(self.rhos[self.param_key(s.name)]).detach() for s in self.site_specs
        }

    def site_names(self) -> list[str]:
        """Names of the latent sites, in model order."""
        return [s.name for s in self.site_specs]
