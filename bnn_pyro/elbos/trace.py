"""ELBOs used by ``fit``: Pyro's ``Trace_ELBO`` with a lean fast path, and the NLL record.

:class:`FastTrace_ELBO` *is* ``pyro.infer.Trace_ELBO`` (a subclass): the same estimator, the same
loss value and the same gradients. For the common case where every latent site of the model
is drawn from a fully reparameterized guide site (Bayes by Backprop: no enumeration, no score
function terms, no model-side sampling), it computes
``sum_model log p * scale - sum_guide log q * scale`` from one light recording messenger
instead of building, pruning and scoring two ``Trace`` objects. That bookkeeping is most of the
cost of a step for a small net. Anything else, and the first step of every run (so Pyro's
validation sees the structure once), goes through ``Trace_ELBO`` unchanged. A method may hand in a
plain-torch implementation of its own loss (``fast_loss=``; a mean-field
:class:`~bnn_pyro.VariationalBNN` hands in :mod:`bnn_pyro.methods.vi.fast_loss`'s): it is used
from the
first call on, once that call has shown, against ``Trace_ELBO`` run from the same random state,
that it gives the same loss and gradients. :class:`RecordingMeanField_ELBO` takes such a loss
the same way, checked against ``TraceMeanField_ELBO`` (closed-form KL terms). This module knows
no method. The test suite checks loss and gradients against ``Trace_ELBO`` and
``TraceMeanField_ELBO`` under the same random draws.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from pyro.distributions.util import scale_and_mask
from pyro.infer import Trace_ELBO, TraceMeanField_ELBO

from bnn_pyro.elbos.recorder import Recorder

__all__ = ["ChecksDirectLoss", "FastTrace_ELBO", "RecordingMeanField_ELBO", "OBS_SITE"]

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


class ChecksDirectLoss:
    """ELBO mixin: a method's own plain-torch loss (``fast_loss=``), checked against the ELBO
    itself on the first call and used from then on only if the two agree.

    ``fast_loss`` is called once (:meth:`direct_from`) with ``stl`` (whether the guide's entropy
    is scored with detached parameters), and with ``analytic_kl=True`` for an ELBO that scores
    each site by its closed-form KL (the alpha energy: with its ``alpha`` and ``particles``); it
    returns ``None`` or a callable ``loss(*args, **kwargs) -> (loss, nll)`` with a ``params``
    list.

    Example:
        >>> import pyro, pyro.distributions as dist
        >>> loc = torch.tensor(0.5, requires_grad=True)
        >>> def direct(*args):  # the guide's draw, scored as Trace_ELBO scores it
        ...     w = loc + torch.randn(())
        ...     lq = dist.Normal(loc, 1.0).log_prob(w)
        ...     return lq - dist.Normal(0.0, 1.0).log_prob(w), torch.zeros(())
        >>> direct.params = [loc]
        >>> elbo = FastTrace_ELBO(fast_loss=lambda stl: direct)
        >>> model = lambda: pyro.sample("w", dist.Normal(0.0, 1.0))
        >>> guide = lambda: pyro.sample("w", dist.Normal(loc, 1.0))
        >>> _ = elbo.differentiable_loss(model, guide)  # checked against Trace_ELBO
        >>> elbo.uses_direct_loss
        True
    """

    #: Whether the guide's entropy is scored with detached parameters (STL, a subclass).
    _stl = False
    #: Whether each site is scored by ``KL(q || p)`` (``TraceMeanField_ELBO``).
    _analytic_kl = False

    def __init__(
        self, *args: Any, fast_loss: Callable[..., Any] | None = None, **kwargs: Any
    ) -> None:
        if fast_loss is not None and not callable(fast_loss):
            raise TypeError(f"fast_loss must be callable or None, got {type(fast_loss).__name__}")
        super().__init__(*args, **kwargs)
        self.fast = False  # decided from the traces of the first, fully checked, call
        self._fast_candidate = True
        self._fast_loss_for = fast_loss
        # the handed-in plain-torch loss: None until the first call builds it (and checks it),
        # False when there is none or it failed the check
        self._direct: Any = None

    def _get_traces(self, model: Any, guide: Any, args: Any, kwargs: Any):
        for model_trace, guide_trace in super()._get_traces(model, guide, args, kwargs):
            self._fast_candidate = self._fast_candidate and _fast_path_applies(
                model_trace, guide_trace
            )
            yield model_trace, guide_trace

    def _checked_direct(self, model: Any, guide: Any, args: Any, kwargs: Any) -> torch.Tensor:
        """The first call: the ELBO itself (validated, deciding the fast path) and, from the
        same random state, the direct loss. If the two agree in loss and gradients, the direct
        loss is returned and used from then on, so every step of every run (a resumed one too)
        takes the same path; otherwise the ELBO's loss, and the ELBO's own path after."""
        make = self._fast_loss_for
        direct = None if make is None else self.direct_from(make)
        device = direct.params[0].device if direct is not None and direct.params else None
        before = None if device is None else _rng_state(device)
        loss = super().differentiable_loss(model, guide, *args, **kwargs)
        self.fast, self._direct = self._fast_candidate, False
        if before is None or not self.fast:
            return loss
        after, nll = _rng_state(device), self.last_nll
        _set_rng_state(device, before)
        try:
            got, got_nll = direct(*args, **kwargs)
            same = _same_loss_and_grads(loss, got, direct.params)
        except (RuntimeError, ValueError, KeyError, TypeError, NotImplementedError):
            same = False
        if not same:
            _set_rng_state(device, after)
            self.last_nll = nll
            return loss
        self._direct, self.last_nll = direct, got_nll
        return got

    def direct_from(self, make: Callable[..., Any]) -> Any:
        """The direct loss this ELBO asks ``make`` (the method's ``fast_loss``) for: one
        particle's, ``None`` for several (a subclass with an objective of its own asks for it)."""
        if self.num_particles != 1:
            return None
        return make(self._stl, analytic_kl=True) if self._analytic_kl else make(self._stl)

    @property
    def uses_direct_loss(self) -> bool:
        """Whether the method's plain-torch loss passed the first call's check and is used."""
        return bool(self._direct)

    def _without_direct(self, model: Any, guide: Any, args: Any, kwargs: Any) -> torch.Tensor:
        """A call after the direct loss was refused: the ELBO's own path (a subclass may have a
        leaner one)."""
        return super().differentiable_loss(model, guide, *args, **kwargs)

    def differentiable_loss(
        self, model: Any, guide: Any, *args: Any, **kwargs: Any
    ) -> torch.Tensor:
        if self._direct:
            loss, self.last_nll = self._direct(*args, **kwargs)
            return loss
        if self._direct is None:
            return self._checked_direct(model, guide, args, kwargs)
        return self._without_direct(model, guide, args, kwargs)


class RecordingMeanField_ELBO(ChecksDirectLoss, _RecordsNLL, TraceMeanField_ELBO):
    """``TraceMeanField_ELBO`` that records the NLL part (see ``_RecordsNLL``) and takes a
    method's plain-torch loss with closed-form KL terms (``fast_loss=``, checked on the first
    call as :class:`FastTrace_ELBO` checks its own).

    Example:
        >>> import pyro, pyro.distributions as dist
        >>> w = torch.tensor(0.5, requires_grad=True)
        >>> model = lambda: pyro.sample("w", dist.Normal(0.0, 2.0))
        >>> loss = RecordingMeanField_ELBO().differentiable_loss(
        ...     model, lambda: pyro.sample("w", dist.Normal(w, 1.0)))
        >>> round(float(loss.detach()), 4)  # KL(N(0.5, 1) || N(0, 2**2)) = log 2 + 1.25 / 8 - 1/2
        0.3494
    """

    _analytic_kl = True


class FastTrace_ELBO(ChecksDirectLoss, _RecordsNLL, Trace_ELBO):
    """``pyro.infer.Trace_ELBO`` with a fast path for fully reparameterized guides.

    Same constructor and results as ``Trace_ELBO``; see the module docstring. ``fast_loss``, if
    given, is the model's own plain-torch implementation of this loss (see
    ``ChecksDirectLoss``), checked on the first call and used from then on only if it agrees.

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

    def _without_direct(self, model: Any, guide: Any, args: Any, kwargs: Any) -> torch.Tensor:
        if self.fast:
            loss = self._fast_loss(model, guide, args, kwargs)
            if loss is not None:
                return loss
            self.fast = False
        loss = Trace_ELBO.differentiable_loss(self, model, guide, *args, **kwargs)
        self.fast = self._fast_candidate
        return loss


def _rng_state(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


def _set_rng_state(device: torch.device, state: tuple[torch.Tensor, torch.Tensor | None]) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


def _same_loss_and_grads(
    reference: torch.Tensor, candidate: torch.Tensor, params: list[torch.Tensor]
) -> bool:
    """Whether two losses agree in value and in their gradients w.r.t. ``params``.

    Both compute the same sums in a different order (a compiled loss in fused kernels of its
    own); in float32 that moves the last bits. Summing ``n`` terms in another order moves the
    sum by about ``eps · sqrt(n)`` of its scale (a random walk of roundings), and the loss sums
    a term per weight, so the values must agree to ``max(1e-5, 4 eps sqrt(P))`` relative (``P``
    the parameters' elements: 4.7e-4 at 784→400→400→10) and each gradient, the stricter test,
    to 1e-4 of its largest entry.
    """
    count = sum(p.numel() for p in params)
    rtol = max(1e-5, 4 * torch.finfo(reference.dtype).eps * math.sqrt(count))
    if not torch.allclose(reference.detach(), candidate.detach(), rtol=rtol, atol=1e-5):
        return False
    ref = torch.autograd.grad(reference, params, retain_graph=True, allow_unused=True)
    got = torch.autograd.grad(candidate, params, retain_graph=True, allow_unused=True)
    for a, b, p in zip(ref, got, params, strict=True):
        a = torch.zeros_like(p) if a is None else a
        b = torch.zeros_like(p) if b is None else b
        tol = 1e-4 * float(a.abs().max().clamp_min(1e-6)) if a.numel() else 0.0
        if not torch.allclose(a, b, rtol=1e-4, atol=tol):
            return False
    return True
