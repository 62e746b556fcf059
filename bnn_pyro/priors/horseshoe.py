"""``HorseshoePrior``: the horseshoe (Carvalho, Polson & Scott 2010) on each Bayesian tensor, with
local scales per unit (Ghosh, Yao & Doshi-Velez 2019) or per weight."""

from __future__ import annotations

from typing import Any

import pyro
import pyro.distributions as dist
import torch
import torch.nn as nn
from pyro.distributions.torch_distribution import TorchDistribution

from bnn_pyro._checks import check_choice, check_float
from bnn_pyro.priors._latent import normal_given_scale, require_name
from bnn_pyro.priors.base import Prior

__all__ = ["HorseshoePrior"]


class HorseshoePrior(Prior):
    """The horseshoe: ``w ~ Normal(0, tau * lambda)``, ``tau ~ HalfCauchy(global_scale)``,
    ``lambda ~ HalfCauchy(local_scale)``.

    The global scale ``tau`` pulls a whole tensor towards zero; the heavy-tailed local scales
    ``lambda`` let a few of its units (or weights) escape the pull. Per Bayesian tensor (a
    layer's weight, its bias) the prior has two latent sites, named after the weight site:

    * ``"<site>_global_scale"``: ``tau``, 0-dim;
    * ``"<site>_local_scale"``: ``lambda``, one per *unit* (``local="unit"``, the default: one
      per row of the weight, i.e. per output unit or channel, shared by its incoming weights; the
      node-wise horseshoe of Ghosh, Yao & Doshi-Velez 2019, which prunes whole units), shape
      ``(out,)``; or one per *weight* (``local="weight"``, Carvalho et al.'s original), the
      parameter's shape.

    They are global latents with positive support: the default mean-field guide gives each a
    ``LogNormal`` and ``fit`` learns them with the weights; ``predict`` uses the weights alone.
    The parameterisation is the centred one (``w`` drawn given ``tau * lambda``); Ghosh et al.
    fit a non-centred, inverse-gamma form for a better-behaved variational posterior.

    Args:
        global_scale: ``tau0``, the scale of ``tau``'s half-Cauchy (default 1). Piironen &
            Vehtari (2017) suggest ``p0 / (D - p0) * sigma / sqrt(N)`` for ``p0`` relevant of
            ``D`` inputs.
        local_scale: the scale of each ``lambda``'s half-Cauchy (default 1: the horseshoe).
        local: ``"unit"`` or ``"weight"``, see above.
        **selection: ``include``/``exclude``/``types``, see :class:`~bnn_pyro.priors.Prior`.

    Shapes:
        For a weight site of shape ``(out, *rest)``: ``global_scale`` ``()``, ``local_scale``
        ``(out,)`` (``"unit"``) or ``(out, *rest)`` (``"weight"``), each with the dims of any
        plate it is drawn under in front.

    Example:
        >>> import bnn_pyro as bp
        >>> bnn = bp.VariationalBNN(bp.nn.mlp(3, [8], 1), bp.Gaussian(0.1),
        ...                         prior=HorseshoePrior(global_scale=0.5))
        >>> bnn.prior_sites[:2]
        ['net.0.weight_global_scale', 'net.0.weight_local_scale']
        >>> X = torch.randn(32, 3); y = X[:, 0]
        >>> history = bnn.fit(X, y, epochs=3, progress=False, seed=0)
        >>> bnn.guide.means()["net.0.weight_local_scale"].shape  # one per hidden unit
        torch.Size([8])
    """

    #: A distribution is built per call: the scales are drawn on every run of the model.
    cached = False
    #: The ways to share the local scales.
    LOCAL = ("unit", "weight")

    def __init__(
        self,
        global_scale: float = 1.0,
        local_scale: float = 1.0,
        local: str = "unit",
        **selection: Any,
    ) -> None:
        super().__init__(**selection)
        self.global_scale = check_float("global_scale", global_scale, minimum=0.0, strict=True)
        self.local_scale = check_float("local_scale", local_scale, minimum=0.0, strict=True)
        self.local = check_choice("local", local, self.LOCAL)

    def local_shape(self, shape: torch.Size) -> torch.Size:
        """The shape of the local scales of a weight tensor of ``shape``.

        Example:
            >>> HorseshoePrior().local_shape(torch.Size([8, 3]))
            torch.Size([8])
        """
        return torch.Size(shape) if self.local == "weight" else torch.Size(shape)[:1]

    def _scale(
        self, name: str, shape: torch.Size, device: torch.device, dtype: torch.dtype
    ) -> torch.Tensor:
        """``tau * lambda``: ``(*plates, *local_shape(shape))``, drawing both sites."""
        tau0 = torch.tensor(self.global_scale, device=device, dtype=dtype)
        tau = pyro.sample(f"{name}_global_scale", dist.HalfCauchy(tau0, validate_args=False))
        n = self.local_shape(shape)
        lam0 = torch.full(n, self.local_scale, device=device, dtype=dtype)
        lam = pyro.sample(
            f"{name}_local_scale", dist.HalfCauchy(lam0, validate_args=False).to_event(len(n))
        )
        return tau.reshape(tau.shape + (1,) * len(n)) * lam

    def distribution(
        self,
        module: nn.Module,
        param_name: str,
        device: torch.device,
        dtype: torch.dtype,
        *,
        name: str | None = None,
    ) -> TorchDistribution:
        """Not per element: the local scales' shape follows the tensor's, which only
        :meth:`site_distribution` is told.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError(
            "HorseshoePrior builds whole weight sites: call site_distribution(module, "
            "param_name, shape, device, dtype, name=...)"
        )

    def site_distribution(
        self,
        module: nn.Module,
        param_name: str,
        shape: torch.Size,
        device: torch.device,
        dtype: torch.dtype,
        *,
        name: str | None = None,
    ) -> TorchDistribution:
        """Draws ``"<name>_global_scale"`` and ``"<name>_local_scale"`` and returns
        ``Normal(0, tau * lambda)`` over ``shape`` (event). ``name`` is required."""
        shape = torch.Size(shape)
        s = self._scale(require_name(self, name), shape, torch.device(device), dtype)
        return normal_given_scale(s, len(self.local_shape(shape)), shape)

    def _own_config(self) -> dict[str, Any]:
        return {
            "global_scale": self.global_scale,
            "local_scale": self.local_scale,
            "local": self.local,
        }
