"""K mean-field ``VariationalBNN`` models' guides stacked as one: :class:`StackedVI`.

:func:`bnn_pyro.fit_stacked` (:mod:`bnn_pyro.methods.vi.stacked_fit`) trains K models of one
architecture as one (see :mod:`bnn_pyro.training.stacked` for the idea) with the
single-particle ``Trace_ELBO`` loss of :mod:`bnn_pyro.methods.vi.fast_loss`, each member on its
own data
(a shared ``(N, D)`` set or one ``(N, D)`` set per member, e.g. the splits of a benchmark), with
its own seed, prior scales and noise. Every member draws its noise from a generator of its own
in the order its own ``fit`` would draw from the global one (the guide's set-up draw included),
and its minibatch order from its own seeded generator: the result is each member's
``bnn.fit(..., seed=seed_k)`` up to float rounding (tested).

Covered: the library's mean-field guide, a prior whose layers are Normal with one loc and scale
each (``IIDPrior(Normal)``, ``LayerwiseNormalPrior``, the default), a ``Gaussian`` (fixed or
learned noise), ``HeteroscedasticGaussian``, ``Categorical`` or ``Bernoulli`` likelihood, one
particle (or the black-box alpha energy's P: :mod:`bnn_pyro.methods.vi.stacked_alpha`); the
weight-space estimator or local reparameterization / flipout of linear layers.
:func:`why_not_stacked_vi` names what is not.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from pyro.distributions import Independent

from bnn_pyro.methods.vi.stacked_likelihoods import row_log_likelihood
from bnn_pyro.methods.vi.stacked_lrt import reparameterized_forward
from bnn_pyro.methods.vi.stacked_support import why_not_stacked_vi
from bnn_pyro.nn.pyro_net import site_prior
from bnn_pyro.training.member_dropout import member_dropout
from bnn_pyro.weight_distributions import LOG_SQRT_2PI, SharedNormal

__all__ = ["StackedVI", "why_not_stacked_vi"]


class StackedVI(nn.Module):
    """The guides of K set-up ``VariationalBNN`` models stacked; ``member_losses(x, y)`` is
    each member's negative ELBO estimate on its minibatch: ``x (K, B, D)``, ``y (K, B, ...)``
    → ``(K,)``.

    Args:
        bnns: the models, guides set up (see :func:`fit_stacked`, which does that).
        generators: one per member: the source of its noise.
        dataset_size: ``N``, the rows each member's minibatches stand for.
        kl_weight: beta.
    """

    def __init__(
        self,
        bnns: Sequence[Any],
        generators: Sequence[torch.Generator],
        dataset_size: int,
        kl_weight: float = 1.0,
    ) -> None:
        super().__init__()
        self.bnns, self.generators = list(bnns), list(generators)
        self.dataset_size, self.kl_weight = dataset_size, float(kl_weight)
        first = self.bnns[0]
        self.specs = list(first.guide.site_specs)
        keys = [first.guide.param_key(s.name) for s in self.specs]
        self.locs = nn.ParameterList(
            [nn.Parameter(torch.stack([b.guide.locs[k].detach() for b in self.bnns])) for k in keys]
        )
        self.rhos = nn.ParameterList(
            [nn.Parameter(torch.stack([b.guide.rhos[k].detach() for b in self.bnns])) for k in keys]
        )
        self._twin, self._paths = first.evaluator.twin, first.evaluator.paths
        self._dropout = any(type(m) is nn.Dropout for m in self._twin.module.modules())
        self._priors = self._prior_constants()
        self._fixed_latents: dict[tuple, dict[str, torch.Tensor]] = {}  # row_log_likelihood's

    def _prior_constants(self) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Per net site: each member's prior ``(loc, scale, log normaliser)`` as ``(K,)``."""
        out = {}
        modules = [dict(b.net.named_modules(prefix="net")) for b in self.bnns]
        for site in self.bnns[0].evaluator.sites:
            path = f"net.{site.module_name}".rstrip(".")
            rows = []
            for b, mods in zip(self.bnns, modules, strict=True):
                d = site_prior(
                    mods[path],
                    prior=b.prior,
                    param_name=site.param_name,
                    shape=site.shape,
                    name=site.name,
                )
                base = d.base_dist if isinstance(d, Independent) else d
                if type(base) is not SharedNormal:
                    raise ValueError(
                        f"fit_stacked needs Normal priors with one loc and scale per layer, "
                        f"got {type(base).__name__} for {site.name!r}"
                    )
                rows.append((base.loc0, base.scale0, base.log_norm))
            ref = self.locs[0]
            loc, scale, norm = (
                torch.tensor(c, dtype=ref.dtype, device=ref.device) for c in zip(*rows, strict=True)
            )
            out[site.name] = (loc, scale, norm)
        return out

    def _draw(self, particles: int = 0) -> tuple[dict[str, torch.Tensor], torch.Tensor, dict]:
        """Each member's draws (its own generator, its own site order): ``(K, *shape)``, or
        ``(K, P, *shape)`` with ``particles`` P; ``log q`` ``(K,)`` / ``(K, P)``; and
        ``{id(draw): (loc, scale)}`` of the real-valued sites (what the LRT layers need)."""
        values, log_q, scales = {}, 0.0, {}
        lead = (particles,) if particles else ()
        for spec, loc, rho in zip(self.specs, self.locs, self.rhos, strict=True):
            shape = loc.shape[1:]
            eps = torch.stack(
                [
                    torch.randn(lead + shape, generator=g, dtype=loc.dtype, device=loc.device)
                    for g in self.generators
                ]
            )
            scale = F.softplus(rho)
            if particles:
                loc, scale = loc.unsqueeze(1), scale.unsqueeze(1)
            z = loc + eps * scale
            if not spec.exp:
                scales[id(z)] = (loc, scale)
            dims = tuple(range(1 + len(lead), z.dim()))
            lq = -0.5 * (eps * eps).sum(dims) - scale.log().sum(dims) - shape.numel() * LOG_SQRT_2PI
            if spec.exp:  # a LogNormal site (a learned noise scale): the value is exp(z)
                lq = lq - z.sum(dims)
                z = z.exp()
            values[spec.name] = z
            log_q = log_q + lq
        return values, log_q, scales

    def _log_prior(self, values: dict[str, torch.Tensor], particles: int = 0) -> Any:
        """The net sites' prior log-density per member, ``(K,)`` (``(K, P)`` with particles)."""
        log_p = 0.0
        lead = 2 if particles else 1
        for name, (m, s, norm) in self._priors.items():
            w = values[name]
            dims = tuple(range(lead, w.dim()))
            view = (-1,) + (1,) * (w.dim() - 1)
            sq = ((w - m.view(view)) / s.view(view)).pow(2).sum(dims)
            size = w.shape[lead:].numel()
            log_p = log_p - 0.5 * sq - size * norm.view((-1,) + (1,) * (lead - 1))
        return log_p

    def _learned_noise(self, values: dict[str, torch.Tensor]) -> torch.Tensor | None:
        """The learned noise scale's draws (the one latent site outside the net), else None."""
        noise = [n for n in values if n not in self._paths]
        return values[noise[0]] if noise else None

    def _noise_log_prior(self, noise: torch.Tensor | None, f: torch.Tensor) -> Any:
        """The prior log-density of the learned noise's draws ``noise`` (:meth:`_learned_noise`),
        each member's own: ``(K,)``, or ``(K, P)`` when the draws carry a particle dimension; 0
        without a learned noise."""
        if noise is None:
            return 0.0
        lead = noise.shape[1:-1].numel()  # P, or 1 without particles
        return torch.stack(
            [
                b.likelihood.noise_prior(f).log_prob(noise[k]).reshape(lead, -1).sum(-1)
                for k, b in enumerate(self.bnns)
            ]
        ).view(noise.shape[:-1])

    def member_losses(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``(K,)``: ``-(N/B log p(y | x, w_k) + beta (log p(w_k) - log q(w_k)))`` per member."""
        values, log_q, scales = self._draw()
        log_p = self._log_prior(values)
        stacked = {self._paths[n]: v for n, v in values.items() if n in self._paths}
        net = self._twin.load({}, stacked)
        estimator = self.bnns[0].local_reparameterization
        # dropout masks: member k's from its own generator, as its own fit draws them
        with member_dropout(net, self.generators) if self._dropout else nullcontext():
            if estimator and self.bnns[0].training:
                f = reparameterized_forward(net, x, scales, estimator, self.generators)
            else:
                f = net(x)  # (K, B, O)
        noise = self._learned_noise(values)
        log_p = log_p + self._noise_log_prior(noise, f)
        lik = self.bnns[0].likelihood
        log_lik = row_log_likelihood(self.bnns, lik, f, y, noise, self._fixed_latents).sum(1)
        scale = self.dataset_size / x.shape[1]
        return -(scale * log_lik + self.kl_weight * (log_p - log_q))

    @torch.no_grad()
    def write_back(self) -> None:
        """Copy member k's slice of the stacked guide into ``bnns[k]``'s guide."""
        for spec, loc, rho in zip(self.specs, self.locs, self.rhos, strict=True):
            for k, b in enumerate(self.bnns):
                key = b.guide.param_key(spec.name)
                b.guide.locs[key].copy_(loc[k])
                b.guide.rhos[key].copy_(rho[k])

    @torch.no_grad()
    def read_from(self) -> None:
        """Copy ``bnns[k]``'s guide into member k's slice (the inverse of :meth:`write_back`:
        a guide changed from outside, e.g. restored to its best epoch by a callback)."""
        for spec, loc, rho in zip(self.specs, self.locs, self.rhos, strict=True):
            for k, b in enumerate(self.bnns):
                key = b.guide.param_key(spec.name)
                loc[k].copy_(b.guide.locs[key])
                rho[k].copy_(b.guide.rhos[key])
