"""``Trace_ELBO``'s loss of a mean-field :class:`~bnn_pyro.VariationalBNN`, in plain torch.

After its first, fully checked step, :class:`~bnn_pyro.elbos.trace.FastTrace_ELBO` already skips
Pyro's trace bookkeeping; what remains of a small net's step is one ``pyro.sample`` call per
weight (the messenger stack, a distribution object, ``PyroModule`` attribute look-ups) in the
guide and again in the model. :class:`DirectLoss` computes the same single-particle estimator
with none of that:

    loss = -( N/B * sum_n log p(y_n | f(x_n; w)) + beta * (log p(w) - log q(w)) ),
    w = loc + softplus(rho) * eps,  eps ~ N(0, I)

drawing ``eps`` with the same ``torch.randn`` calls, in the same order, as the guide, scoring
the weights with the prior's own distributions and running the net as a plain-torch twin
(:class:`~bnn_pyro.nn.batched.BatchedTwin`) that takes the drawn weights as attributes. The
ELBO uses it only after checking, once, on the first step, that it gives the loss and the
gradients of ``Trace_ELBO`` under the same random draws (see ``FastTrace_ELBO``); anything it
does not know (a custom guide, several particles) keeps the Pyro path. With local
reparameterization the layers sample their pre-activations through the same layer hook as
:class:`~bnn_pyro.poutine.LocalReparameterization`, fed the guide's ``(loc, scale)`` directly.

With ``analytic_kl=True`` it is ``TraceMeanField_ELBO``'s loss instead (``elbo="meanfield"``):
``-(N/B * sum_n log p(y_n | f(x_n; w)) - beta * sum_sites KL(q || p))``, each site's KL in
closed form where Pyro's ``kl_divergence`` has one (the default ``N(0, s^2)`` prior: one dot
product per site) and ``log q(w) - log p(w)`` where it has none, as Pyro does site by site.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from pyro.distributions import Independent, constraints
from pyro.distributions.kl import kl_divergence

from bnn_pyro.elbos.recorder import Recorder
from bnn_pyro.guides import MeanFieldNormalGuide
from bnn_pyro.nn.batched import BatchedTwin, has_hooks
from bnn_pyro.nn.layers import LAYER_HOOKS
from bnn_pyro.nn.pyro_net import DEVICE_REF, site_prior
from bnn_pyro.weight_distributions import LOG_SQRT_2PI, SharedNormal

if TYPE_CHECKING:
    from bnn_pyro.methods.vi.svi_model import SVIModel

__all__ = ["DirectLoss", "direct_loss_for", "why_no_direct_loss"]


class DirectLoss:
    """``(x, y, dataset_size=N, kl_weight=beta) -> (loss, nll)`` of a mean-field VariationalBNN.

    ``loss`` is the negative single-particle ELBO estimate that ``Trace_ELBO`` computes for
    ``bnn.model``/``bnn.guide`` under the same draws; ``nll`` is its detached likelihood part
    (minus the scaled log-likelihood). Shapes: ``x (B, *features)``, ``y`` as the likelihood's
    ``check_targets`` returns it; both results are scalars.

    Build it with :func:`direct_loss_for`, which returns ``None`` for the models it does not
    cover.

    Example:
        >>> import bnn_pyro as bp, pyro
        >>> bnn = bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.5))
        >>> X, y = torch.randn(8, 2), torch.randn(8, 1)
        >>> bnn.setup_guide(X, y)
        >>> direct = direct_loss_for(bnn)
        >>> pyro.set_rng_seed(0); loss, nll = direct(X, y, dataset_size=8)
        >>> pyro.set_rng_seed(0)
        >>> ref = pyro.infer.Trace_ELBO().differentiable_loss(bnn.model, bnn.guide, X, y, 8)
        >>> bool(torch.isclose(loss, ref))
        True
    """

    def __init__(self, bnn: SVIModel, stl: bool = False, analytic_kl: bool = False) -> None:
        if stl and analytic_kl:
            raise ValueError("stl and analytic_kl are two different ELBOs: choose one")
        self.bnn, self.stl, self.analytic_kl = bnn, stl, analytic_kl
        self.params = [p for p in bnn.parameters() if p.requires_grad]
        guide = bnn.guide
        self._guide_sites = [
            (spec, guide.locs[guide.param_key(spec.name)], guide.rhos[guide.param_key(spec.name)])
            for spec in guide.site_specs
        ]
        net_sites = {s.name: s for s in bnn.evaluator.sites}
        modules = dict(bnn.net.named_modules(prefix="net"))
        self._priors = [
            (name, modules[f"net.{s.module_name}".rstrip(".")], s.param_name, s.shape)
            for name, s in net_sites.items()
        ]
        self._paths = dict(bnn.evaluator.paths)
        self._other = [spec.name for spec, _, _ in self._guide_sites if spec.name not in net_sites]
        self._twin: BatchedTwin = bnn.evaluator.twin
        self._shared = {
            k: v
            for k, v in {
                **dict(bnn.net.named_parameters()),
                **dict(bnn.net.named_buffers()),
            }.items()
            if not k.endswith(DEVICE_REF)
        }

    def _draw(self) -> tuple[dict[str, torch.Tensor], torch.Tensor, dict[str, tuple]]:
        """The guide's draws (same calls, same order as ``MeanFieldNormalGuide.forward``),
        ``log q`` of them and ``{name: (loc, scale)}`` of the real-valued sites."""
        values: dict[str, torch.Tensor] = {}
        scales: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        log_q = 0.0
        for spec, loc, rho in self._guide_sites:
            scale = F.softplus(rho)
            if spec.exp or spec.support is not constraints.real:
                d = self.bnn.guide.site_distribution(spec, loc, scale)
                value = d.rsample()
                if self.stl:  # scored with detached parameters (StickingTheLanding_ELBO)
                    d = self.bnn.guide.site_distribution(spec, loc.detach(), scale.detach())
                log_q = log_q + d.log_prob(value).sum()
            else:
                eps = torch.randn_like(loc)
                value = loc + eps * scale
                scales[spec.name] = (loc, scale)
                if self.stl:
                    s = scale.detach()
                    z = (value - loc.detach()) / s
                    log_q = log_q - 0.5 * _sq(z) - s.log().sum()
                else:  # (w - loc) / scale is eps: only log(scale) carries a gradient
                    log_q = log_q - 0.5 * _sq(eps) - scale.log().sum()
                log_q = log_q - loc.numel() * LOG_SQRT_2PI
            values[spec.name] = value
        return values, log_q, scales

    def _draw_with_kl(self) -> tuple[dict, Any, dict, dict]:
        """The guide's draws as :meth:`_draw` makes them (same calls, same order), the summed
        ``KL(q || p)`` of the net's weight sites (closed form, or ``log q - log p`` of the draw
        where Pyro has none), ``{name: (loc, scale)}`` of the real-valued sites and the guide's
        distributions of the likelihood's own latents (scored once their prior is known)."""
        values: dict[str, torch.Tensor] = {}
        scales: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        dists: dict[str, Any] = {}
        priors = {name: (module, param, shape) for name, module, param, shape in self._priors}
        kl: Any = 0.0
        for spec, loc, rho in self._guide_sites:
            scale = F.softplus(rho)
            name = spec.name
            real = not spec.exp and spec.support is constraints.real
            if real:
                eps = torch.randn_like(loc)
                value = loc + eps * scale
                scales[name] = (loc, scale)
            else:
                q = self.bnn.guide.site_distribution(spec, loc, scale)
                value = q.rsample()
            values[name] = value
            if name not in priors:  # a latent of the likelihood: its prior comes later
                dists[name] = q if not real else self.bnn.guide.site_distribution(spec, loc, scale)
                continue
            module, param_name, shape = priors[name]
            prior = site_prior(
                module, prior=self.bnn.prior, param_name=param_name, shape=shape, name=name
            )
            base = prior.base_dist if isinstance(prior, Independent) else prior
            if real and type(base) is SharedNormal:  # the default prior: closed form, fused
                s0, n = base.scale0, loc.numel()
                centred = loc if base.loc0 == 0.0 else loc - base.loc0
                kl = kl + (
                    0.5 / s0**2 * (_sq(scale) + _sq(centred))
                    - scale.log().sum()
                    + n * (math.log(s0) - 0.5)
                )
            else:
                q = q if not real else self.bnn.guide.site_distribution(spec, loc, scale)
                kl = kl + _site_kl(q, prior, value)
        return values, kl, scales, dists

    def __call__(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        dataset_size: int | None = None,
        kl_weight: float = 1.0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.analytic_kl:
            values, kl, scales, dists = self._draw_with_kl()
            log_p, log_q = 0.0, kl  # (the loss below is then -(log_lik - beta * kl))
        else:
            values, log_q, scales = self._draw()
            log_p = 0.0
            for name, module, param_name, shape in self._priors:
                prior = site_prior(
                    module, prior=self.bnn.prior, param_name=param_name, shape=shape, name=name
                )
                log_p = log_p + _log_prob_sum(prior, values[name])
        stacked = {self._paths[name]: v for name, v in values.items() if name in self._paths}
        net = self._twin.load(self._shared, stacked)
        estimator = self.bnn.local_reparameterization if self.bnn.training else None
        f = net(x) if estimator is None else _lrt_forward(net, x, values, scales, estimator)
        latents: dict[str, torch.Tensor] = {}
        if self._other:  # the likelihood's own latents, given the guide's values
            replay = {name: {"value": values[name], "infer": {}} for name in self._other}
            recorder = Recorder(replay)
            with recorder:
                latents = self.bnn.likelihood.sample_latents(f)
            for name, site in recorder.sites.items():
                if self.analytic_kl:  # KL(q || p) of the likelihood's latent, as for a weight
                    log_q = log_q + _site_kl(dists[name], site["fn"], values[name])
                else:
                    log_p = log_p + site["fn"].log_prob(values[name]).sum()
        rows = f.shape[-2]
        scale = 1.0 if dataset_size is None else dataset_size / rows
        log_lik = self.bnn.likelihood.log_prob(f, y, latents).sum() * scale
        loss = -(log_lik + kl_weight * (log_p - log_q))
        return loss, -log_lik.detach()


def _lrt_forward(
    net: torch.nn.Module,
    x: torch.Tensor,
    values: dict[str, torch.Tensor],
    scales: dict[str, tuple[torch.Tensor, torch.Tensor]],
    estimator: str,
) -> torch.Tensor:
    """``net(x)`` with its layers sampling pre-activations (local reparameterization or
    flipout) from the guide's ``(loc, scale)`` of each drawn weight: the layer hook of
    :class:`~bnn_pyro.poutine.LocalReparameterization`, fed directly instead of from Pyro's
    effect stack, so the same estimator draws the same noise."""
    from bnn_pyro.poutine.local_reparameterization import LocalReparameterization

    handler = LocalReparameterization(estimator)
    for name, (loc, scale) in scales.items():
        handler.register_weight(values[name], name, loc, scale)
    LAYER_HOOKS.append(handler.forward_layer)
    try:
        return net(x)
    finally:
        LAYER_HOOKS.remove(handler.forward_layer)


def _site_kl(q: Any, p: Any, value: torch.Tensor) -> torch.Tensor:
    """``KL(q || p)`` summed, where Pyro's ``kl_divergence`` knows the pair (as
    ``TraceMeanField_ELBO`` scores a site); ``log q(value) - log p(value)`` where it does not."""
    try:
        return kl_divergence(q, p).sum()
    except NotImplementedError:
        return q.log_prob(value).sum() - p.log_prob(value).sum()


def _sq(t: torch.Tensor) -> torch.Tensor:
    """``sum(t ** 2)`` as one dot product of the flat tensor with itself."""
    flat = t.reshape(-1)
    return torch.dot(flat, flat)


def _log_prob_sum(d: Any, value: torch.Tensor) -> torch.Tensor:
    """``d.log_prob(value).sum()``; for the library's ``SharedNormal`` (one loc and scale for all
    elements, the default prior) as one dot product instead of elementwise terms."""
    base = d.base_dist if isinstance(d, Independent) else d
    if type(base) is SharedNormal:
        centred = value if base.loc0 == 0.0 else value - base.loc0
        return -0.5 / base.scale0**2 * _sq(centred) - value.numel() * base.log_norm
    return d.log_prob(value).sum()


def direct_loss_for(bnn: Any, stl: bool = False, analytic_kl: bool = False) -> DirectLoss | None:
    """A :class:`DirectLoss` for ``bnn`` (a :class:`~bnn_pyro.VariationalBNN`, whose
    ``fast_loss`` calls this), or ``None`` when the model is not one it covers: the library's
    mean-field guide (set up), no forward or backward hooks on the net's modules (the
    plain-torch twin would not call them), a prior without latent sites of its own (a
    hierarchical scale: its prior and the weights' prior given it are Pyro's to score).

    Example:
        >>> import bnn_pyro as bp
        >>> bnn = bp.VariationalBNN(bp.nn.mlp(2, [], 1), bp.Gaussian(0.1), guide="normal")
        >>> direct_loss_for(bnn) is None  # a Pyro autoguide: the Pyro path
        True
    """
    if why_no_direct_loss(bnn) is not None or not bnn.guide.is_setup:
        return None
    return DirectLoss(bnn, stl, analytic_kl)


def why_no_direct_loss(bnn: Any) -> str | None:
    """Why :func:`direct_loss_for` gives ``bnn`` no loss whatever its guide's set-up, or
    ``None``: a guide other than the library's mean-field one, a prior with latent sites of its
    own (scored by Pyro's path), hooks on the net's modules.

    Example:
        >>> import bnn_pyro as bp
        >>> bnn = bp.VariationalBNN(bp.nn.mlp(2, [], 1), bp.Gaussian(0.1), guide="normal")
        >>> why_no_direct_loss(bnn)
        "guide='normal' is not the library's mean-field guide (guide='meanfield')"
    """
    guide = bnn.guide
    if not isinstance(guide, MeanFieldNormalGuide) or type(guide).forward is not (
        MeanFieldNormalGuide.forward
    ):
        spec = getattr(bnn, "guide_spec", type(guide).__name__)
        return f"guide={spec!r} is not the library's mean-field guide (guide='meanfield')"
    if getattr(bnn, "prior_sites", None):
        return "the prior has latent sites of its own (a hierarchical scale), which Pyro scores"
    if has_hooks(bnn.net):
        return "the net's modules have forward or backward hooks, which the plain-torch twin skips"
    return None
