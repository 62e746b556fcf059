"""What the priors with latent scales share: the check of a scale's prior, its checkpoint form,
the weight site's name they require, and the Normal of a weight tensor given its sampled
scale (which carries the dims of any plate it was drawn under)."""

from __future__ import annotations

from typing import Any

import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.distributions.torch_distribution import TorchDistribution

from bnn_pyro.weight_distributions import rebuild_on

__all__ = [
    "check_scale_prior",
    "normal_given_scale",
    "require_name",
    "scale_prior_config",
    "scale_prior_from_config",
]

_EXAMPLES = "e.g. dist.HalfCauchy(1.0), dist.HalfNormal(1.0), dist.LogNormal(0.0, 1.0)"


def _positive(support: Any) -> bool:
    kinds = (constraints.greater_than, constraints.greater_than_eq)
    return isinstance(support, kinds) and support.lower_bound == 0  # (both kinds have one)


def check_scale_prior(label: str, d: Any) -> TorchDistribution:
    """``d`` if it can be the prior of a scale: a univariate Pyro/torch distribution with
    scalar, finite parameters, support on the positive reals, and a class of
    ``pyro.distributions`` (so that a checkpoint can rebuild it); else raise naming ``label``.

    Example:
        >>> check_scale_prior("scale_prior", dist.HalfCauchy(1.0))
        HalfCauchy()
    """
    if not isinstance(d, torch.distributions.Distribution):
        raise TypeError(
            f"{label} must be a distribution with positive support ({_EXAMPLES}), got "
            f"{type(d).__name__}"
        )
    if d.batch_shape != () or d.event_shape != ():
        raise ValueError(
            f"{label} must be univariate with scalar parameters, got batch_shape="
            f"{tuple(d.batch_shape)}, event_shape={tuple(d.event_shape)}"
        )
    if not _positive(d.support):
        raise ValueError(
            f"{label} must have support on the positive reals ({_EXAMPLES}), got {d.support}"
        )
    params = {k: getattr(d, k, None) for k in d.arg_constraints}
    bad = {
        k: float(v)
        for k, v in params.items()
        if isinstance(v, torch.Tensor)
        and not (bool(torch.isfinite(v).all()) and bool(d.arg_constraints[k].check(v).all()))
    }
    if bad:
        raise ValueError(f"{label} has parameters that are not finite or out of range: {bad}")
    if getattr(dist, type(d).__name__, None) is None:
        raise ValueError(
            f"{label} must be a pyro.distributions class (a checkpoint rebuilds it by name), "
            f"got {type(d).__name__}"
        )
    rebuild_on(d, torch.device("cpu"), torch.float32)  # raises TypeError if it cannot be moved
    return d


def scale_prior_config(d: TorchDistribution) -> dict[str, Any]:
    """The ``weights_only``-safe form of a checked scale prior: class name and parameters.

    Example:
        >>> scale_prior_config(dist.HalfCauchy(2.0))
        {'distribution': 'HalfCauchy', 'params': {'scale': tensor(2.)}}
    """
    params = {k: getattr(d, k) for k in d.arg_constraints}
    return {
        "distribution": type(d).__name__,
        "params": {  # (a checkpoint's settings: on the CPU)
            k: v.detach().cpu().clone()
            if isinstance(v, torch.Tensor)
            else torch.tensor(float(v), device="cpu")
            for k, v in params.items()
        },
    }


def scale_prior_from_config(config: dict[str, Any]) -> TorchDistribution:
    """The inverse of :func:`scale_prior_config`.

    Example:
        >>> scale_prior_from_config(scale_prior_config(dist.HalfNormal(0.5))).scale
        tensor(0.5000)
    """
    cls = getattr(dist, config["distribution"], None)
    if cls is None:
        raise ValueError(f"unknown scale prior {config['distribution']!r} in checkpoint")
    return cls(**config["params"])


def require_name(prior: Any, name: str | None) -> str:
    """``name`` (the weight site's), or a ``ValueError`` saying that the prior needs it."""
    if not isinstance(name, str) or not name:
        raise ValueError(
            f"{type(prior).__name__} names its latent sites after the weight site: call "
            "site_distribution with name='net.0.weight' (make_bayesian_ passes it)"
        )
    return name


def normal_given_scale(scale: torch.Tensor, dims: int, shape: torch.Size) -> TorchDistribution:
    """``Normal(0, scale)`` over a weight tensor of ``shape``, all its dims as event.

    Args:
        scale: ``(*batch, *shape[:dims])``: one scale per leading ``dims`` dims of the tensor
            (``0``: one for the whole tensor; ``1``: one per row), ``batch`` the dims of any
            plate it was drawn under (particles, ``Predictive(parallel=True)``).
        dims: how many leading dims of the tensor ``scale`` covers.
        shape: the weight tensor's shape.

    Returns:
        A distribution with ``batch_shape == batch`` and ``event_shape == shape``.

    Example:
        >>> d = normal_given_scale(torch.ones(5, 1, 3), 1, torch.Size([3, 2]))
        >>> tuple(d.batch_shape), tuple(d.event_shape)
        ((5, 1), (3, 2))
    """
    batch = scale.shape[: scale.dim() - dims]
    s = scale.reshape(scale.shape + (1,) * (len(shape) - dims))
    base = dist.Normal(torch.zeros_like(s), s, validate_args=False)
    return base.expand(batch + shape).to_event(len(shape))
