"""``build_guide``: a guide from a name, an autoguide class or a factory ``model -> guide``."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn as nn
from pyro.infer import autoguide

from bnn_pyro.guides.autoguide import AutoGuideWrapper
from bnn_pyro.guides.mean_field import MeanFieldNormalGuide
from bnn_pyro.nn.param_scope import ParamScope

__all__ = ["GUIDE_NAMES", "build_guide"]


GUIDE_NAMES = {
    "meanfield": None,
    "normal": autoguide.AutoNormal,
    "diagonal": autoguide.AutoDiagonalNormal,
    "lowrank": autoguide.AutoLowRankMultivariateNormal,
    "delta": autoguide.AutoDelta,
}


_LAPLACE = (
    "AutoLaplaceApproximation trains a MAP point (its Laplace step is a separate call that "
    "fit does not make): use bp.make('laplace', net, likelihood) for a Laplace posterior, or "
    "guide='delta' for the MAP"
)


def _is_autoguide_class(spec: object) -> bool:
    return isinstance(spec, type) and issubclass(spec, autoguide.AutoGuide)


def build_guide(
    spec: str | type | Callable[[Callable], Any],
    model: Callable[..., Any],
    init_loc: Mapping[str, torch.Tensor],
    init_scale: float,
    scope: ParamScope | None = None,
) -> nn.Module:
    """Make the guide for ``model`` from a name, an autoguide class or a factory.

    Args:
        spec: ``"meanfield"`` (:class:`MeanFieldNormalGuide`), ``"normal"``, ``"diagonal"``,
            ``"lowrank"``, ``"delta"``, an ``AutoGuide`` subclass, a ``functools.partial`` of
            one with options (``partial(AutoLowRankMultivariateNormal, rank=10)``), or a
            callable ``model -> guide`` (which then sets its own initial values).
        model: the Pyro model.
        init_loc: initial values per site (the net's own init), also given to autoguides
            through ``init_to_value``.
        init_scale: initial standard deviation (guides that take one).
        scope: the model's own param store, where every guide but the mean-field one runs
            (:class:`~bnn_pyro.nn.param_scope.ParamScope`; default: one of its own).

    Returns:
        An ``nn.Module`` guide accepting the model's ``(x, y, dataset_size=, kl_weight=)``.

    Example:
        >>> import pyro
        >>> def model(x, y=None):
        ...     pyro.sample("w", dist.Normal(torch.zeros(2), 1.0).to_event(1))
        >>> type(build_guide("meanfield", model, {}, 0.1)).__name__
        'MeanFieldNormalGuide'
        >>> type(build_guide("lowrank", model, {}, 0.1).autoguide).__name__
        'AutoLowRankMultivariateNormal'
    """
    if isinstance(spec, str):
        if spec not in GUIDE_NAMES:
            raise ValueError(f"guide must be one of {sorted(GUIDE_NAMES)}, got {spec!r}")
        spec = GUIDE_NAMES[spec] or MeanFieldNormalGuide
    if spec is MeanFieldNormalGuide:
        return MeanFieldNormalGuide(model, init_loc=init_loc, init_scale=init_scale)
    init_fn = autoguide.initialization.init_to_value(
        values=dict(init_loc), fallback=autoguide.initialization.init_to_median
    )
    options: dict[str, Any] = {}
    if isinstance(spec, functools.partial) and _is_autoguide_class(spec.func):
        # functools.partial(AutoLowRankMultivariateNormal, rank=10): the options, plus the
        # library's initial values unless the partial sets them itself
        spec, options = spec.func, dict(spec.keywords)
    if _is_autoguide_class(spec):
        if issubclass(spec, autoguide.AutoLaplaceApproximation):
            raise ValueError(_LAPLACE)
        accepted = inspect.signature(spec.__init__).parameters
        kwargs: dict[str, Any] = {}
        # AutoIAFNormal takes init_loc_fn but ignores it, with a FutureWarning to the user
        if "init_loc_fn" in accepted and not issubclass(spec, autoguide.AutoIAFNormal):
            kwargs["init_loc_fn"] = init_fn
        if "init_scale" in accepted:
            kwargs["init_scale"] = init_scale
        return AutoGuideWrapper(spec(model, **{**kwargs, **options}), scope)
    if isinstance(spec, nn.Module):
        raise TypeError(
            f"guide= takes a class or a factory, not a built {type(spec).__name__}: it would "
            "be another model's guide. Pass the class (guide=AutoNormal) or a factory "
            f"(guide=lambda model: {type(spec).__name__}(model, ...))"
        )
    if callable(spec):
        guide = spec(model)
        if isinstance(guide, MeanFieldNormalGuide):
            return guide
        if isinstance(guide, autoguide.AutoLaplaceApproximation):
            raise ValueError(_LAPLACE)
        if not callable(guide) or isinstance(guide, Mapping):
            raise TypeError(
                "the guide factory must return a guide (an autoguide, a PyroModule or a "
                f"function of (x, y) calling pyro.sample), got {type(guide).__name__}"
            )
        return AutoGuideWrapper(guide, scope)
    raise TypeError(f"guide must be a name, an AutoGuide class or a factory, got {spec!r}")
