"""The "sticking the landing" ELBO (Roeder, Wu & Duvenaud 2017): ``fit(elbo="stl")``.

The reparameterized gradient of ``log q(w; θ)`` at ``w = w(θ, ε)`` has a path part (through
``w``) and a score part (``∂/∂θ`` at fixed ``w``, whose expectation is zero). STL drops the score
part: the guide's log-density is scored with *detached* parameters, so gradients reach ``θ``
only through ``w``. The loss value and its expectation are those of ``Trace_ELBO``; the gradient
is still unbiased, and its variance vanishes when ``q`` is the exact posterior (then
``log p(w, y) - log q(w)`` is constant in ``w``).
"""

from __future__ import annotations

from typing import Any

import pyro.distributions as dist
import torch
from pyro.distributions.util import scale_and_mask

from bnn_pyro.elbos.trace import FastTrace_ELBO

__all__ = ["StickingTheLanding_ELBO"]


def _detached(fn: dist.Distribution) -> dist.Distribution:
    """``fn`` with its parameters cut from the graph (Normal sites, possibly ``to_event``, and
    transformed Normals such as the ``LogNormal`` of a learned noise scale)."""
    if isinstance(fn, dist.Independent):
        return dist.Independent(_detached(fn.base_dist), fn.reinterpreted_batch_ndims)
    if isinstance(fn, torch.distributions.TransformedDistribution):  # LogNormal: no θ in them
        return dist.TransformedDistribution(_detached(fn.base_dist), fn.transforms)
    if isinstance(fn, dist.Normal):
        return dist.Normal(fn.loc.detach(), fn.scale.detach(), validate_args=False)
    raise NotImplementedError(
        f"elbo='stl' needs guide sites drawn from a Normal (the mean-field guide, AutoNormal), "
        f"got {type(fn).__name__}"
    )


def _stl_log_prob(site: dict) -> Any:
    log_q = _detached(site["fn"]).log_prob(site["value"])
    return scale_and_mask(log_q, site["scale"], site["mask"])


class StickingTheLanding_ELBO(FastTrace_ELBO):
    """``Trace_ELBO`` whose guide entropy is scored with detached parameters (see the module).

    Same constructor, same loss value as :class:`~bnn_pyro.elbos.trace.FastTrace_ELBO`; only the
    gradient differs.

    Example:
        >>> import pyro, torch
        >>> loc = torch.tensor(3.0, requires_grad=True)  # q = N(3, 1) = the exact posterior
        >>> def model():
        ...     pyro.sample("w", dist.Normal(3.0, 1.0))
        >>> def guide():
        ...     pyro.sample("w", dist.Normal(loc, 1.0))
        >>> elbo = StickingTheLanding_ELBO()
        >>> grads = [torch.autograd.grad(elbo.differentiable_loss(model, guide), loc)[0]
        ...          for _ in range(3)]
        >>> [round(float(g), 6) for g in grads]  # zero for every draw, not only on average
        [0.0, 0.0, 0.0]
    """

    _stl = True

    def _get_traces(self, model: Any, guide: Any, args: Any, kwargs: Any):
        for model_trace, guide_trace in super()._get_traces(model, guide, args, kwargs):
            for site in guide_trace.nodes.values():
                if site["type"] == "sample" and not site["is_observed"] and "score_parts" in site:
                    parts = site["score_parts"]
                    site["score_parts"] = parts._replace(entropy_term=_stl_log_prob(site))
            yield model_trace, guide_trace

    def _guide_log_prob(self, site: dict) -> Any:
        return _stl_log_prob(site).sum()
