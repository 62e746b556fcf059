"""ELBOs used by ``fit``: Pyro's ``Trace_ELBO`` with a lean fast path, and the NLL record.

:class:`FastTrace_ELBO` *is* ``pyro.infer.Trace_ELBO`` (a subclass): the same estimator, the same
loss value and the same gradients. For the common case where every latent site of the model
is drawn from a fully reparameterized guide site (Bayes by Backprop: no enumeration, no score
function terms, no model-side sampling), it computes
``sum_model log p * scale - sum_guide log q * scale`` from one light recording messenger
instead of building, pruning and scoring two ``Trace`` objects. That bookkeeping is most of the
cost of a step for a small net. Anything else, and the first step of every run (so Pyro's
validation sees the structure once), goes through ``Trace_ELBO`` unchanged.
:class:`RecordingMeanField_ELBO` is ``TraceMeanField_ELBO`` (closed-form KL terms) recording the
NLL part as well. These are the ELBOs of ``fit``'s Pyro path: where the library's plain-torch
objective covers the model, ``fit`` steps with that instead, chosen by type before any work
(:mod:`bnn_pyro.methods.vi.engine`). This module knows no method. The test suite checks loss
and gradients against ``Trace_ELBO`` and ``TraceMeanField_ELBO`` under the same random draws.
"""

from __future__ import annotations

from typing import Any

import torch
from pyro.distributions.util import scale_and_mask
from pyro.infer import Trace_ELBO, TraceMeanField_ELBO

from bnn_pyro.elbos.recorder import Recorder

__all__ = ["FastTrace_ELBO", "RecordingMeanField_ELBO", "OBS_SITE"]

OBS_SITE = "obs"


def _site_log_prob(msg: dict) -> torch.Tensor:
    log_p = msg["fn"].log_prob(msg["value"])
    return scale_and_mask(log_p, msg["scale"], msg["mask"]).sum()


class _RecordsNLL:
    """ELBO mixin: ``last_nll`` is minus the (scaled) log-likelihood of ``obs_name`` of the last
    call, averaged over particles (what ``fit`` reports as ``nll``)."""

    obs_name = OBS_SITE
    last_nll: torch.Tensor = torch.tensor(float("nan"))

    def _get_traces(self, model: Any, guide: Any, args: Any, kwargs: Any):
        nll = torch.zeros(())
        for model_trace, guide_trace in super()._get_traces(model, guide, args, kwargs):
            yield model_trace, guide_trace
            site = model_trace.nodes.get(self.obs_name)
            if site is not None and "log_prob_sum" in site:
                nll = nll - site["log_prob_sum"].detach()
        self.last_nll = nll / self.num_particles


def _fast_path_applies(model_trace: Any, guide_trace: Any) -> bool:
    """Whether a (model, guide) trace pair is pure reparameterized Bayes by Backprop (the traces
    of ``Trace_ELBO``, pruned of the plates' subsample sites)."""
    for site in guide_trace.nodes.values():
        if site["type"] != "sample" or site["is_observed"]:
            continue
        if not site["fn"].has_rsample or site["infer"].get("enumerate"):
            return False
    for name, site in model_trace.nodes.items():
        if site["type"] != "sample" or site["is_observed"]:
            continue
        # (a site the guide drew has the guide's ``infer``: replay copies it, enumeration too)
        if name not in guide_trace.nodes:
            return False  # model-side sampling: Trace_ELBO's general path
    return True


class RecordingMeanField_ELBO(_RecordsNLL, TraceMeanField_ELBO):
    """``TraceMeanField_ELBO`` that records the NLL part (see ``_RecordsNLL``).

    Example:
        >>> import pyro, pyro.distributions as dist
        >>> w = torch.tensor(0.5, requires_grad=True)
        >>> model = lambda: pyro.sample("w", dist.Normal(0.0, 2.0))
        >>> loss = RecordingMeanField_ELBO().differentiable_loss(
        ...     model, lambda: pyro.sample("w", dist.Normal(w, 1.0)))
        >>> round(float(loss.detach()), 4)  # KL(N(0.5, 1) || N(0, 2**2)) = log 2 + 1.25 / 8 - 1/2
        0.3494
    """


class FastTrace_ELBO(_RecordsNLL, Trace_ELBO):
    """``pyro.infer.Trace_ELBO`` with a fast path for fully reparameterized guides.

    Same constructor and results as ``Trace_ELBO``; see the module docstring.

    Example:
        >>> import pyro, pyro.distributions as dist
        >>> def model():
        ...     pyro.sample("w", dist.Normal(0., 1.))
        >>> def guide():
        ...     pyro.sample("w", dist.Normal(torch.tensor(0.5, requires_grad=True), 1.))
        >>> elbo = FastTrace_ELBO()
        >>> _ = elbo.differentiable_loss(model, guide)  # first call: Trace_ELBO, checks the case
        >>> elbo.fast
        True
        >>> pyro.set_rng_seed(0); fast = elbo.differentiable_loss(model, guide)
        >>> pyro.set_rng_seed(0); slow = Trace_ELBO().differentiable_loss(model, guide)
        >>> bool(torch.isclose(fast, slow))
        True
    """

    def _guide_log_prob(self, site: dict) -> torch.Tensor:
        """The scaled log-density of a guide site (a hook: STL detaches its parameters)."""
        return _site_log_prob(site)

    def _one_pass(self, model: Any, guide: Any, args: Any, kwargs: Any) -> tuple | None:
        guide_rec = Recorder()
        with guide_rec:
            guide(*args, **kwargs)
        model_rec = Recorder(replay=guide_rec.sites)
        with model_rec:
            model(*args, **kwargs)
        if model_rec.unmatched:
            return None
        elbo = 0.0
        nll = torch.zeros(())
        for name, site in model_rec.sites.items():
            log_p = _site_log_prob(site)
            elbo = elbo + log_p
            if name == self.obs_name:
                nll = -log_p.detach()
        for site in guide_rec.sites.values():  # an observed one too, as Trace_ELBO scores it
            elbo = elbo - (
                _site_log_prob(site) if site["is_observed"] else self._guide_log_prob(site)
            )
        return -elbo, nll

    def _fast_loss(self, model: Any, guide: Any, args: Any, kwargs: Any) -> torch.Tensor | None:
        if self.vectorize_particles:
            model = self._vectorized_num_particles(model)
            guide = self._vectorized_num_particles(guide)
            passes = 1
        else:
            passes = self.num_particles
        loss = nll = 0.0
        for _ in range(passes):
            out = self._one_pass(model, guide, args, kwargs)
            if out is None:
                return None  # the structure changed: let Trace_ELBO handle this call
            loss, nll = loss + out[0], nll + out[1]
        self.last_nll = nll / self.num_particles
        return loss / self.num_particles

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fast = False  # decided from the traces of the first, fully checked, call
        self._fast_candidate = True

    def _get_traces(self, model: Any, guide: Any, args: Any, kwargs: Any):
        for model_trace, guide_trace in super()._get_traces(model, guide, args, kwargs):
            self._fast_candidate = self._fast_candidate and _fast_path_applies(
                model_trace, guide_trace
            )
            yield model_trace, guide_trace

    def differentiable_loss(
        self, model: Any, guide: Any, *args: Any, **kwargs: Any
    ) -> torch.Tensor:
        if self.fast:
            loss = self._fast_loss(model, guide, args, kwargs)
            if loss is not None:
                return loss
            self.fast = False
        loss = Trace_ELBO.differentiable_loss(self, model, guide, *args, **kwargs)
        self.fast = self._fast_candidate
        return loss
