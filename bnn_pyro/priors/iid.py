"""``IIDPrior``: one univariate distribution, independently, for every Bayesian weight."""

from __future__ import annotations

from typing import Any

import pyro.distributions as dist
import torch
import torch.nn as nn
from pyro.distributions import constraints
from pyro.distributions.torch_distribution import TorchDistribution

from bnn_pyro.priors.base import Prior
from bnn_pyro.weight_distributions import ScaleMixtureNormal, SharedNormal, rebuild_on

__all__ = ["IIDPrior"]


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
        invalid = {  # built with validate_args=False, Pyro did not check them
            k: float(getattr(distribution, k))
            for k, constraint in distribution.arg_constraints.items()
            if isinstance(getattr(distribution, k, None), torch.Tensor)
            and not bool(constraint.check(getattr(distribution, k)).all())
        }
        if invalid:
            raise ValueError(
                f"distribution has parameters outside their support, got {invalid} "
                f"({type(distribution).__name__}'s {sorted(invalid)} must satisfy "
                f"{[str(distribution.arg_constraints[k]) for k in sorted(invalid)]})"
            )
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
        return rebuild_on(self.base, device, dtype)

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
