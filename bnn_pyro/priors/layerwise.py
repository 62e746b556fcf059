"""``LayerwiseNormalPrior``: zero-mean Normal priors scaled by each layer's fan-in."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn
from pyro.distributions.torch_distribution import TorchDistribution

from bnn_pyro._checks import check_float
from bnn_pyro.priors.base import Prior
from bnn_pyro.weight_distributions import SharedNormal

__all__ = ["LayerwiseNormalPrior"]


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
        self.gain = check_float("gain", gain, minimum=0.0, strict=True)

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
