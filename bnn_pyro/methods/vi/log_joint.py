"""The log joint of a ``VariationalBNN``'s Pyro model in plain torch, for one model or K of one
architecture stacked: :class:`LogJoint`.

What the model scores at given weights, term by term: the prior of the net's weight sites
(:meth:`LogJoint.log_prior`), the prior of the likelihood's own latent sites such as a learned
noise scale (:meth:`LogJoint.latent_terms`) and each row's log-likelihood
(:meth:`LogJoint.row_log_likelihood`). The VI objective adds the guide's terms to it
(:mod:`bnn_pyro.methods.vi.objective`); the stacked SG-MCMC potential its transforms' Jacobians
(:mod:`bnn_pyro.methods.sgmcmc.stacked`). Each is checked against Pyro's own scoring of the model
(``Trace_ELBO``, the chains' Pyro potentials).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from pyro.distributions import Independent

from bnn_pyro.elbos.recorder import Recorder
from bnn_pyro.methods.vi.stacked_likelihoods import row_log_likelihood
from bnn_pyro.nn.pyro_net import site_prior
from bnn_pyro.weight_distributions import SharedNormal

__all__ = ["FlatPriors", "LogJoint", "sum_site", "sum_sq"]


class LogJoint:
    """The model's log-density terms at given weights, for one model or K stacked.

    Values carry ``lead`` leading dimensions before each site's own shape: none for one model,
    ``(K,)`` for K stacked, ``(P,)`` or ``(K, P)`` with P particles per model. Each term comes
    back with those leading dimensions (a scalar for one model without particles).

    Args:
        bnns: one ``VariationalBNN``, or K of one architecture (each keeps its own prior and
            likelihood settings; their likelihoods of one class).
        stacked: whether the values carry the members' dimension (K models; ``True`` for a
            stack of one too).
        particles: P, where each model's values carry P draws (after the members' dimension;
            0 otherwise).

    Example:
        >>> import bnn_pyro as bp
        >>> bnns = [bp.VariationalBNN(bp.nn.mlp(2, [], 1), bp.Gaussian(1.0)) for _ in range(3)]
        >>> joint = LogJoint(bnns, stacked=True)
        >>> values = {s.name: torch.zeros(3, *s.shape) for s in bnns[0].evaluator.sites}
        >>> joint.log_prior(values, torch.zeros(())).shape  # N(0, 1) per weight: -3 log(2 pi)/2
        torch.Size([3])
    """

    def __init__(self, bnns: Sequence[Any], stacked: bool, particles: int = 0) -> None:
        self.bnns, self.stacked, self.particles = list(bnns), bool(stacked), int(particles)
        if not self.stacked and len(self.bnns) != 1:
            raise ValueError("one model's log joint takes one model")
        if len({type(b.likelihood) for b in self.bnns}) > 1:
            raise ValueError("the models' likelihoods must be of one class")
        first = self.bnns[0]
        self.sites = list(first.evaluator.sites)
        self.paths = dict(first.evaluator.paths)
        self.lead = int(self.stacked) + int(self.particles > 0)
        self._member_modules = [dict(b.net.named_modules(prefix="net")) for b in self.bnns]
        self.one_prior = _one_setting([b.prior for b in self.bnns])
        self.one_likelihood = _one_setting([b.likelihood for b in self.bnns])
        self._priors: dict[tuple, dict[str, tuple]] = {}  # see priors
        self._flat: dict[tuple, FlatPriors] = {}  # see flat_priors
        self._fixed_latents: dict[tuple, dict[str, torch.Tensor]] = {}  # row_log_likelihood's

    def site_priors(self, site: Any) -> list[Any]:
        """Each member's prior distribution of net site ``site`` (one of ``self.sites``)."""
        path = f"net.{site.module_name}".rstrip(".")
        at = dict(param_name=site.param_name, shape=site.shape, name=site.name)
        return [
            site_prior(mods[path], prior=b.prior, **at)
            for b, mods in zip(self.bnns, self._member_modules, strict=True)
        ]

    def priors(self, like: torch.Tensor) -> dict[str, tuple]:
        """Per net site, ``("normal", (loc0, 1 / (2 scale0^2), size * log(scale0 sqrt(2 pi)),
        log(scale0)))`` (the last two: the site's normaliser and its prior's log scale) where
        every member's prior is the library's ``SharedNormal`` (one loc and scale for the
        layer: one model's as numbers, K members' as ``(K,)`` tensors viewed to broadcast
        against the site's values and their sums), else ``("any", distributions)``. Kept per device,
        dtype and prior objects where every prior is fixed (as the priors keep their own
        distributions); a learned prior's are read afresh, as it changes every step."""
        key = (like.device, like.dtype, *(id(b.prior) for b in self.bnns))
        out = self._priors.get(key)
        if out is not None:
            return out
        out = {}
        for site in self.sites:
            priors = self.site_priors(site)
            bases = [d.base_dist if isinstance(d, Independent) else d for d in priors]
            if not all(type(b) is SharedNormal for b in bases):
                out[site.name] = ("any", priors)
                continue
            size = site.shape.numel()
            rows = [
                (b.loc0, 0.5 / b.scale0**2, size * b.log_norm, math.log(b.scale0)) for b in bases
            ]
            if self.stacked:  # viewed: the loc against the values, the rest against their sums
                cols = [
                    torch.tensor(c, dtype=like.dtype, device=like.device)
                    for c in zip(*rows, strict=True)
                ]
                sums = (-1,) + (1,) * (self.lead - 1)
                loc = cols[0].view((-1,) + (1,) * (self.lead - 1 + len(site.shape)))
                rows = [(loc, *(c.view(sums) for c in cols[1:]))]
            out[site.name] = ("normal", rows[0])
        if all(b.prior.cached is not False for b in self.bnns):
            self._priors[key] = out
        return out

    def flat_priors(self, like: torch.Tensor, layout: Sequence[tuple[str, int]]) -> FlatPriors:
        """The ``SharedNormal`` priors of the sites ``layout`` lays end to end in one flat vector
        (``(name, size)`` each, in order), as that vector's constants (:class:`FlatPriors`).
        Kept as :meth:`priors` keeps its own.

        Example:
            >>> import bnn_pyro as bp
            >>> bnn = bp.VariationalBNN(bp.nn.mlp(2, [3], 1), bp.Gaussian(0.5))  # N(0, 1) prior
            >>> layout = [(s.name, s.shape.numel()) for s in bnn.evaluator.sites]
            >>> flat = LogJoint([bnn], stacked=False).flat_priors(torch.zeros(()), layout)
            >>> [size for _, size in layout], flat.half_precision, flat.mask  # one number for all
            ([6, 3, 3, 1], 0.5, None)
            >>> z = torch.zeros(13)  # (D,): every weight at 0; -13 log(2 pi)/2, and KL 0 at q = p
            >>> round(flat.log_prob(z, 0).item(), 4), flat.kl(z, torch.ones(13), 0).item()
            (-11.9462, 0.0)
        """
        key = (like.device, like.dtype, *(id(b.prior) for b in self.bnns), tuple(layout))
        out = self._flat.get(key)
        if out is not None:
            return out
        priors = self.priors(like)
        normal = {n for n, _ in layout if priors.get(n, ("",))[0] == "normal"}
        rows = len(self.bnns) if self.stacked else 1

        def column(index: int) -> Any:  # one constant over the vector: a number where it can
            parts = [priors[n][1][index] if n in normal else None for n, _ in layout]
            if all(isinstance(v, float) and v == parts[0] for v in parts):
                return parts[0]
            cols = [
                torch.as_tensor(0.0 if v is None else v, dtype=like.dtype, device=like.device)
                .reshape(-1, 1)
                .expand(rows, size)
                for v, (_, size) in zip(parts, layout, strict=True)
            ]
            flat = torch.cat(cols, -1)
            return flat.unsqueeze(1) if self.particles and self.stacked else flat.view(
                flat.shape[int(not self.stacked) :]
            )  # fmt: skip

        sizes = dict(layout)
        out = FlatPriors(
            normal,
            loc=column(0),
            half_precision=column(1),
            norm=sum((priors[n][1][2] for n in normal), 0.0),
            kl_const=sum((sizes[n] * (priors[n][1][3] - 0.5) for n in normal), 0.0),
            mask=None
            if len(normal) == len(layout)
            else torch.cat(
                [
                    torch.full((size,), float(n in normal), dtype=like.dtype, device=like.device)
                    for n, size in layout
                ]
            ),
        )
        if all(b.prior.cached is not False for b in self.bnns):
            self._flat[key] = out
        return out

    def log_prior(
        self,
        values: dict[str, torch.Tensor],
        like: torch.Tensor,
        flat: tuple[torch.Tensor, Sequence[tuple[str, int]]] | None = None,
    ) -> Any:
        """``log p(w)`` of the net's weight sites at ``values`` (``{site: value}``): one
        model's scalar, ``(K,)`` or ``(K, P)``. ``like``: a tensor on the values' device and
        dtype. ``flat``: the same values of the sites ``layout`` names as one flat vector
        ``(*lead, sum of sizes)``, with that ``layout``; its Gaussian sites are then scored in
        one pass over it (:meth:`flat_priors`), the others site by site."""
        log_p: Any = 0.0
        done: set[str] = set()
        if flat is not None:
            priors = self.flat_priors(like, flat[1])
            log_p, done = priors.log_prob(flat[0], self.lead), priors.sites
        for name, (kind, c) in self.priors(like).items():
            if name in done:
                continue
            w = values[name]
            if kind == "any":  # its own density: one call where the members share the prior
                if self.one_prior:
                    log_p = log_p + sum_site(c[0].log_prob(w), self.lead)
                else:
                    log_p = log_p + self.each(self.site_log_prob, c, w)
                continue
            m, half_precision, norm, _ = c
            centred = w if isinstance(m, float) and m == 0.0 else w - m
            log_p = log_p - half_precision * sum_sq(centred, self.lead) - norm
        return log_p

    def site_log_prob(self, d: Any, value: torch.Tensor) -> torch.Tensor:
        """``d.log_prob(value)`` summed over the site (a member's P particles kept apart)."""
        return sum_site(d.log_prob(value), 1 if self.particles else 0)

    def each(self, fn: Callable[..., Any], dists: Sequence[Any], *tensors: torch.Tensor) -> Any:
        """``fn(dist_k, *tensors_k)`` member by member (one model's: the tensors themselves):
        a scalar, or the members' stacked ``(K,)`` / ``(K, P)``."""
        if not self.stacked:
            return fn(dists[0], *tensors)
        return torch.stack([fn(d, *(t[k] for t in tensors)) for k, d in enumerate(dists)])

    def latent_terms(
        self,
        values: dict[str, torch.Tensor],
        f: torch.Tensor,
        score: Callable[[int | None, str, Any, torch.Tensor], torch.Tensor] | None = None,
    ) -> tuple[Any, dict[str, torch.Tensor]]:
        """The likelihood's own latent sites (a learned noise scale) at ``values`` (every value
        whose name is not a net site), given net output ``f``: their term, ``log p`` summed
        over each site (or ``score(k, name, prior, value)``, member ``k`` or ``None`` for one
        model), and one model's ``{site: value}`` as its likelihood reads them."""
        names = [n for n in values if n not in self.paths]
        # members with one likelihood score their latents in one pass, the values stacked
        whole = not self.stacked or (score is None and self.one_likelihood)
        terms, latents = [], {}
        for k in [None] if whole else range(len(self.bnns)):
            at = {n: values[n] if k is None else values[n][k] for n in names}
            likelihood = self.bnns[k or 0].likelihood
            priors = likelihood.latent_priors(f)
            if priors is None or set(priors) != set(names):  # its own latents: replayed
                replay = {n: {"value": v, "infer": {}} for n, v in at.items()}
                with Recorder(replay) as recorder:
                    latents = likelihood.sample_latents(f)
                priors = {name: site["fn"] for name, site in recorder.sites.items()}
            else:  # the library's own, read without Pyro (a compiled graph does not break)
                latents = dict(at)
            term: Any = torch.zeros((), dtype=f.dtype, device=f.device)
            lead = self.lead if k is None else self.lead - 1
            for name, prior in priors.items():
                if score is not None:
                    term = term + score(k, name, prior, at[name])
                else:  # (summed over the site: each member's and particle's own)
                    term = term + sum_site(prior.log_prob(at[name]), lead)
            terms.append(term)
        return terms[0] if whole else torch.stack(terms), latents

    def row_log_likelihood(
        self,
        f: torch.Tensor,
        y: torch.Tensor,
        values: dict[str, torch.Tensor],
        latents: dict[str, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Each row's ``log p(y | f)``: one model's ``(B,)`` (``(P, B)`` with particles) at its
        ``latents`` (:meth:`latent_terms`), K members' ``(K', B)`` (``K' = K * P``, member k's draws
        consecutive) at the learned noise in ``values``, else each member's fixed one."""
        if not self.stacked:
            return self.bnns[0].likelihood.log_prob(f, y, latents or {})
        noise = next((v for n, v in values.items() if n not in self.paths), None)
        lik = self.bnns[0].likelihood
        return row_log_likelihood(self.bnns, lik, f, y, noise, self._fixed_latents)


class FlatPriors:
    """The ``SharedNormal`` priors of sites laid end to end in one flat vector ``(*lead, D)``
    (what :meth:`LogJoint.flat_priors` returns): a few ops over the vector score them all.

    Attributes:
        sites: the names of the sites it covers (the others are scored site by site).
        loc, half_precision: the prior's loc and ``1 / (2 scale^2)`` per element: a number where
            every element shares it, else ``(D,)`` (one model), ``(K, D)`` or ``(K, 1, D)``
            (stacked, with particles), 0 on the elements of sites it does not cover.
        norm: the covered sites' normalisers summed: a number, or ``(K,)`` / ``(K, 1)``.
        kl_const: ``sum size * (log scale - 1/2)`` over them, the closed-form KL's constant.
        mask: ``None`` where it covers every element, else ``(D,)``: 1 on covered elements.
    """

    def __init__(
        self, sites: set[str], *, loc: Any, half_precision: Any, norm: Any, kl_const: Any,
        mask: torch.Tensor | None,
    ) -> None:  # fmt: skip
        self.sites, self.loc, self.half_precision = sites, loc, half_precision
        self.norm, self.kl_const, self.mask = norm, kl_const, mask

    def _centred(self, t: torch.Tensor) -> torch.Tensor:
        return t if isinstance(self.loc, float) and self.loc == 0.0 else t - self.loc

    def log_prob(self, z: torch.Tensor, lead: int) -> Any:
        """``log p`` of the covered sites at the flat values ``z`` ``(*lead, D)``: ``lead``'s
        shape (a scalar for one model)."""
        c = self._centred(z)
        hp = self.half_precision
        quad = hp * sum_sq(c, lead) if isinstance(hp, float) else (hp * c * c).sum(-1)
        return -quad - self.norm

    def kl(self, loc: torch.Tensor, scale: torch.Tensor, lead: int) -> Any:
        """``KL(q || p)`` of the covered sites for ``q = N(loc, scale^2)`` per element (flat,
        ``(*lead, D)``), in closed form: ``lead``'s shape."""
        c, hp = self._centred(loc), self.half_precision
        if isinstance(hp, float):
            quad = hp * (sum_sq(scale, lead) + sum_sq(c, lead))
        else:
            quad = (hp * (scale * scale + c * c)).sum(-1)
        log_s = scale.log()
        logs = sum_site(log_s, lead) if self.mask is None else (self.mask * log_s).sum(-1)
        return quad - logs + self.kl_const


def _one_setting(parts: Sequence[Any]) -> bool:
    """Whether the priors (or likelihoods) are one: the same object, or equal settings (one whose
    settings cannot be written out, e.g. a prior typed by a custom layer class, counts as its
    own)."""
    if all(p is parts[0] for p in parts):
        return True
    try:
        configs = [p.config() for p in parts]
        return all(bool(c == configs[0]) for c in configs)
    except (ValueError, RuntimeError):  # (settings holding tensors of several elements)
        return False


def sum_site(t: torch.Tensor, lead: int) -> torch.Tensor:
    """``t`` summed over every dimension after the first ``lead``.

    Example:
        >>> sum_site(torch.ones(2, 3, 4), 1)
        tensor([12., 12.])
    """
    return t.sum() if lead == 0 else t.reshape(t.shape[:lead] + (-1,)).sum(-1)


def sum_sq(t: torch.Tensor, lead: int) -> torch.Tensor:
    """``sum(t ** 2)`` over every dimension after the first ``lead``: one dot product of the
    flat tensor with itself where there is no leading dimension.

    Example:
        >>> sum_sq(torch.full((2, 3), 2.0), 0), sum_sq(torch.full((2, 3), 2.0), 1)
        (tensor(24.), tensor([12., 12.]))
    """
    if lead == 0:
        flat = t if t.dim() == 1 else t.reshape(-1)
        return torch.dot(flat, flat)
    return (t * t).reshape(t.shape[:lead] + (-1,)).sum(-1)
