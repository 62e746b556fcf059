"""K mean-field ``VariationalBNN`` fits in one pass: seeds, data splits or noise levels at once.

:func:`fit_stacked` trains K models of one architecture as one (see
:mod:`bnn_pyro.training.stacked` for the idea) with the single-particle ``Trace_ELBO`` loss of
:mod:`bnn_pyro.direct_elbo`, each member on its own data (a shared ``(N, D)`` set or one
``(N, D)`` set per member, e.g. the splits of a benchmark), with its own seed, prior scales and
noise. Every member draws its noise from a generator of its own in the order its own ``fit``
would draw from the global one (the guide's set-up draw included), and its minibatch order from
its own seeded generator: the result is each member's ``bnn.fit(..., seed=seed_k)`` up to float
rounding (tested).

Covered: the library's mean-field guide, a prior whose layers are Normal with one loc and scale
each (``IIDPrior(Normal)``, ``LayerwiseNormalPrior``, the default), a ``Gaussian`` (fixed or
learned noise), ``HeteroscedasticGaussian``, ``Categorical`` or ``Bernoulli`` likelihood, one
particle (or the black-box alpha energy's P: :mod:`bnn_pyro.training.stacked_alpha`); the
weight-space estimator or local reparameterization / flipout of linear layers.
:func:`why_not_stacked_vi` names what is not.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from pyro.distributions import Independent

from bnn_pyro._checks import as_tensor, check_float, check_int
from bnn_pyro._rng import global_rng_state, order_generators, seeded
from bnn_pyro.direct_elbo import _LOG_SQRT_2PI
from bnn_pyro.map_init import check_init, map_phase
from bnn_pyro.nn.pyro_net import _site_prior
from bnn_pyro.training.batches import shuffled_batches
from bnn_pyro.training.callbacks import History
from bnn_pyro.training.loop import Callback, train
from bnn_pyro.training.optim import make_optimizer
from bnn_pyro.training.stacked import StackedLossStep, elementwise_optimizer, stacked_batches
from bnn_pyro.training.stacked_likelihoods import row_log_likelihood
from bnn_pyro.training.stacked_lrt import reparameterized_forward
from bnn_pyro.training.stacked_support import members_elbo, why_not_stacked_vi
from bnn_pyro.training.svi import KLWeightSpec, kl_weight_at
from bnn_pyro.weight_distributions import SharedNormal

__all__ = ["StackedVI", "fit_stacked", "why_not_stacked_vi"]


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
        self.specs = list(first.guide._sites)
        keys = [first.guide._key(s.name) for s in self.specs]
        self.locs = nn.ParameterList(
            [nn.Parameter(torch.stack([b.guide.locs[k].detach() for b in self.bnns])) for k in keys]
        )
        self.rhos = nn.ParameterList(
            [nn.Parameter(torch.stack([b.guide.rhos[k].detach() for b in self.bnns])) for k in keys]
        )
        self._twin, self._paths = first._evaluator._twin, first._evaluator._paths
        self._priors = self._prior_constants()

    def _prior_constants(self) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Per net site: each member's prior ``(loc, scale, log normaliser)`` as ``(K,)``."""
        out = {}
        modules = [dict(b.net.named_modules(prefix="net")) for b in self.bnns]
        for site in self.bnns[0]._evaluator.sites:
            path = f"net.{site.module_name}".rstrip(".")
            rows = []
            for b, mods in zip(self.bnns, modules, strict=True):
                d = _site_prior(
                    mods[path], prior=b.prior, param_name=site.param_name, shape=site.shape
                )
                base = d.base_dist if isinstance(d, Independent) else d
                if type(base) is not SharedNormal:
                    raise ValueError(
                        f"fit_stacked needs Normal priors with one loc and scale per layer, "
                        f"got {type(base).__name__} for {site.name!r}"
                    )
                rows.append((base._loc0, base._scale0, base._log_norm))
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
            lq = (
                -0.5 * (eps * eps).sum(dims) - scale.log().sum(dims) - shape.numel() * _LOG_SQRT_2PI
            )
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
        if estimator and self.bnns[0].training:
            f = reparameterized_forward(net, x, scales, estimator, self.generators)
        else:
            f = net(x)  # (K, B, O)
        noise = self._learned_noise(values)
        log_p = log_p + self._noise_log_prior(noise, f)
        log_lik = row_log_likelihood(self.bnns, self.bnns[0].likelihood, f, y, noise).sum(1)
        scale = self.dataset_size / x.shape[1]
        return -(scale * log_lik + self.kl_weight * (log_p - log_q))

    @torch.no_grad()
    def write_back(self) -> None:
        """Copy member k's slice of the stacked guide into ``bnns[k]``'s guide."""
        for spec, loc, rho in zip(self.specs, self.locs, self.rhos, strict=True):
            for k, b in enumerate(self.bnns):
                key = b.guide._key(spec.name)
                b.guide.locs[key].copy_(loc[k])
                b.guide.rhos[key].copy_(rho[k])


def fit_stacked(
    bnns: Sequence[Any],
    X: torch.Tensor,
    y: torch.Tensor,
    *,
    seeds: Sequence[int],
    epochs: int = 100,
    batch_size: int = 128,
    lr: float | None = None,
    optimizer: Any = None,
    weight_decay: float = 0.0,
    kl_weight: KLWeightSpec = 1.0,
    lr_schedule: Any = None,
    callbacks: Iterable[Callback] = (),
    progress: bool = True,
    init: str | None = None,
    map_epochs: int | None = None,
    elbo: str | None = None,
    num_particles: int = 1,
) -> History:
    """Train K ``VariationalBNN`` (or K ``MCDropout``, ``SWAG`` or ``LaplaceApproximation``)
    models as one; each ends as its own ``fit(X_k, y_k, seed=seeds[k], ...)`` would (up to
    float rounding).

    ``MCDropout``, ``SWAG`` and ``LaplaceApproximation`` models go to
    :func:`bnn_pyro.methods._classic_stacked.fit_classic_stacked` (there ``kl_weight`` and
    ``callbacks`` do not apply; ``weight_decay`` applies there only).

    Args:
        bnns: K models of one architecture (see :func:`why_not_stacked_vi`).
        X: ``(N, D)`` shared by all, or ``(K, N, D)``: member k's own rows (a tensor, numpy
            array or nested list).
        y: ``(N,)``/``(N, O)`` targets, or ``(K, N)``/``(K, N, O)``.
        seeds: K seeds, each as ``fit(seed=)``.
        epochs, batch_size, lr, optimizer, kl_weight, lr_schedule, progress: as in
            :meth:`bnn_pyro.VariationalBNN.fit` (``kl_weight``: a float or ``fn(epoch)``, e.g.
            :func:`~bnn_pyro.training.callbacks.linear_annealing`; ``optimizer``: an elementwise
            one; ``lr=None``: the class's default; ``lr_schedule=None``: the SVI default, cosine).
        callbacks: ``fn(bnns, epoch, history)`` after each epoch, the models written back.
        init, map_epochs: as in :meth:`bnn_pyro.VariationalBNN.fit`: with ``init="map"`` each
            member runs its own MAP phase (:func:`bnn_pyro.map_init.map_phase`, one member at
            a time, on its own minibatch order) before the stacked SVI.
        elbo, num_particles: ``"trace"`` (one particle) or ``"alpha"`` (the black-box alpha
            energy, :class:`~bnn_pyro.training.stacked_alpha.StackedAlphaVI`), as in ``fit``;
            ``None``: the members' own (their ``elbo=``, one for all).

    Returns:
        A :class:`~bnn_pyro.training.History`: ``loss`` (the members' mean) and ``member_loss``.

    Example:
        >>> import bnn_pyro as bp
        >>> X = torch.randn(64, 2); y = X.sum(-1, keepdim=True)
        >>> bnns = [bp.VariationalBNN(bp.nn.mlp(2, [8], 1), bp.Gaussian(0.1)) for _ in range(3)]
        >>> history = fit_stacked(bnns, X, y, seeds=[0, 1, 2], epochs=2, progress=False)
        >>> len(history["member_loss"][-1])
        3
    """
    from bnn_pyro.methods._classic_stacked import fit_classic_stacked, stacked_classes
    from bnn_pyro.training.svi import DEFAULT_SCHEDULE

    X, y = as_tensor("X", X, min_dim=2), as_tensor("y", y)
    if bnns and any(type(b) in stacked_classes() for b in bnns):
        if kl_weight != 1.0 or list(callbacks):
            raise ValueError(f"kl_weight and callbacks do not apply to {type(bnns[0]).__name__}")
        return fit_classic_stacked(
            bnns, X, y, seeds=seeds, epochs=epochs, batch_size=batch_size, lr=lr,
            weight_decay=weight_decay, optimizer=optimizer, lr_schedule=lr_schedule,
            progress=progress,
        )  # fmt: skip
    if weight_decay:
        raise ValueError("weight_decay applies to MCDropout, SWAG and Laplace (VI has its prior)")
    if not callable(kl_weight):
        check_float("kl_weight", kl_weight, minimum=0.0)
    if init is not None or map_epochs is not None:
        for b in bnns:
            map_epochs = check_init(b, init, map_epochs, epochs)
    lr = 1e-2 if lr is None else lr  # VariationalBNN.fit's default
    num_particles = check_int("num_particles", num_particles)
    elbo = elbo if elbo is not None else members_elbo(bnns)
    if (elbo, num_particles) != ("trace", 1) and elbo != "alpha":
        raise ValueError(
            f"fit_stacked takes elbo='trace' (one particle) or 'alpha' (any num_particles), "
            f"got elbo={elbo!r}, num_particles={num_particles!r}"
        )
    if elbo == "alpha" and any(b.local_reparameterization for b in bnns):
        raise ValueError("elbo='alpha' is stacked for the weight-space estimator only")
    reason = why_not_stacked_vi(bnns)
    if reason is not None:
        raise ValueError(f"fit_stacked: {reason}")
    k = len(bnns)
    if len(seeds) != k:
        raise ValueError(f"seeds must give one seed per model ({k}), got {len(seeds)}")
    if not elementwise_optimizer(optimizer):
        raise ValueError(f"fit_stacked needs an elementwise optimizer, got {optimizer!r}")
    per_member = X.dim() == 3
    xs = [b._inputs(X[i] if per_member else X) for i, b in enumerate(bnns)]
    ys = [b._targets(y[i] if per_member else y, xs[i]) for i, b in enumerate(bnns)]
    n = xs[0].shape[0]
    if any(x.shape[0] != n for x in xs):
        raise ValueError("every member needs the same number of rows")
    generators = []
    for b, x, t, seed in zip(bnns, xs, ys, seeds, strict=True):
        with seeded(int(seed), b.device):  # what fit does before its first step
            b.input_shape = tuple(x.shape[1:])
            b._setup_guide(x[:2], t[:2], (x, t))
            g = torch.Generator(device=b.device)  # where its own fit's draws come from now
            g.set_state(global_rng_state(b.device))
        b.dataset_size = n
        generators.append(g)
    order = order_generators([int(s) for s in seeds])
    if map_epochs:  # as fit(init="map"): each member's MAP phase on its own minibatch order
        for b, x, t, g, seed in zip(bnns, xs, ys, order, seeds, strict=True):
            member_batches = shuffled_batches(x, t, min(batch_size, n), True, int(seed))
            map_phase(b, member_batches, dataset_size=n, epochs=map_epochs, lr=lr, progress=False)
            g.set_state(member_batches.generator.get_state())
    if elbo == "alpha":
        from bnn_pyro.alpha_elbo import alpha_particles
        from bnn_pyro.training.stacked_alpha import StackedAlphaVI

        p = alpha_particles(num_particles)  # as fit(elbo="alpha")
        stacked: StackedVI = StackedAlphaVI(bnns, generators, n, num_particles=p)
    else:
        stacked = StackedVI(bnns, generators, n)
    x_all, y_all = torch.stack(xs), torch.stack(ys)
    if batch_size >= n:  # fit's full batch: the rows as they are, every epoch

        def batches() -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
            return [(x_all, y_all)]

    else:
        batches = stacked_batches(x_all, y_all, batch_size, order, per_member=True)
    opt = make_optimizer(optimizer, stacked.parameters(), lr)

    def set_kl_weight(epoch: int) -> None:  # as fit: the schedule's value at each epoch
        stacked.kl_weight = kl_weight_at(kl_weight, epoch)

    desc = f"fit_stacked (lr={lr})"
    step = StackedLossStep(stacked.member_losses, opt, desc, False, on_epoch=set_kl_weight)

    def write_back(_: Any, epoch: int, history: History) -> None:
        stacked.write_back()

    seen = [lambda _, epoch, h, cb=cb: cb(bnns, epoch, h) for cb in callbacks]
    modes = [b.training for b in bnns]
    for b in bnns:
        b.train()
    try:
        return train(
            stacked,
            step,
            batches,
            epochs=epochs,
            callbacks=[write_back, *seen],
            progress=progress,
            desc=f"VariationalBNN, {k} models stacked",
            lr_schedule=DEFAULT_SCHEDULE if lr_schedule is None else lr_schedule,
        )
    finally:
        stacked.write_back()
        for b, mode in zip(bnns, modes, strict=True):
            b.train(mode)
