"""The VI objective of mean-field :class:`~bnn_pyro.VariationalBNN` models in plain torch, written
once: :class:`VIObjective`.

One model (what its ``fit`` hands its ELBO: :class:`~bnn_pyro.methods.vi.fast_loss.DirectLoss`)
or K models of one architecture stacked (what :func:`bnn_pyro.fit_stacked` trains:
:class:`~bnn_pyro.methods.vi.stacked.StackedVI`), each member drawing P particles where the
objective averages over several. Its modes are the estimators of Pyro's ELBOs:

- ``"trace"``: ``Trace_ELBO``'s single-particle loss,
  ``-(N/B sum_n log p(y_n | f(x_n; w)) + beta (log p(w) - log q(w)))``;
- ``"stl"``: the same with ``log q`` scored at detached guide parameters
  (``StickingTheLanding_ELBO``);
- ``"meanfield"``: ``TraceMeanField_ELBO``'s, ``beta KL(q || p)`` in closed form site by site
  where Pyro's ``kl_divergence`` has one (one dot product per site for the default
  ``N(m, s^2)`` prior) and ``log q - log p`` of the draw where it has none;
- ``"alpha"``: :class:`~bnn_pyro.elbos.alpha.AlphaELBO`'s black-box alpha energy over P
  particles, ``-(N/B sum_n (1/alpha) log mean_p p(y_n | w_p)^alpha + beta mean_p (log p(w_p) -
  log q(w_p)))``.

The weights ``w = loc + softplus(rho) * eps`` are drawn site by site in the guide's order, one
model's ``eps`` with the ``torch.randn`` calls its guide makes, member k's from its own
generator with the shapes and in the order its own fit draws them; so the loss of member k is
its own model's under the same draws (tested against Pyro's ELBOs and against each member's own
fit). The net runs as a plain-torch twin (:class:`~bnn_pyro.nn.batched.BatchedTwin`) on the
drawn weights, one member's or K members' stacked; with local reparameterization or flipout its
layers sample their pre-activations (:mod:`bnn_pyro.methods.vi.stacked_lrt`).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from pyro.distributions import constraints
from pyro.distributions.kl import kl_divergence

from bnn_pyro._checks import check_choice
from bnn_pyro.elbos.alpha import DEFAULT_ALPHA, check_alpha, log_mean_exp
from bnn_pyro.methods.vi.log_joint import LogJoint, sum_site, sum_sq
from bnn_pyro.methods.vi.stacked_lrt import reparameterized_forward
from bnn_pyro.training.member_dropout import member_dropout
from bnn_pyro.weight_distributions import LOG_SQRT_2PI

__all__ = ["MODES", "VIObjective"]

#: The objectives :class:`VIObjective` computes (see the module docstring).
MODES = ("trace", "stl", "meanfield", "alpha")


class VIObjective:
    """The negative ELBO (or alpha energy) of one mean-field ``VariationalBNN`` or of K stacked.

    Call it with the guide's parameters, one ``loc`` and one ``rho`` per site of
    ``bnns[0].guide.site_specs`` (one model: each the site's shape; K stacked: ``(K, *shape)``),
    and a minibatch: one model ``x (B, *features)``, ``y`` as the likelihood's
    ``check_targets`` returns it; K stacked ``x (K, B, *features)``, ``y (K, B, ...)``. It
    returns ``(loss, nll)``: one model's scalars, or ``(K,)`` each, ``nll`` the detached data
    term (minus the scaled log-likelihood, averaged over particles).

    Args:
        bnns: the models, guides set up: one, or K of one architecture (what
            :func:`~bnn_pyro.methods.vi.stacked_support.why_not_stacked_vi` accepts).
        generators: ``None`` for one model (its draws come from torch's global generator, as its
            guide's do), else one generator per member.
        mode: one of :data:`MODES`.
        alpha: the alpha energy's ``alpha`` (``mode="alpha"``).
        particles: the alpha energy's draws per model and step (``P >= 2``; 0 otherwise).

    Example:
        >>> import bnn_pyro as bp
        >>> bnns = [bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.5)) for _ in range(2)]
        >>> X, y = torch.randn(2, 8, 2), torch.randn(2, 8, 1)  # one minibatch per member
        >>> for bnn, x, t in zip(bnns, X, y):
        ...     bnn.setup_guide(x, t)
        >>> guides, specs = [b.guide for b in bnns], bnns[0].guide.site_specs
        >>> locs = [torch.stack([g.locs[g.param_key(s.name)] for g in guides]) for s in specs]
        >>> rhos = [torch.stack([g.rhos[g.param_key(s.name)] for g in guides]) for s in specs]
        >>> gens = [torch.Generator().manual_seed(k) for k in range(2)]
        >>> loss, nll = VIObjective(bnns, gens, mode="meanfield")(locs, rhos, X, y, 64)
        >>> loss.shape, nll.shape
        (torch.Size([2]), torch.Size([2]))
    """

    def __init__(
        self,
        bnns: Sequence[Any],
        generators: Sequence[torch.Generator] | None = None,
        *,
        mode: str = "trace",
        alpha: float = DEFAULT_ALPHA,
        particles: int = 0,
    ) -> None:
        check_choice("mode", mode, MODES)
        self.bnns = list(bnns)
        self.generators = None if generators is None else list(generators)
        if self.generators is None and len(self.bnns) != 1:
            raise ValueError("K stacked models need one generator each (generators=)")
        if mode == "alpha":
            alpha, particles = check_alpha(alpha, particles)
        elif particles:
            raise ValueError(f"mode={mode!r} draws one particle, got particles={particles!r}")
        self.mode, self.alpha, self.particles = mode, float(alpha), int(particles)
        first = self.bnns[0]
        self.guide = first.guide
        self.specs = list(first.guide.site_specs)
        self._specs = {s.name: s for s in self.specs}
        self.joint = LogJoint(self.bnns, self.generators is not None, self.particles)
        self._paths = self.joint.paths
        self._twin = first.evaluator.twin
        self._others = [s.name for s in self.specs if s.name not in self._paths]
        # the real sites, drawn as one flat vector (_draw); the others (positive, constrained)
        real = [not s.exp and s.support is constraints.real for s in self.specs]
        self._real = [i for i, r in enumerate(real) if r]
        self._transformed = [i for i, r in enumerate(real) if not r]
        self._layout = tuple((self.specs[i].name, self.specs[i].shape.numel()) for i in self._real)
        self._sizes = [size for _, size in self._layout]
        self._shapes = {self.specs[i].name: self.specs[i].shape for i in self._real}
        self._one_flat = not self._transformed and not self.stacked and not self.particles
        self._dropout = any(type(m) is nn.Dropout for m in self._twin.module.modules())

    @property
    def stacked(self) -> bool:
        """Whether the draws carry a leading member dimension (K models, generators given)."""
        return self.generators is not None

    def _lead(self) -> int:
        """How many leading dimensions a draw has before the site's own: 0, K, or K and P."""
        return self.joint.lead

    def _eps(self, loc: torch.Tensor) -> torch.Tensor:
        """Standard normal noise for a site whose ``loc`` is given (one model: the site's shape,
        from the global generator; stacked: ``(K, *shape)``, or ``(K, P, *shape)``, member k's
        from ``generators[k]``)."""
        if self.generators is None and not self.particles:
            return torch.randn_like(loc)  # (a shape of its own costs more to parse)
        extra = (self.particles,) if self.particles else ()
        if self.generators is None:
            return torch.randn(extra + loc.shape, dtype=loc.dtype, device=loc.device)
        shape = extra + loc.shape[1:]
        return torch.stack(
            [
                torch.randn(shape, generator=g, dtype=loc.dtype, device=loc.device)
                for g in self.generators
            ]
        )

    def _flat_eps(self, loc: torch.Tensor) -> torch.Tensor:
        """One model's eps of every site, drawn into one flat vector like ``loc`` ``(D,)``, site
        by site in the guide's order: the numbers of the guide's ``torch.randn`` calls."""
        eps = torch.empty_like(loc)
        for chunk in eps.split(self._sizes):
            chunk.normal_()
        return eps

    def noise(self, locs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The standard normal noise of one call's weight draws, site by site (what the call
        draws itself when not handed it): a compiled objective takes it as an input, drawn
        eagerly from the members' generators, which ``torch.compile`` cannot trace."""
        return [self._eps(loc) for loc in locs]

    def _draw(
        self,
        locs: Sequence[torch.Tensor],
        rhos: Sequence[torch.Tensor],
        noise: Sequence[torch.Tensor] | None = None,
    ) -> Draw:
        """The guide's draws (:class:`Draw`): the real sites' as one flat vector (their draws,
        ``log q`` and later their Gaussian prior in a few ops over it, not a dozen a site; on a
        small net those ops are most of a step), the others site by site."""
        if not len(locs) == len(rhos) == len(self.specs):
            raise ValueError(
                f"one loc and one rho per guide site ({len(self.specs)}), in the guide's order: "
                f"got {len(locs)} locs and {len(rhos)} rhos"
            )
        lead, stl, dim = self._lead(), self.mode == "stl", int(self.stacked)
        # one model whose sites are all real draws its eps into the flat vector (_flat_eps);
        # not in a compiled graph, where each draw into it would be a copy of the whole
        into = noise is None and self._one_flat and not torch.compiler.is_compiling()
        eps = None if into else noise or self.noise(locs)
        # (every model has weights, and a weight's support is the real line: never empty)
        loc = _flat([locs[i] for i in self._real], dim)
        scale = F.softplus(_flat([rhos[i] for i in self._real], dim))
        e = self._flat_eps(loc) if eps is None else _flat([eps[i] for i in self._real], lead)
        if self.particles:  # (the particles' dimension after the members')
            loc, scale = loc.unsqueeze(dim), scale.unsqueeze(dim)
        z = loc + e * scale
        draw = Draw((loc, scale, z), self._shapes)
        if self.mode != "meanfield":
            if stl:  # scored with detached parameters (StickingTheLanding_ELBO)
                s = scale.detach()
                e = (z - loc.detach()) / s
            else:  # (w - loc) / scale is eps: only log(scale) carries a gradient
                s = scale
            draw.log_q = -0.5 * sum_sq(e, lead) - sum_site(s.log(), lead)
            draw.log_q = draw.log_q - e.shape[-1] * LOG_SQRT_2PI
        for i in self._transformed:  # a LogNormal or transformed site: its own density
            spec, loc = self.specs[i], locs[i]
            scale = F.softplus(rhos[i])
            if self.particles:
                loc, scale = (t.unsqueeze(dim) for t in (loc, scale))
            z = loc + eps[i] * scale
            draw.transformed[spec.name] = (loc, scale)
            draw.values[spec.name] = z.exp() if spec.exp else spec.transform(z)
            if self.mode == "meanfield":
                continue
            q = self._q(spec, *((loc.detach(), scale.detach()) if stl else (loc, scale)))
            draw.log_q = draw.log_q + sum_site(q.log_prob(draw.values[spec.name]), lead)
        if self._transformed:  # (in the guide's order)
            draw.values = {spec.name: draw.values[spec.name] for spec in self.specs}
        return draw

    def _q(self, spec: Any, loc: torch.Tensor, scale: torch.Tensor) -> Any:
        return self.guide.site_distribution(spec, loc, scale)

    def _kl(self, draw: Draw, like: torch.Tensor) -> Any:
        """The net sites' ``KL(q || p)``: closed form where Pyro has one (the Gaussian priors of
        the flat sites in one pass over them), else ``log q - log p`` of the draw (as
        ``TraceMeanField_ELBO`` scores a site); a scalar or ``(K,)``."""
        lead, flat = self._lead(), self.joint.flat_priors(like, self._layout)
        kl, done = flat.kl(draw.flat[0], draw.flat[1], lead), flat.sites
        constants = self.joint.priors(like)
        for site in self.joint.sites:  # (every Gaussian prior's site is real: a flat one)
            if site.name in done:
                continue
            spec, (_, c) = self._specs[site.name], constants[site.name]
            loc, scale = draw.params[site.name]
            kl = kl + self.joint.each(
                lambda p, v, m, s, spec=spec: _site_kl(self._q(spec, m, s), p, v),
                c,
                *(draw.values[site.name], loc, scale),
            )
        return kl

    def _latent_kl(self, draw: Draw) -> Any:
        """The mean-field mode's score of a likelihood latent, ``-KL(q || p)``, as
        :meth:`LogJoint.latent_terms <bnn_pyro.methods.vi.log_joint.LogJoint.latent_terms>`
        calls it (member ``k``, ``None`` for one model); ``None`` in the other modes (its
        ``log p``)."""
        if self.mode != "meanfield":
            return None
        specs = self._specs

        def score(k: int | None, name: str, prior: Any, value: torch.Tensor) -> torch.Tensor:
            loc, scale = (t if k is None else t[k] for t in draw.params[name])
            return -_site_kl(self._q(specs[name], loc, scale), prior, value)

        return score

    def _forward(self, x: torch.Tensor, draw: Draw, shared: dict) -> torch.Tensor:
        """The net's output on the draws: ``(B, O)`` for one model, ``(K, B, O)`` stacked,
        ``(K * P, B, O)`` with particles (member k's P draws consecutive)."""
        flat = self.particles and self.stacked  # member k's P draws consecutive
        stacked = {
            self._paths[n]: v.flatten(0, 1) if flat else v
            for n, v in draw.values.items()
            if n in self._paths
        }
        first = self.bnns[0]
        # in the model's mode: the twin is shared with prediction, which leaves it in eval
        net = self._twin.load(shared, stacked, first.net.training)
        if flat:
            k, p = len(self.bnns), self.particles
            x = x.unsqueeze(1).expand(k, p, *x.shape[1:]).flatten(0, 1)
        estimator = first.local_reparameterization if first.training else None
        dropout = self.stacked and self._dropout
        # dropout masks: member k's from its own generator, as its own fit draws them
        with member_dropout(net, self.generators) if dropout else nullcontext():
            if estimator is None:
                return net(x)
            params = draw.params
            guide = {n: params[n] for n in self._paths if n in params}
            return reparameterized_forward(net, x, draw.values, guide, estimator, self.generators)

    def __call__(
        self,
        locs: Sequence[torch.Tensor],
        rhos: Sequence[torch.Tensor],
        x: torch.Tensor,
        y: torch.Tensor,
        dataset_size: int | None = None,
        kl_weight: float = 1.0,
        shared: dict[str, torch.Tensor] | None = None,
        noise: Sequence[torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        draw = self._draw(locs, rhos, noise)
        like, joint, values = locs[0], self.joint, draw.values
        f = self._forward(x, draw, shared or {})
        latent, latents = (0.0, {})
        if self._others:
            latent, latents = joint.latent_terms(values, f, self._latent_kl(draw))
        if self.mode == "meanfield":
            penalty = latent - self._kl(draw, like)  # -KL of every site
        else:
            flat = (draw.flat[2], self._layout)
            penalty = joint.log_prior(values, like, flat) + latent - draw.log_q
        n_over_b = 1.0 if dataset_size is None else dataset_size / f.shape[-2]
        if self.particles and self.stacked:
            k, p = len(self.bnns), self.particles
            y = y.unsqueeze(1).expand(k, p, *y.shape[1:]).flatten(0, 1)
        rows = joint.row_log_likelihood(f, y, values, latents)
        if self.particles:  # each row's P draws first: (P, B), or (P, K, B)
            per_row = rows.view(k, p, -1).transpose(0, 1) if self.stacked else rows
            data = (log_mean_exp(self.alpha * per_row) / self.alpha).sum(-1) * n_over_b
            return -(data + kl_weight * penalty.mean(-1)), -data.detach()
        data = rows.sum(-1) * n_over_b
        return -(data + kl_weight * penalty), -data.detach()


class Draw:
    """One call's draws of the guide: ``values`` ``{site: value}``, ``log_q`` of them (``0.0``
    in the mean-field mode, which scores ``KL(q || p)`` instead), :attr:`params` and ``flat``:
    the real sites' ``(loc, scale, value)`` laid end to end, ``(*lead, D)`` each (their sites'
    views are in ``values`` and ``params``); ``shapes``: those sites' shapes."""

    def __init__(
        self, flat: tuple[torch.Tensor, torch.Tensor, torch.Tensor], shapes: dict[str, torch.Size]
    ) -> None:
        self.flat, self.shapes = flat, shapes
        self.values: dict[str, torch.Tensor] = _unflat(flat[2], shapes)
        self.log_q: Any = 0.0
        #: ``{site: (loc, scale)}`` of the sites drawn one by one (positive, constrained).
        self.transformed: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self._views: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None

    @property
    def params(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """``{site: (loc, scale)}`` of every site, broadcastable against its value (what the
        KL terms and the estimators need; the flat sites' views made on first use: most steps
        need none)."""
        if self._views is None:
            locs, scales = (_unflat(t, self.shapes) for t in self.flat[:2])
            self._views = {n: (locs[n], scales[n]) for n in self.shapes} | self.transformed
        return self._views


def _flat(tensors: Sequence[torch.Tensor], lead: int) -> torch.Tensor:
    """The tensors laid end to end after their first ``lead`` dimensions: ``(*lead, D)``."""
    return torch.cat([t.reshape(t.shape[:lead] + (-1,)) for t in tensors], -1)


def _unflat(flat: torch.Tensor, shapes: dict[str, torch.Size]) -> dict[str, torch.Tensor]:
    """``{site: view}`` of a flat ``(*lead, D)`` tensor, each ``(*lead, *shape)``."""
    parts = flat.split([shape.numel() for shape in shapes.values()], -1)
    pairs = zip(shapes.items(), parts, strict=True)
    return {n: t.view(t.shape[:-1] + shape) for (n, shape), t in pairs}


def _site_kl(q: Any, p: Any, value: torch.Tensor) -> torch.Tensor:
    """``KL(q || p)`` summed, where Pyro's ``kl_divergence`` knows the pair (as
    ``TraceMeanField_ELBO`` scores a site); ``log q(value) - log p(value)`` where it does not."""
    try:
        return kl_divergence(q, p).sum()
    except NotImplementedError:
        return q.log_prob(value).sum() - p.log_prob(value).sum()
