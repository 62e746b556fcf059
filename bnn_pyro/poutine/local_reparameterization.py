"""``LocalReparameterization``: an effect handler that samples pre-activations, not weights.

Under the handler, a :class:`bnn_pyro.nn.Linear`/:class:`~bnn_pyro.nn.Conv2d` whose weight was
drawn from a Normal *guide* site computes its output by local reparameterization or flipout
(:mod:`bnn_pyro.poutine.estimators`) instead of with the drawn weight. The model keeps its
weight sites, so the ELBO's KL part (exact or Monte Carlo) is unchanged; only the
expected-log-likelihood estimator changes, to one with the same expectation and less variance.

How the layer learns its weight's ``loc``/``scale``:
    an ELBO runs the model *replayed* against the guide's trace: every latent site of the model
    takes the guide's value, the very same tensor. When a model site is sampled, the handler
    finds the messenger that replayed it (Pyro's ``ReplayMessenger``, or the recorder of
    :class:`bnn_pyro.elbos.trace.FastTrace_ELBO`'s fast path) on Pyro's effect stack, reads the
    guide site's distribution there and, if it is a Normal (under ``Independent`` wrappers), records
    ``value -> (loc, scale)`` keyed by the identity of the value tensor. The layers offer each
    weight to the handler (:data:`bnn_pyro.nn.layers.LAYER_HOOKS`); a recorded weight is
    reparameterized, any other (a point estimate, a value from ``poutine.condition``,
    ``Predictive``, ``MCMC``) is used as it is. A weight whose guide site is not a Normal (e.g.
    ``AutoDiagonalNormal``'s joint latent, a ``Delta``) raises ``ValueError``: there is no
    ``scale`` to reparameterize with. Pyro's ``AutoNormal`` works: its weight is a view of the
    value of a Normal auxiliary site (same memory, same layout), which the handler finds.

The handler is entered inside the model (what ``VariationalBNN(local_reparameterization=...)``
does) or around the whole ELBO step; either way it sees the replaying messenger.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.distributions as td
import torch.nn as nn
from pyro.poutine.messenger import Messenger
from pyro.poutine.replay_messenger import ReplayMessenger
from pyro.poutine.runtime import _PYRO_STACK
from pyro.poutine.util import site_is_subsample
from torch.utils.weak import WeakIdKeyDictionary

from bnn_pyro.elbos.recorder import Recorder
from bnn_pyro.nn.layers import LAYER_HOOKS, sample_dims
from bnn_pyro.poutine.estimators import (
    flipout_conv2d,
    flipout_linear,
    local_reparam_conv2d,
    local_reparam_linear,
)

__all__ = ["LocalReparameterization", "ESTIMATORS"]

#: The estimators of :class:`LocalReparameterization`.
ESTIMATORS = ("local", "flipout")


class _GuideWeight(NamedTuple):
    name: str
    loc: torch.Tensor | None  # None: the guide site is not a Normal
    scale: torch.Tensor | None
    fn: str


def _normal(fn: Any) -> td.Normal | None:
    while isinstance(fn, td.Independent):
        fn = fn.base_dist
    return fn if isinstance(fn, td.Normal) else None


def _replayed_nodes(frame: Messenger) -> dict | None:
    if isinstance(frame, ReplayMessenger) and frame.trace is not None:
        return frame.trace.nodes
    if isinstance(frame, Recorder):
        return frame.replay
    return None


def _same_memory(a: Any, b: torch.Tensor) -> bool:
    """Whether ``a`` views exactly the elements of ``b`` (AutoNormal's ``Delta`` site returns an
    ``expand`` view of its Normal auxiliary sample: another tensor object, the same memory)."""
    return (
        isinstance(a, torch.Tensor)
        and a.data_ptr() == b.data_ptr()
        and a.shape == b.shape
        and a.stride() == b.stride()
        and a.dtype == b.dtype
        and a.device == b.device
    )


def _guide_site(name: str, value: torch.Tensor) -> dict | None:
    """The guide site (message) whose value the model site ``name`` took, or ``None``."""
    for frame in reversed(_PYRO_STACK):
        nodes = _replayed_nodes(frame)
        if not nodes:
            continue
        site = nodes.get(name)
        if site is None or site.get("value") is not value:
            continue
        if _normal(site["fn"]) is not None:
            return site
        for other in nodes.values():  # AutoNormal: a Normal auxiliary site, the same numbers
            if other.get("type") == "sample" and _same_memory(other.get("value"), value):
                if _normal(other["fn"]) is not None:
                    return other
        return site
    return None


class LocalReparameterization(Messenger):
    """Sample layer outputs by local reparameterization or flipout (see the module docstring).

    Args:
        estimator: ``"local"`` (Kingma et al. 2015: Gaussian pre-activations, fresh noise per
            example and unit) or ``"flipout"`` (Wen et al. 2018: the drawn perturbation with
            random signs per example).

    Attributes:
        num_reparameterized: how many layer calls the handler has reparameterized.

    Example:
        >>> import pyro, pyro.distributions as dist
        >>> from pyro.infer import Trace_ELBO
        >>> from bnn_pyro.guides import MeanFieldNormalGuide
        >>> from bnn_pyro.nn import mlp
        >>> from bnn_pyro.nn.pyro_net import make_bayesian_
        >>> from bnn_pyro.priors import IIDPrior
        >>> net = mlp(3, [8], 1)
        >>> _ = make_bayesian_(net, IIDPrior(dist.Normal(0.0, 1.0)))
        >>> def model(x, y):
        ...     f = net(x).squeeze(-1)
        ...     with pyro.plate("data", len(x)):
        ...         pyro.sample("y", dist.Normal(f, 1.0), obs=y)
        >>> guide = MeanFieldNormalGuide(model)
        >>> x, y = torch.randn(16, 3), torch.randn(16)
        >>> handler = LocalReparameterization()
        >>> with handler:
        ...     loss = Trace_ELBO().differentiable_loss(model, guide, x, y)
        >>> handler.num_reparameterized  # both linear layers
        2
    """

    def __init__(self, estimator: str = "local") -> None:
        super().__init__()
        if estimator not in ESTIMATORS:
            raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
        self.estimator = estimator
        self.num_reparameterized = 0
        self._weights: WeakIdKeyDictionary = WeakIdKeyDictionary()

    def __enter__(self) -> LocalReparameterization:
        out = super().__enter__()
        LAYER_HOOKS.append(self.forward_layer)
        return out

    def __exit__(self, *args: Any) -> Any:
        for i in range(len(LAYER_HOOKS) - 1, -1, -1):
            if getattr(LAYER_HOOKS[i], "__self__", None) is self:
                del LAYER_HOOKS[i]
                break
        return super().__exit__(*args)

    def _pyro_post_sample(self, msg: dict) -> None:
        value = msg["value"]
        if msg["is_observed"] or site_is_subsample(msg) or not isinstance(value, torch.Tensor):
            return
        site = _guide_site(msg["name"], value)
        if site is None:
            return  # not drawn from a guide (prior, condition, Predictive, MCMC): leave it
        normal = _normal(site["fn"])
        if normal is None:
            self._weights[value] = _GuideWeight(msg["name"], None, None, type(site["fn"]).__name__)
        else:
            self._weights[value] = _GuideWeight(msg["name"], normal.loc, normal.scale, "Normal")

    def _lookup(self, tensor: torch.Tensor | None) -> _GuideWeight | None:
        if tensor is None:
            return None
        entry = self._weights.get(tensor)
        if entry is not None and entry.loc is None:
            raise ValueError(
                f"local reparameterization needs the weight site {entry.name!r} drawn from a "
                f"Normal guide site, but the guide draws it from {entry.fn}. Use the mean-field "
                "guide ('meanfield') or AutoNormal ('normal'), or turn local_reparameterization "
                "off"
            )
        return entry

    def register_weight(
        self, value: torch.Tensor, name: str, loc: torch.Tensor, scale: torch.Tensor
    ) -> None:
        """Declare ``value`` (a drawn weight, as a layer will receive it) a draw of
        ``Normal(loc, scale)`` (each the shape of one draw), as the handler does itself for the
        guide's sites while it is on Pyro's stack. For a loss written in plain torch that feeds
        the layer hook directly (:meth:`forward_layer`, on ``bnn_pyro.nn.layers.LAYER_HOOKS``).

        Example:
            >>> handler = LocalReparameterization()
            >>> w, loc, scale = torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3)
            >>> handler.register_weight(w, "w", loc, scale)
            >>> handler.forward_layer(torch.ones(4, 3), w, None, None).shape
            torch.Size([4, 2])
            >>> handler.register_weight(w, "w", loc, scale.T)
            Traceback (most recent call last):
              ...
            ValueError: loc and scale of weight 'w' must have one draw's shape (2, 3), got ...
        """
        for label, t in (("value", value), ("loc", loc), ("scale", scale)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{label} of weight {name!r} must be a tensor, got "
                                f"{type(t).__name__}")  # fmt: skip
        if loc.shape != scale.shape or loc.shape != value.shape[value.dim() - loc.dim() :]:
            raise ValueError(
                f"loc and scale of weight {name!r} must have one draw's shape "
                f"{tuple(value.shape[value.dim() - loc.dim() :])}, got {tuple(loc.shape)} and "
                f"{tuple(scale.shape)}"
            )
        # (no check of the scale's values: it runs once per step, and a check would wait on
        # the device; the guides' scales are positive by construction)
        self._weights[value] = _GuideWeight(name, loc, scale, "Normal")

    def forward_layer(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        conv: nn.Conv2d | None,
    ) -> torch.Tensor | None:
        """The layer hook: the reparameterized output of ``x`` (``(..., N, in)``, or an image
        batch for ``conv``) through the drawn ``weight`` and ``bias``, or ``None`` for a weight
        drawn elsewhere (the layer then runs as usual)."""
        w = self._lookup(weight)
        if w is None:
            return None
        b = self._lookup(bias)
        self.num_reparameterized += 1
        if self.estimator == "flipout":
            if conv is None:
                return flipout_linear(x, w.loc, weight, bias)
            return flipout_conv2d(x, w.loc, weight, bias, conv)
        bias_loc, bias_scale = (bias, None) if b is None else (b.loc, b.scale)
        base_dim = 2 if conv is None else 4
        sample_shape = sample_dims(weight, base_dim).shape[:-base_dim]
        if conv is None:
            return local_reparam_linear(x, w.loc, w.scale, bias_loc, bias_scale, sample_shape)
        return local_reparam_conv2d(x, w.loc, w.scale, bias_loc, bias_scale, conv, sample_shape)
