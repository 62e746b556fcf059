"""``Prior``, the base of every prior: which parameters of a net are Bayesian, and the
distribution of each weight site.

A prior answers two questions for every parameter of the net:

* :meth:`Prior.is_bayesian` — is it a random weight (a ``pyro.sample`` site) or a point estimate?
  By default every parameter of a linear or convolutional layer is Bayesian and every other
  parameter (BatchNorm, LayerNorm, embeddings) stays a point estimate. ``include``/``exclude``
  take shell-style patterns over the parameter names (``"0.weight"``, ``"head.*"``), ``types``
  the layer classes.
* :meth:`Prior.site_distribution` — the distribution of that site, built on the module's current
  device and dtype (so ``bnn.to("cuda")`` moves the prior too) and cached per device.

Both :meth:`Prior.distribution` and :meth:`Prior.site_distribution` may take the keyword
``name``, the weight site's dotted name (``"net.0.weight"``), so that a prior can set each layer
apart without marking the modules; a prior whose methods do not take it is called without it
(:func:`takes_name`). A prior may have latent sites of its own: its ``distribution`` (or
``site_distribution``) calls ``pyro.sample`` for them, named after the weight site with a
suffix joined by ``_``, not ``.`` (the hierarchical
:class:`~bnn_pyro.priors.HierarchicalNormalPrior` samples ``"net.0.weight_prior_scale"``; Pyro's
``AutoNormal`` nests its parameters by the dots of the site names, and a site under
``"net.0.weight."`` would nest in the weight's), and sets ``cached = False`` (a fresh draw on
every run of the model). The guide learns those sites beside the weights; the net, evaluated
on given weights, never draws them.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from fnmatch import fnmatchcase
from typing import Any

import pyro.distributions as dist
import pyro.poutine as poutine
import torch
import torch.nn as nn
from pyro.poutine.util import site_is_subsample

__all__ = ["DEFAULT_BAYESIAN_TYPES", "Prior", "prior_from_config", "takes_name"]

#: Layer types whose parameters are Bayesian unless a prior says otherwise.
DEFAULT_BAYESIAN_TYPES: tuple[type[nn.Module], ...] = (
    nn.Linear,
    nn.Conv1d,
    nn.Conv2d,
    nn.Conv3d,
)

_CACHE = "_bnn_prior_cache"
_TAKES_NAME: dict[Callable[..., Any], bool] = {}


def takes_name(method: Callable[..., Any]) -> bool:
    """Whether ``method`` (a prior's ``distribution`` or ``site_distribution``) takes the
    keyword ``name``: priors written before the keyword existed are called without it.

    Args:
        method: a function or bound method.

    Example:
        >>> from bnn_pyro.priors import IIDPrior
        >>> takes_name(Prior.site_distribution), takes_name(IIDPrior.distribution)
        (True, False)
    """
    fn = getattr(method, "__func__", method)
    known = _TAKES_NAME.get(fn)
    if known is None:
        params = inspect.signature(fn).parameters.values()
        known = any(
            p.kind is p.VAR_KEYWORD
            or (p.name == "name" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
            for p in params
        )
        _TAKES_NAME[fn] = known
    return known


def _patterns(name: str, value: str | Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    try:
        items = tuple(value)
    except TypeError:
        raise TypeError(f"{name} must be a pattern or a list of patterns, got {value!r}") from None
    if not all(isinstance(v, str) for v in items):
        raise TypeError(f"{name} must contain strings, got {items!r}")
    return items


class Prior(ABC):
    """Base class: selects the Bayesian parameters and builds their distributions.

    Args:
        include: patterns (``fnmatch``) of parameter names that may be Bayesian, e.g.
            ``"head.*"`` for a last-layer BNN. Names are ``"<module path>.<param>"`` as in
            ``net.named_parameters()``.
        exclude: patterns of parameter names kept as point estimates, e.g. ``"*.bias"``.
        types: layer classes whose parameters may be Bayesian.

    Example:
        >>> from bnn_pyro.priors import IIDPrior
        >>> prior = IIDPrior(dist.Normal(0.0, 1.0), exclude="*.bias")
        >>> [prior.is_bayesian("0", nn.Linear(2, 3), p) for p in ("weight", "bias")]
        [True, False]
    """

    _subclasses: dict[str, type[Prior]] = {}
    #: Whether :meth:`site_distribution` may cache the distributions it builds.
    cached = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        Prior._subclasses[cls.__name__] = cls

    @classmethod
    def _from_config(cls, own: dict[str, Any], selection: dict[str, Any]) -> Prior:
        """The inverse of :meth:`config` for this class (``own``: its own settings)."""
        return cls(**own, **selection)

    def __init__(
        self,
        *,
        include: str | Iterable[str] = "*",
        exclude: str | Iterable[str] = (),
        types: Iterable[type[nn.Module]] = DEFAULT_BAYESIAN_TYPES,
    ) -> None:
        self.include = _patterns("include", include)
        self.exclude = _patterns("exclude", exclude)
        types = tuple(types)
        if not all(isinstance(t, type) and issubclass(t, nn.Module) for t in types):
            raise TypeError(f"types must be nn.Module subclasses, got {types!r}")
        self.types = types

    def is_bayesian(self, module_name: str, module: nn.Module, param_name: str) -> bool:
        """Whether ``module.<param_name>`` becomes a random weight site.

        Args:
            module_name: the module's dotted path in the net (``""`` for the root).
            module: the module owning the parameter.
            param_name: the parameter's attribute name (``"weight"``).
        """
        full = f"{module_name}.{param_name}" if module_name else param_name
        return (
            isinstance(module, self.types)
            and any(fnmatchcase(full, p) for p in self.include)
            and not any(fnmatchcase(full, p) for p in self.exclude)
        )

    def check_site_names(self, names: list[str]) -> None:
        """Called once with the names of all the weight sites of a net (``"net.0.weight"``, ...)
        before :func:`~bnn_pyro.nn.pyro_net.make_bayesian_` converts it: a prior whose settings
        name sites raises ``ValueError`` here for a setting that names none. Default: no check."""
        return None

    def bound_to(self, net: nn.Module) -> Prior:
        """The prior a model of ``net`` uses: ``self`` for a prior without state; a prior with
        learnable parameters returns a fresh copy holding them (so models never share them)."""
        return self

    @abstractmethod
    def distribution(
        self,
        module: nn.Module,
        param_name: str,
        device: torch.device,
        dtype: torch.dtype,
        *,
        name: str | None = None,
    ) -> dist.TorchDistribution:
        """The per-element distribution of ``module.<param_name>`` (batch shape broadcastable
        to the parameter's shape), built on ``device``/``dtype``. ``name``: the weight site's
        dotted name (``"net.0.weight"``); an override may leave the keyword out."""

    def site_distribution(
        self,
        module: nn.Module,
        param_name: str,
        shape: torch.Size,
        device: torch.device,
        dtype: torch.dtype,
        *,
        name: str | None = None,
    ) -> dist.TorchDistribution:
        """The site distribution: :meth:`distribution` expanded to ``shape``, all dims as event.

        Cached on the module per ``(param_name, name, device, dtype)`` unless ``cached`` is
        ``False`` (learnable parameters or latent sites of the prior's own: a fresh one per
        call, so the ELBO's gradient reaches them and each run of the model draws its latents).

        Args:
            module, param_name: the parameter ``module.<param_name>``.
            shape: the parameter's shape.
            device, dtype: where the distribution's tensors live.
            name: the weight site's dotted name (``"net.0.weight"``), passed on to
                :meth:`distribution` when it takes the keyword.

        Returns:
            A distribution with ``batch_shape == ()`` and ``event_shape == shape``.

        Raises:
            ValueError: a prior with ``cached = True`` samples latent sites (a cached
                distribution would hold one draw of them for good).
        """
        cache = module.__dict__.setdefault(_CACHE, {}) if self.cached else {}
        key = (param_name, name, device, dtype)
        site = cache.get(key)
        if site is None:
            named = {"name": name} if takes_name(type(self).distribution) else {}
            if self.cached:  # built once: it must not draw anything
                with poutine.trace() as tracer:
                    base = self.distribution(module, param_name, device, dtype, **named)
                _refuse_cached_latents(self, tracer.trace)
            else:
                base = self.distribution(module, param_name, device, dtype, **named)
            site = base.expand(shape).to_event(len(shape))
            cache[key] = site
        return site

    def _selection_config(self) -> dict[str, Any]:
        default_types = self.types == DEFAULT_BAYESIAN_TYPES
        if not default_types and not all(t.__module__.startswith("torch.nn") for t in self.types):
            raise ValueError("only torch.nn layer types can be saved in a checkpoint")
        return {
            "include": list(self.include),
            "exclude": list(self.exclude),
            "types": None if default_types else [t.__name__ for t in self.types],
        }

    def config(self) -> dict[str, Any]:
        """A ``torch.load(weights_only=True)``-safe description, inverse of
        :func:`prior_from_config`."""
        return {"type": type(self).__name__, **self._selection_config(), **self._own_config()}

    def _own_config(self) -> dict[str, Any]:
        """This prior's own constructor settings (beyond the selection), which a checkpoint
        saves: none for a prior that keeps ``Prior``'s constructor; a subclass with settings of
        its own returns them (``weights_only``-safe values) so that ``bp.load`` rebuilds it."""
        if type(self).__init__ is not Prior.__init__:
            raise NotImplementedError(
                f"{type(self).__name__} has a constructor of its own: define _own_config() "
                "returning its settings, so that a saved model rebuilds the same prior"
            )
        return {}

    def __repr__(self) -> str:
        try:
            own = ", ".join(f"{k}={v!r}" for k, v in self._own_config().items())
        except NotImplementedError:
            own = "..."
        return f"{type(self).__name__}({own})"


def _refuse_cached_latents(prior: Prior, trace: Any) -> None:
    drawn = [
        n
        for n, site in trace.nodes.items()
        if site["type"] == "sample" and not site_is_subsample(site)
    ]
    if drawn:
        raise ValueError(
            f"{type(prior).__name__}.distribution samples the latent site(s) {drawn}, but the "
            "prior caches its distributions: set cached = False on the class"
        )


def prior_from_config(config: dict[str, Any]) -> Prior:
    """Rebuild a prior from :meth:`Prior.config` (used when loading a checkpoint).

    The ``type`` names a :class:`Prior` subclass: every subclass is registered by its class
    name when it is defined, so a user's own prior reloads once its module is imported.

    Example:
        >>> from bnn_pyro.priors import LayerwiseNormalPrior
        >>> prior_from_config(LayerwiseNormalPrior("xavier").config())
        LayerwiseNormalPrior(method='xavier', gain=1.0)
    """
    config = dict(config)
    kind = config.pop("type", None)
    types = config.pop("types", None)
    selection = {"include": config.pop("include", "*"), "exclude": config.pop("exclude", ())}
    if types is not None:
        selection["types"] = tuple(getattr(nn, t) for t in types)
    if kind not in Prior._subclasses:
        raise ValueError(
            f"unknown prior type {kind!r} in checkpoint (known: {sorted(Prior._subclasses)}); "
            "import the module that defines it before loading"
        )
    return Prior._subclasses[kind]._from_config(config, selection)
