"""Priors: which parameters of a net are Bayesian, and the distribution of each weight site.

A prior answers two questions for every parameter of the net:

* :meth:`Prior.is_bayesian` — is it a random weight (a ``pyro.sample`` site) or a point estimate?
  By default every parameter of a linear or convolutional layer is Bayesian and every other
  parameter (BatchNorm, LayerNorm, embeddings) stays a point estimate. ``include``/``exclude``
  take shell-style patterns over the parameter names (``"0.weight"``, ``"head.*"``), ``types``
  the layer classes.
* :meth:`Prior.site_distribution` — the distribution of that site, built on the module's current
  device and dtype (so ``bnn.to("cuda")`` moves the prior too) and cached per device.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable
from fnmatch import fnmatchcase
from typing import Any

import pyro.distributions as dist
import torch
import torch.nn as nn
from pyro.distributions import constraints
from pyro.distributions.torch_distribution import TorchDistribution

from bnn_pyro.weight_distributions import ScaleMixtureNormal, SharedNormal

__all__ = [
    "Prior",
    "IIDPrior",
    "LayerwiseNormalPrior",
    "ScaleMixturePrior",
    "ScaleMixtureNormal",
    "SharedNormal",
    "DEFAULT_BAYESIAN_TYPES",
    "prior_from_config",
]

#: Layer types whose parameters are Bayesian unless a prior says otherwise.
DEFAULT_BAYESIAN_TYPES: tuple[type[nn.Module], ...] = (
    nn.Linear,
    nn.Conv1d,
    nn.Conv2d,
    nn.Conv3d,
)

_CACHE = "_bnn_prior_cache"


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


def _positive(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a positive float, got {type(value).__name__} ({value!r})")
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be positive and finite, got {value}")
    return float(value)


class Prior(ABC):
    """Base class: selects the Bayesian parameters and builds their distributions.

    Args:
        include: patterns (``fnmatch``) of parameter names that may be Bayesian, e.g.
            ``"head.*"`` for a last-layer BNN. Names are ``"<module path>.<param>"`` as in
            ``net.named_parameters()``.
        exclude: patterns of parameter names kept as point estimates, e.g. ``"*.bias"``.
        types: layer classes whose parameters may be Bayesian.

    Example:
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

    def bound_to(self, net: nn.Module) -> Prior:
        """The prior a model of ``net`` uses: ``self`` for a prior without state; a prior with
        learnable parameters returns a fresh copy holding them (so models never share them)."""
        return self

    @abstractmethod
    def distribution(
        self, module: nn.Module, param_name: str, device: torch.device, dtype: torch.dtype
    ) -> dist.TorchDistribution:
        """The per-element distribution of ``module.<param_name>`` (batch shape broadcastable
        to the parameter's shape), built on ``device``/``dtype``."""

    def site_distribution(
        self,
        module: nn.Module,
        param_name: str,
        shape: torch.Size,
        device: torch.device,
        dtype: torch.dtype,
    ) -> dist.TorchDistribution:
        """The site distribution: :meth:`distribution` expanded to ``shape``, all dims as event.

        Cached on the module per ``(param_name, device, dtype)`` unless ``cached`` is ``False``
        (learnable parameters: a fresh one per call, so the ELBO's gradient reaches them).

        Returns:
            A distribution with ``batch_shape == ()`` and ``event_shape == shape``.
        """
        cache = module.__dict__.setdefault(_CACHE, {}) if self.cached else {}
        key = (param_name, device, dtype)
        site = cache.get(key)
        if site is None:
            base = self.distribution(module, param_name, device, dtype)
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

    @abstractmethod
    def _own_config(self) -> dict[str, Any]: ...

    def __repr__(self) -> str:
        own = ", ".join(f"{k}={v!r}" for k, v in self._own_config().items())
        return f"{type(self).__name__}({own})"


def _rebuild(d: TorchDistribution, device: torch.device, dtype: torch.dtype) -> TorchDistribution:
    """A copy of a scalar-parameter distribution on another device/dtype."""
    try:
        params = {k: getattr(d, k) for k in d.arg_constraints}
        moved = {k: torch.as_tensor(v, device=device) for k, v in params.items()}
        moved = {k: v.to(dtype) if v.is_floating_point() else v for k, v in moved.items()}
        return type(d)(**moved, validate_args=False)
    except (TypeError, AttributeError) as err:
        raise TypeError(
            f"cannot rebuild {type(d).__name__} from its arg_constraints {list(d.arg_constraints)}"
            f" on {device}; use a distribution whose constructor takes them ({err})"
        ) from err


class IIDPrior(Prior):
    """The same distribution, independently, for every element of every Bayesian parameter.

    Args:
        distribution: a univariate Pyro distribution with scalar parameters, e.g.
            ``dist.Normal(0., 1.)``, ``dist.Laplace(0., 0.5)``, ``dist.StudentT(3., 0., 1.)``.
        **selection: ``include``/``exclude``/``types``, see :class:`Prior`.

    Example:
        >>> import pyro.distributions as dist
        >>> prior = IIDPrior(dist.Normal(0., 1.), exclude="*.bias")
        >>> prior.is_bayesian("0", nn.Linear(2, 3), "bias")
        False
    """

    def __init__(self, distribution: TorchDistribution, **selection: Any) -> None:
        super().__init__(**selection)
        if not isinstance(distribution, torch.distributions.Distribution):
            raise TypeError(
                f"distribution must be a torch/pyro Distribution, got {type(distribution).__name__}"
            )
        if distribution.event_shape != () or distribution.batch_shape != ():
            raise ValueError(
                "distribution must be univariate with scalar parameters (batch_shape=(), "
                f"event_shape=()), got batch_shape={tuple(distribution.batch_shape)}, "
                f"event_shape={tuple(distribution.event_shape)}"
            )
        bad = {
            k: float(getattr(distribution, k))
            for k in distribution.arg_constraints
            if isinstance(getattr(distribution, k, None), torch.Tensor)
            and not bool(torch.isfinite(getattr(distribution, k)).all())
        }
        if bad:
            raise ValueError(f"distribution must have finite parameters, got {bad}")
        if distribution.support is not constraints.real:
            raise ValueError(
                f"a weight prior needs support on the real line, got {distribution.support}"
            )
        self.base = distribution

    def distribution(
        self, module: nn.Module, param_name: str, device: torch.device, dtype: torch.dtype
    ) -> TorchDistribution:
        if type(self.base) is dist.Normal:
            return SharedNormal(float(self.base.loc), float(self.base.scale), device, dtype)
        return _rebuild(self.base, device, dtype)

    @classmethod
    def _from_config(cls, own: dict[str, Any], selection: dict[str, Any]) -> Prior:
        name = own["distribution"]
        dist_cls = ScaleMixtureNormal if name == "ScaleMixtureNormal" else getattr(dist, name, None)
        if dist_cls is None:
            raise ValueError(f"unknown prior distribution {name!r} in checkpoint")
        return cls(dist_cls(**own["params"]), **selection)

    def _own_config(self) -> dict[str, Any]:
        return {
            "distribution": type(self.base).__name__,
            "params": {
                k: torch.as_tensor(getattr(self.base, k)) for k in self.base.arg_constraints
            },
        }

    def __repr__(self) -> str:
        return f"IIDPrior({self.base!r})"


def _fans(module: nn.Module) -> tuple[int, int]:
    if isinstance(module, nn.Linear):
        return module.in_features, module.out_features
    if isinstance(module, nn.modules.conv._ConvNd):
        field = math.prod(module.kernel_size)
        return (
            module.in_channels // module.groups * field,
            module.out_channels // module.groups * field,
        )
    raise TypeError(
        f"cannot tell the fan-in of a {type(module).__name__}; LayerwiseNormalPrior supports "
        "linear and convolutional layers"
    )


class LayerwiseNormalPrior(Prior):
    """Zero-mean Normal priors whose standard deviation depends on the layer's fan-in.

    Args:
        method: ``"radford"`` (std ``1/sqrt(fan_in)``, Neal 1996), ``"xavier"``
            (``sqrt(2/(fan_in+fan_out))``) or ``"kaiming"`` (``sqrt(2/fan_in)``).
        gain: multiplies the standard deviation.
        **selection: ``include``/``exclude``/``types``, see :class:`Prior`.

    The same standard deviation is used for a layer's weight and bias.

    Example:
        >>> prior = LayerwiseNormalPrior("radford")
        >>> prior.std(nn.Linear(100, 3))
        0.1
    """

    METHODS = ("radford", "xavier", "kaiming")

    def __init__(self, method: str = "radford", gain: float = 1.0, **selection: Any) -> None:
        super().__init__(**selection)
        if method not in self.METHODS:
            raise ValueError(f"method must be one of {self.METHODS}, got {method!r}")
        self.method = method
        self.gain = _positive("gain", gain)

    def std(self, module: nn.Module) -> float:
        """The prior standard deviation of ``module``'s parameters."""
        fan_in, fan_out = _fans(module)
        var = {"radford": 1.0 / fan_in, "xavier": 2.0 / (fan_in + fan_out), "kaiming": 2.0 / fan_in}
        return self.gain * math.sqrt(var[self.method])

    def distribution(
        self, module: nn.Module, param_name: str, device: torch.device, dtype: torch.dtype
    ) -> TorchDistribution:
        return SharedNormal(0.0, self.std(module), device, dtype)

    def _own_config(self) -> dict[str, Any]:
        return {"method": self.method, "gain": self.gain}


class ScaleMixturePrior(Prior):
    """Blundell et al.'s (2015) scale-mixture prior on every Bayesian weight.

    Args:
        mixture_weight: ``pi`` in (0, 1); the paper searches {1/4, 1/2, 3/4}.
        scale1: the wide component; the paper searches ``exp(-{0, 1, 2})``.
        scale2: the narrow component; the paper searches ``exp(-{6, 7, 8})``.
        **selection: ``include``/``exclude``/``types``, see :class:`Prior`.

    Its KL to a Normal guide has no closed form: ``TraceMeanField_ELBO`` falls back to a Monte
    Carlo estimate for these sites.

    Example:
        >>> ScaleMixturePrior(0.5, 1.0, math.exp(-6))
        ScaleMixturePrior(mixture_weight=0.5, scale1=1.0, scale2=0.0024787521766663585)
    """

    def __init__(
        self,
        mixture_weight: float = 0.5,
        scale1: float = 1.0,
        scale2: float = math.exp(-6),
        **selection: Any,
    ) -> None:
        super().__init__(**selection)
        if not (isinstance(mixture_weight, (int, float)) and 0 < mixture_weight < 1):
            raise ValueError(f"mixture_weight must be in (0, 1), got {mixture_weight!r}")
        self.mixture_weight = float(mixture_weight)
        self.scale1 = _positive("scale1", scale1)
        self.scale2 = _positive("scale2", scale2)

    def distribution(
        self, module: nn.Module, param_name: str, device: torch.device, dtype: torch.dtype
    ) -> TorchDistribution:
        t = torch.tensor(
            [self.mixture_weight, self.scale1, self.scale2], device=device, dtype=dtype
        )
        return ScaleMixtureNormal(t[0], t[1], t[2], validate_args=False)

    def _own_config(self) -> dict[str, Any]:
        return {"mixture_weight": self.mixture_weight, "scale1": self.scale1, "scale2": self.scale2}


def prior_from_config(config: dict[str, Any]) -> Prior:
    """Rebuild a prior from :meth:`Prior.config` (used when loading a checkpoint).

    The ``type`` names a :class:`Prior` subclass: every subclass is registered by its class
    name when it is defined, so a user's own prior reloads once its module is imported.

    Example:
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
