"""``ScaleMixturePrior``: Blundell et al.'s (2015) scale-mixture prior."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn
from pyro.distributions.torch_distribution import TorchDistribution

from bnn_pyro._checks import check_float
from bnn_pyro.priors.base import Prior
from bnn_pyro.weight_distributions import ScaleMixtureNormal

__all__ = ["ScaleMixturePrior"]


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
        self.scale1 = check_float("scale1", scale1, minimum=0.0, strict=True)
        self.scale2 = check_float("scale2", scale2, minimum=0.0, strict=True)

    def distribution(
        self, module: nn.Module, param_name: str, device: torch.device, dtype: torch.dtype
    ) -> TorchDistribution:
        t = torch.tensor(
            [self.mixture_weight, self.scale1, self.scale2], device=device, dtype=dtype
        )
        return ScaleMixtureNormal(t[0], t[1], t[2], validate_args=False)

    def _own_config(self) -> dict[str, Any]:
        return {"mixture_weight": self.mixture_weight, "scale1": self.scale1, "scale2": self.scale2}
