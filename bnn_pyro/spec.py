"""``MethodSpec``: what a method declares about itself, once, in its own folder.

A method lives in ``bnn_pyro/methods/<folder>/``; its ``spec.py`` holds ``SPECS``, one
:class:`MethodSpec` per registry name it answers to. :func:`discover_specs` finds every such
folder (``pkgutil`` over ``bnn_pyro.methods``' path), so the registry (:func:`bnn_pyro.make`,
:data:`bnn_pyro.METHODS`), the command line's ``--method``, the scikit-learn estimators,
:func:`bnn_pyro.fit_stacked` and the benchmark harness all learn a new method from its folder
alone, with no edit elsewhere. A spec names its class and functions as ``"module:name"``
strings, so reading the specs imports no method class.

Example:
    >>> spec = next(s for s in discover_specs() if s.name == "lrt")
    >>> spec.load_class().__name__, dict(spec.defaults)
    ('VariationalBNN', {'local_reparameterization': True})
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = [
    "MethodSpec",
    "discover_specs",
    "load_object",
    "map_weight_decay",
    "method_folders",
    "normal_prior",
]

#: Where method folders are found (a test may extend this package's ``__path__``).
METHODS_PACKAGE = "bnn_pyro.methods"

Options = Callable[[Mapping[str, Any]], dict[str, Any]]
FitOptions = Callable[[Mapping[str, Any], int], dict[str, Any]]


def load_object(target: str | Any) -> Any:
    """``"package.module:name"`` imported; anything else returned as it is.

    Example:
        >>> load_object("math:pi") > 3
        True
    """
    if not isinstance(target, str):
        return target
    module, sep, name = target.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"expected 'module:name', got {target!r}")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class MethodSpec:
    """One registry name of a method and everything the rest of the package needs to know.

    Args:
        name: the registry key (``make(name, ...)``, ``--method name``).
        cls: the class, or ``"module:Class"``; ``cls.from_net(net, likelihood, **options)``
            builds it.
        summary: one line for tables and help texts.
        defaults: constructor options ``make`` passes unless the call overrides them.
        rank: the place in :data:`bnn_pyro.METHODS` (lower first; ties by name).
        estimator_options: the estimators' hyperparameters (``prior_scale``, ``dropout_rate``,
            ``ensemble_size``, ...) → constructor options; ``None``: none beyond
            ``num_samples``.
        estimator_fit: hyperparameters and the training set size → ``fit`` options beyond the
            shared ones; ``None``: none.
        scalar_noise: whether a regression noise is one float for every target column (the
            Gaussian likelihood's scale) rather than a per-column ``noise_scale``.
        own_samples: whether the method's predictive samples are fixed by its construction (an
            ensemble's members), so the estimators pass no ``num_samples``.
        dropout_net: whether the estimators' MLP carries dropout layers (at their
            ``dropout_rate``; a net with no hidden layer is refused).
        stacked_fit: ``"module:function"`` that trains K models of this class as one
            (``fn(models, X, y, *, seeds, **options)``), or ``None``: :func:`bnn_pyro.fit_stacked`
            refuses the method with a clear error.
        why_not_stacked: ``"module:function"`` that names why K built models of this class
            cannot train as one (``fn(models) -> str | None``, ``None``: they can), for a
            caller that would rather fit them one by one than have ``fit_stacked`` refuse
            (:func:`bnn_pyro.stacking.why_not_stacked`); ``None``: any models that
            ``stacked_fit`` takes.
        unstacked: for a method with no ``stacked_fit``, why not and what to do instead, the
            end of :func:`bnn_pyro.fit_stacked`'s refusal.
        classifies: whether the method takes a classifier's likelihood (``Categorical``,
            ``Bernoulli``); a regression-only method's constructor refuses one, and the
            estimators' classifier refuses the method before building it.
        measured_step: whether ``fit(lr=None)`` measures the step on the posterior (SG-MCMC),
            so that the estimators and the command line pass ``lr=None`` and the whole data
            set per step unless told otherwise (an optimiser's learning rate and minibatch
            size are no default for it).

    Example:
        >>> MethodSpec("toy", "bnn_pyro.methods.swag.swag:SWAG", "SWAG again").rank
        100
    """

    name: str
    cls: str | type
    summary: str
    defaults: Mapping[str, Any] = field(default_factory=dict)
    rank: int = 100
    estimator_options: Options | None = None
    estimator_fit: FitOptions | None = None
    scalar_noise: bool = False
    own_samples: bool = False
    dropout_net: bool = False
    stacked_fit: str | None = None
    why_not_stacked: str | None = None
    unstacked: str | None = None
    measured_step: bool = False
    classifies: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"a method name must be an identifier, got {self.name!r}")
        if not isinstance(self.cls, (str, type)):
            raise TypeError(f"cls must be a class or 'module:Class', got {self.cls!r}")
        object.__setattr__(self, "defaults", MappingProxyType(dict(self.defaults)))

    def load_class(self) -> type:
        """The method class (imported on first use)."""
        return load_object(self.cls)

    def options_for(self, hyperparameters: Mapping[str, Any]) -> dict[str, Any]:
        """The constructor options for the estimators' ``hyperparameters``."""
        return {} if self.estimator_options is None else self.estimator_options(hyperparameters)

    def fit_options_for(self, hyperparameters: Mapping[str, Any], n: int) -> dict[str, Any]:
        """The extra ``fit`` options for the estimators' ``hyperparameters`` and ``n`` rows."""
        return {} if self.estimator_fit is None else self.estimator_fit(hyperparameters, n)


def map_weight_decay(hyperparameters: Mapping[str, Any], n: int) -> dict[str, Any]:
    """``fit`` options of a method trained to a point estimate: the prior ``N(0,
    prior_scale²)`` as an L2 penalty on the mean loss over ``n`` rows.

    Example:
        >>> map_weight_decay({"prior_scale": 0.5}, 100)
        {'weight_decay': 0.04}
    """
    return {"weight_decay": 1.0 / (hyperparameters["prior_scale"] ** 2 * n)}


def normal_prior(hyperparameters: Mapping[str, Any]) -> dict[str, Any]:
    """Constructor options of a method with a Pyro prior: ``IIDPrior(Normal(0, prior_scale))``
    (the estimators' ``prior_scale``). Pyro and the priors are imported here, on use, so that
    reading the specs (the command line's ``--method`` names) imports neither.

    Example:
        >>> float(normal_prior({"prior_scale": 0.5})["prior"].base.scale)
        0.5
    """
    import pyro.distributions as dist

    from bnn_pyro.priors import IIDPrior

    return {"prior": IIDPrior(dist.Normal(0.0, hyperparameters["prior_scale"]))}


def method_folders(package: str = METHODS_PACKAGE) -> tuple[tuple[str, str], ...]:
    """``(path entry, folder)`` of every subpackage of ``package``: what :func:`discover_specs`
    reads (cheap, so a caller can tell when a folder was added).

    Example:
        >>> "vi" in {folder for _, folder in method_folders()}
        True
    """
    root = importlib.import_module(package)
    return tuple(
        (str(getattr(info.module_finder, "path", "")), info.name)
        for info in pkgutil.iter_modules(root.__path__)
        if info.ispkg
    )


def discover_specs(package: str = METHODS_PACKAGE) -> list[MethodSpec]:
    """Every ``SPECS`` entry of the ``spec.py`` of each folder under ``package``, ordered by
    ``(rank, name)``.

    Raises:
        ValueError: two specs claim one name, or a ``SPECS`` entry is not a MethodSpec.
    """
    found: dict[str, MethodSpec] = {}
    for folder in sorted({name for _, name in method_folders(package)}):
        if importlib.util.find_spec(f"{package}.{folder}.spec") is None:
            continue
        module = importlib.import_module(f"{package}.{folder}.spec")
        for spec in getattr(module, "SPECS", ()):
            if not isinstance(spec, MethodSpec):
                raise ValueError(f"{module.__name__}.SPECS holds {spec!r}, not a MethodSpec")
            if spec.name in found:
                raise ValueError(f"two methods claim the name {spec.name!r}")
            found[spec.name] = spec
    return sorted(found.values(), key=lambda s: (s.rank, s.name))
