"""Distributions of weights: the fast priors and the guide's own Normal.

* :class:`SharedNormal`: ``Normal(loc, scale)`` with one loc/scale for all elements, scored in
  three tensor operations (the default ``N(0, 1)`` and layerwise priors).
* :class:`ScaleMixtureNormal`: Blundell et al.'s (2015) two-component scale-mixture prior.
* :class:`ReparamNormal`: the mean-field guide's Normal, which scores its own samples from the
  noise that made them.
"""

from __future__ import annotations

import math
from typing import Any

import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.distributions.torch_distribution import TorchDistribution
from torch.distributions.utils import broadcast_all

__all__ = [
    "LOG_SQRT_2PI",
    "ReparamNormal",
    "ScaleMixtureNormal",
    "SharedNormal",
    "rebuild_on",
]

_NO_SHAPE = torch.Size()
#: ``log(sqrt(2 pi))``, the constant of a Normal's log density.
LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class SharedNormal(dist.Normal):
    """``Normal(loc, scale)`` with the same ``loc`` and ``scale`` for every element.

    The parameters are Python numbers, so :meth:`log_prob` is
    ``-0.5 * ((w - loc) / scale) ** 2 - log(scale) - log(2 pi) / 2`` in three tensor operations
    instead of ``Normal.log_prob``'s seven on expanded tensors: the same values, a cheaper prior
    term in every step. ``loc``/``scale`` are still exposed as (expanded) tensors, so the closed
    form ``KL(Normal || Normal)`` applies.

    Example:
        >>> d = SharedNormal(0.0, 2.0, torch.device("cpu"), torch.float32).expand([3])
        >>> w = torch.tensor([0.0, 1.0, -2.0])
        >>> bool(torch.allclose(d.log_prob(w), dist.Normal(0.0, 2.0).log_prob(w)))
        True
    """

    def __init__(self, loc: float, scale: float, device: torch.device, dtype: torch.dtype) -> None:
        t = torch.tensor([loc, scale], device=device, dtype=dtype)
        super().__init__(t[0], t[1], validate_args=False)
        self._set_constants(float(loc), float(scale))

    def _set_constants(self, loc: float, scale: float) -> None:
        self.loc0, self.scale0 = loc, scale
        self.log_norm = math.log(scale) + 0.5 * math.log(2 * math.pi)

    def expand(self, batch_shape: torch.Size, _instance: Any = None) -> SharedNormal:
        new = self._get_checked_instance(SharedNormal, _instance)
        new._set_constants(self.loc0, self.scale0)
        return super().expand(batch_shape, _instance=new)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        z = (value - self.loc0) / self.scale0 if self.loc0 else value / self.scale0
        return -0.5 * z * z - self.log_norm


class ScaleMixtureNormal(TorchDistribution):
    """Zero-mean two-component scale mixture ``pi N(0, s1^2) + (1 - pi) N(0, s2^2)``.

    The prior of Blundell et al. (2015), "Weight Uncertainty in Neural Networks", eq. (7).

    Args:
        mixture_weight: ``pi`` in (0, 1).
        scale1: ``s1 > 0`` (the wide component).
        scale2: ``s2 > 0`` (the narrow component, ``s2 << s1``).

    Example:
        >>> d = ScaleMixtureNormal(0.5, 1.0, 0.01)
        >>> expected = math.log(0.5 / math.sqrt(2 * math.pi) * (1 + 1 / 0.01))
        >>> math.isclose(float(d.log_prob(torch.tensor(0.0))), expected, rel_tol=1e-6)
        True
    """

    arg_constraints = {
        "mixture_weight": constraints.unit_interval,
        "scale1": constraints.positive,
        "scale2": constraints.positive,
    }
    support = constraints.real
    has_rsample = False

    def __init__(
        self,
        mixture_weight: float | torch.Tensor,
        scale1: float | torch.Tensor,
        scale2: float | torch.Tensor,
        validate_args: bool | None = None,
    ) -> None:
        self.mixture_weight, self.scale1, self.scale2 = broadcast_all(
            mixture_weight, scale1, scale2
        )
        super().__init__(self.mixture_weight.shape, validate_args=validate_args)

    def expand(self, batch_shape: torch.Size, _instance: Any = None) -> ScaleMixtureNormal:
        new = self._get_checked_instance(ScaleMixtureNormal, _instance)
        batch_shape = torch.Size(batch_shape)
        new.mixture_weight = self.mixture_weight.expand(batch_shape)
        new.scale1 = self.scale1.expand(batch_shape)
        new.scale2 = self.scale2.expand(batch_shape)
        super(ScaleMixtureNormal, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self) -> torch.Tensor:
        return torch.zeros_like(self.scale1)

    @property
    def variance(self) -> torch.Tensor:
        pi = self.mixture_weight
        return pi * self.scale1**2 + (1 - pi) * self.scale2**2

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        if self._validate_args:
            self._validate_sample(value)
        half_log_2pi = 0.5 * math.log(2 * math.pi)
        z1 = -0.5 * (value / self.scale1) ** 2 - self.scale1.log() - half_log_2pi
        z2 = -0.5 * (value / self.scale2) ** 2 - self.scale2.log() - half_log_2pi
        return torch.logaddexp(
            z1 + self.mixture_weight.log(), z2 + torch.log1p(-self.mixture_weight)
        )

    def sample(self, sample_shape: torch.Size = _NO_SHAPE) -> torch.Tensor:
        shape = self._extended_shape(sample_shape)
        with torch.no_grad():
            wide = torch.rand(shape, device=self.scale1.device) < self.mixture_weight.expand(shape)
            scale = torch.where(wide, self.scale1.expand(shape), self.scale2.expand(shape))
            return torch.randn(shape, device=scale.device, dtype=scale.dtype) * scale


class ReparamNormal(dist.Normal):
    """``Normal`` that scores its own last ``rsample`` from the noise that made it.

    For ``w = loc + scale * eps``, ``(w - loc) / scale == eps``, so
    ``log_prob(w) = -eps**2 / 2 - log(scale) - log(2 pi) / 2`` with the same value and the same
    gradient (with respect to ``loc`` and ``scale``, through ``w`` and directly) as
    ``Normal.log_prob``, in fewer operations. Any other value is scored by ``Normal.log_prob``.
    """

    _last: tuple[torch.Tensor, torch.Tensor] | None = None
    # (no expand of its own: Normal.expand builds a ReparamNormal, whose __init__ is Normal's)

    def rsample(self, sample_shape: torch.Size = _NO_SHAPE) -> torch.Tensor:
        shape = self._extended_shape(sample_shape)
        eps = torch.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        value = self.loc + eps * self.scale
        self._last = (value, eps)
        return value

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        last = self._last
        if last is not None and value is last[0]:
            return -0.5 * last[1] ** 2 - self.scale.log() - LOG_SQRT_2PI
        return super().log_prob(value)


def rebuild_on(d: TorchDistribution, device: torch.device, dtype: torch.dtype) -> TorchDistribution:
    """A copy of ``d``, a distribution with scalar parameters, on ``device`` in ``dtype``.

    Args:
        d: a distribution whose constructor takes its ``arg_constraints`` by name.
        device, dtype: where the copy's parameters live.

    Returns:
        ``type(d)`` with the same parameters, moved (unvalidated, as the original was checked).

    Raises:
        TypeError: ``d``'s constructor does not take its ``arg_constraints``.

    Example:
        >>> import pyro.distributions as dist
        >>> d = rebuild_on(dist.Normal(0.0, 2.0), torch.device("cpu"), torch.float64)
        >>> d.scale.dtype, float(d.scale)
        (torch.float64, 2.0)
    """
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
