"""Per-layer diagnostics of a mean-field fit: the KL and mean posterior std of every weight site
after each epoch, and a :class:`~bnn_pyro.exceptions.PosteriorCollapseWarning` at the end of
``fit`` when a layer learned nothing.

:class:`LayerDiagnostics` reads the guide's parameters only (no forward pass): for each site
``kl/<site>`` is the closed-form ``KL(q || p)`` of its factorised Gaussian against its prior
(``torch.distributions.kl_divergence``; left out where no closed form is registered) and
``std/<site>`` the mean of its posterior standard deviations (unconstrained space). It supports
:class:`~bnn_pyro.VariationalBNN` with the mean-field guide and
:class:`~bnn_pyro.HiddenLayerBNN`; :meth:`LayerDiagnostics.for_model` returns ``None`` otherwise.

Two failures are flagged by :meth:`LayerDiagnostics.check`:

* *unchanged scales*: the mean relative change ``mean |s / s0 - 1|`` of a site's posterior stds
  from the initial ``s0 = init_scale`` is below ``UNCHANGED_TOL = 0.05``, for a site of at least
  ``MIN_ELEMENTS = 10`` elements, or for every site when none moved. Adam moves each
  ``rho`` by about ``lr`` per step and, for the small initial scales used (``softplus(rho) ≈
  exp(rho)``), ``ds / s ≈ drho``: a run moves the scales by about ``lr * steps``, so a change
  under 5% means fewer than ``0.05 / lr`` effective steps (5 at ``lr=1e-2``), i.e. the
  optimisation of the scales has not started. A trained layer's stds move by factors (the KL
  alone pulls them toward the prior's). A site of a few elements is not judged alone: its
  posterior std can sit near ``init_scale`` where it belongs (an output bias at ``sigma /
  sqrt(N)``, a learned noise's log-scale at ``1 / sqrt(2 N)``: 0.013 and 0.032 for the README's
  500 rows), and the mean over so few elements is the random walk of a gradient that is
  mostly Monte Carlo noise there, which Adam's normalised steps barely move.
* *prior collapse*: the KL per weight is below ``PRIOR_TOL = 0.1`` nats and the mean posterior
  std is within ``STD_TOL = 25%`` of the prior's. For a Normal prior ``KL = ½ (r² - 1 - ln r² +
  m² / σ_p²)`` per weight with ``r = s / σ_p``; below 0.1 nats ``|m| < 0.45 σ_p`` and ``r`` lies
  in about [0.65, 1.5]: the layer's posterior is, to within the noise of SVI (a fit forced onto
  its prior by a huge ``kl_weight`` stays at 0.02–0.07 nats per weight), its prior. A layer that
  uses its weights has several nats per weight (2–4 for the small regressions of the tests).
  It is named *underfitting* only where the fit is one: its data's NLL (the last epoch's) no
  better than the NLL of a prediction that ignores the inputs (``Likelihood.null_nll``, given
  by ``fit`` when it holds the data). A middle layer of a deeper net can sit at its prior while
  the others carry a fit that is good (a 2-32-32-2 net on two moons: its middle layer at 0.075
  nats per weight, the fit's NLL half the class frequencies'); that is how mean-field VI prunes
  a layer it does not need, not a failure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pyro.poutine as poutine
import torch
import torch.nn.functional as F
from torch.distributions import Distribution, Normal, kl_divergence

from bnn_pyro.exceptions import PosteriorCollapseWarning, warn_user
from bnn_pyro.guides import MeanFieldNormalGuide

__all__ = ["MIN_ELEMENTS", "PRIOR_TOL", "STD_TOL", "UNCHANGED_TOL", "LayerDiagnostics"]

#: Mean relative change of a site's stds from ``init_scale`` below which they "did not move".
UNCHANGED_TOL = 0.05
#: The fewest elements of a site whose unchanged stds are flagged while other sites moved.
MIN_ELEMENTS = 10
#: KL per weight (nats) below which a site's posterior "is its prior" ...
PRIOR_TOL = 0.1
#: ... when its mean std is also within this relative distance of the prior's.
STD_TOL = 0.25


def _prior_sites(bnn: Any) -> dict[str, Distribution]:
    """The prior of every latent site of a :class:`~bnn_pyro.VariationalBNN`, from one trace of
    its model on a single zero row with the observation hidden (the weights it draws come from
    a forked random stream: a fit with ``seed=None`` or a resumed run draws as without it)."""
    x = torch.zeros((1, *(bnn.input_shape or ())), device=bnn.device, dtype=bnn.dtype)
    devices = [bnn.device] if bnn.device.type == "cuda" else []
    with torch.no_grad(), torch.random.fork_rng(devices):  # the run's random stream untouched
        trace = poutine.trace(poutine.block(bnn.model, hide=["obs"])).get_trace(x)
    return {
        name: site["fn"]
        for name, site in trace.nodes.items()
        if site["type"] == "sample" and not site["is_observed"]
    }


class LayerDiagnostics:
    """Per-site KL and mean posterior std of a mean-field posterior, read from its parameters.

    Args:
        sites: ``{site: (loc, rho)}``, the guide's parameters in unconstrained space; the
            posterior std is ``softplus(rho)``.
        priors: ``{site: prior}``, the distribution the site's KL is measured against (a site
            without one, or without a closed-form KL, gets no ``kl/`` entry).
        init_scale: the initial posterior std of every site.
        refresh: returns ``priors`` anew; called before every :meth:`row` and :meth:`problems`
            when the priors move during training (a learned prior scale).

    Example:
        >>> import math, bnn_pyro as bp
        >>> bnn = bp.VariationalBNN(bp.nn.mlp(2, [3], 1), bp.Gaussian(0.1))
        >>> X = torch.randn(8, 2); y = X.sum(-1)
        >>> history = bnn.fit(X, y, epochs=30, lr=0.05, progress=False, seed=0)
        >>> sorted(k for k in history if "/" in k)[:2]
        ['kl/net.0.bias', 'kl/net.0.weight']
        >>> diag = LayerDiagnostics.for_model(bnn)
        >>> row = diag.row()
        >>> math.isclose(sum(v for k, v in row.items() if k.startswith("kl/")),
        ...              float(bnn.kl_divergence().detach()), rel_tol=1e-5)
        True
    """

    def __init__(
        self,
        sites: Mapping[str, tuple[torch.Tensor, torch.Tensor]],
        priors: Mapping[str, Distribution],
        init_scale: float,
        refresh: Callable[[], Mapping[str, Distribution]] | None = None,
    ) -> None:
        self.sites, self.priors, self.init_scale = dict(sites), dict(priors), float(init_scale)
        self.refresh = refresh

    def _update(self) -> None:
        if self.refresh is not None:
            self.priors = dict(self.refresh())

    @classmethod
    def for_model(cls, bnn: Any) -> LayerDiagnostics | None:
        """The diagnostics of a :class:`~bnn_pyro.VariationalBNN` with a set-up mean-field
        guide or of a :class:`~bnn_pyro.HiddenLayerBNN`; ``None`` for any other model."""
        guide = getattr(bnn, "guide", None)
        if isinstance(getattr(bnn, "rhos", None), torch.nn.ParameterList):  # HiddenLayerBNN
            sites = dict(zip(bnn.site_names, zip(bnn.locs, bnn.rhos, strict=True), strict=True))
            priors = {
                name: Normal(torch.zeros_like(loc), torch.full_like(loc, bnn.prior_scale))
                for name, (loc, _) in sites.items()
            }
            return cls(sites, priors, bnn.init_scale)
        if not isinstance(guide, MeanFieldNormalGuide) or not guide.is_setup:
            return None
        if not hasattr(bnn, "input_shape"):
            return None
        key = guide.param_key
        sites = {n: (guide.locs[key(n)], guide.rhos[key(n)]) for n in guide.site_names()}
        prior_params = getattr(getattr(bnn, "prior", None), "parameters", list)()
        learned = any(p.requires_grad for p in prior_params)
        refresh = (lambda: _prior_sites(bnn)) if learned else None  # e.g. LearnedNormalPrior
        return cls(sites, _prior_sites(bnn), guide.init_scale, refresh)

    def _prior(self, name: str) -> Distribution | None:
        base = self.priors.get(name)
        while isinstance(base, torch.distributions.Independent):
            base = base.base_dist  # the guide is elementwise: compare with the elementwise prior
        return base

    def _kl_tensor(self, name: str) -> torch.Tensor | None:
        base = self._prior(name)
        if base is None:
            return None
        loc, rho = self.sites[name]
        q = Normal(loc.detach(), F.softplus(rho.detach()), validate_args=False)
        try:
            return kl_divergence(q, base).sum()
        except (NotImplementedError, RuntimeError):  # no closed form, or another shape
            self.priors.pop(name)  # not tried again
            return None

    @torch.no_grad()
    def _kl(self, name: str) -> float | None:
        kl = self._kl_tensor(name)
        return None if kl is None else float(kl)

    @torch.no_grad()
    def row(self) -> dict[str, float]:
        """``{"kl/<site>": KL, "std/<site>": mean posterior std}`` for every site now (one
        transfer from the device for all of them)."""
        self._update()
        keys, values = [], []
        for name, (_, rho) in self.sites.items():
            kl = self._kl_tensor(name)
            if kl is not None:
                keys.append(f"kl/{name}")
                values.append(kl.to(rho.dtype))
            keys.append(f"std/{name}")
            values.append(F.softplus(rho.detach()).mean())
        return dict(zip(keys, torch.stack(values).tolist(), strict=True))

    @torch.no_grad()
    def problems(self, fit_nll: float | None = None, null_nll: float | None = None) -> list[str]:
        """At most two sentences: the sites whose stds did not move from ``init_scale``, and those
        whose posterior is their prior, each with its figures and what usually helps.

        Args:
            fit_nll: the fit's negative log-likelihood of its data (the last epoch's).
            null_nll: that of a prediction ignoring the inputs
                (:meth:`~bnn_pyro.likelihoods.Likelihood.null_nll`). With both given, a site at
                its prior is reported only when ``fit_nll`` is no better than ``null_nll``.
        """
        self._update()
        changes = {
            name: float((F.softplus(rho) / self.init_scale - 1).abs().mean())
            for name, (_, rho) in self.sites.items()
        }
        none_moved = all(c < UNCHANGED_TOL for c in changes.values())
        fits = fit_nll is not None and null_nll is not None and fit_nll < null_nll
        unchanged, collapsed = [], []
        for name, (loc, rho) in self.sites.items():
            change = changes[name]
            if change < UNCHANGED_TOL:
                if none_moved or loc.numel() >= MIN_ELEMENTS:
                    unchanged.append(f"{name!r} ({change:.2%})")
                continue
            kl = self._kl(name)
            if fits or kl is None:
                continue
            if kl / loc.numel() < PRIOR_TOL and self._near_prior(name):
                std = float(F.softplus(rho).mean())
                collapsed.append(f"{name!r} ({kl / loc.numel():.2g} nats/weight, std {std:.3g})")
        found = []
        if unchanged:
            found.append(
                f"the posterior stds of {', '.join(unchanged)} stayed at their initial value "
                f"{self.init_scale:.3g} (mean relative change in brackets): train for more epochs "
                "or with a higher lr"
            )
        if collapsed:
            found.append(
                f"the posterior of {', '.join(collapsed)} collapsed onto its prior: the layer "
                "learned nothing from the data (underfitting); use a smaller kl_weight or KL "
                "annealing (linear_annealing), a smaller prior scale, or more epochs"
            )
        return found

    def _near_prior(self, name: str) -> bool:
        std = float(F.softplus(self.sites[name][1]).mean())
        try:
            prior_std = float(self._prior(name).stddev.mean())  # type: ignore[union-attr]
        except (NotImplementedError, AttributeError):
            return True
        return abs(std / prior_std - 1) < STD_TOL

    def check(self, fit_nll: float | None = None, null_nll: float | None = None) -> None:
        """Warn with :class:`~bnn_pyro.exceptions.PosteriorCollapseWarning` about every site of
        :meth:`problems` (its arguments)."""
        found = self.problems(fit_nll, null_nll)
        if found:
            warn_user("; ".join(found), PosteriorCollapseWarning)
