"""``HierarchicalNormalPrior``: a zero-mean Normal whose scale, one per Bayesian tensor, is itself
a latent variable with a prior of its own (a half-Cauchy by default, Gelman 2006)."""

from __future__ import annotations

from collections.abc import Mapping
from fnmatch import fnmatchcase
from typing import Any

import pyro
import pyro.distributions as dist
import torch
import torch.nn as nn
from pyro.distributions.torch_distribution import TorchDistribution

from bnn_pyro.priors._latent import (
    check_scale_prior,
    normal_given_scale,
    require_name,
    scale_prior_config,
    scale_prior_from_config,
)
from bnn_pyro.priors.base import Prior
from bnn_pyro.weight_distributions import rebuild_on

__all__ = ["HierarchicalNormalPrior"]


class HierarchicalNormalPrior(Prior):
    """``w ~ Normal(0, s)`` elementwise, ``s ~ scale_prior``: one sampled scale per Bayesian tensor.

    Each Bayesian tensor (a layer's weight, its bias) has its own scale site, named after the
    weight site with the suffix ``_prior_scale`` (``"net.0.weight_prior_scale"``, 0-dim, drawn
    just before ``"net.0.weight"``). The scales are global latents: the default mean-field guide
    gives each a ``LogNormal`` (a Normal on ``log s``) and ``fit`` learns it with the weights;
    ``predict`` uses the weights alone. The scale of a tensor is shared by all its elements, so
    it is learned from all of them (a scale per weight would be the horseshoe's local scale,
    :class:`~bnn_pyro.priors.HorseshoePrior`).

    Args:
        scale_prior: the prior of every scale: a univariate distribution with positive support
            and scalar parameters (``dist.HalfCauchy(1.0)``, the default; ``dist.HalfNormal``,
            ``dist.LogNormal``, ``dist.InverseGamma``, ...).
        layers: per-layer scale priors, ``{pattern: distribution}``: a weight site whose name
            matches a pattern (``fnmatch``, over the site names, ``"net.2.*"``; the first match
            in the mapping's order wins) takes that scale prior; the others ``scale_prior``.
            Saved with the model: ``bp.load`` gives the same prior back.
        **selection: ``include``/``exclude``/``types``, see :class:`~bnn_pyro.priors.Prior`.

    Shapes:
        ``"<site>_prior_scale"``: ``()`` (``(*plates)`` under a plate of particles); the weight
        site ``"<site>"``: the parameter's shape, ``Normal(0, s)`` in every element.

    Example:
        >>> import bnn_pyro as bp
        >>> prior = HierarchicalNormalPrior(dist.HalfCauchy(1.0),
        ...                                 layers={"net.2.*": dist.HalfCauchy(0.1)})
        >>> round(float(prior.scale_prior_for("net.2.weight").scale), 6)
        0.1
        >>> bnn = bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1), prior=prior)
        >>> bnn.prior_sites[:2]
        ['net.0.weight_prior_scale', 'net.0.bias_prior_scale']
        >>> X = torch.randn(32, 2); y = X.sum(-1)
        >>> history = bnn.fit(X, y, epochs=3, progress=False, seed=0)
        >>> bnn.predict(X, num_samples=4, seed=0)[0].shape
        torch.Size([32, 1])
    """

    #: A distribution is built per call: the scale is drawn on every run of the model.
    cached = False
    #: The suffix of each scale site's name.
    SCALE_SITE = "prior_scale"

    def __init__(
        self,
        scale_prior: TorchDistribution | None = None,
        layers: Mapping[str, TorchDistribution] | None = None,
        **selection: Any,
    ) -> None:
        super().__init__(**selection)
        if scale_prior is None:
            scale_prior = dist.HalfCauchy(1.0)
        self.scale_prior = check_scale_prior("scale_prior", scale_prior)
        if layers is None:
            layers = {}
        if not isinstance(layers, Mapping):
            raise TypeError(
                f"layers must be a mapping {{pattern: distribution}}, got {type(layers).__name__}"
            )
        for pattern in layers:
            if not isinstance(pattern, str):
                raise TypeError(f"layers must have string patterns as keys, got {pattern!r}")
        self.layers = {p: check_scale_prior(f"layers[{p!r}]", d) for p, d in layers.items()}
        self._built: dict[tuple, TorchDistribution] = {}

    def scale_prior_for(self, name: str) -> TorchDistribution:
        """The scale prior of the weight site ``name`` (``"net.0.weight"``): the first pattern
        of ``layers`` that matches it, else ``scale_prior``."""
        if not isinstance(name, str):
            raise TypeError(f"name must be a weight site's name, got {type(name).__name__}")
        return next((d for p, d in self.layers.items() if fnmatchcase(name, p)), self.scale_prior)

    def check_site_names(self, names: list[str]) -> None:
        """Refuses a pattern of ``layers`` that matches none of the weight sites ``names``.

        Example:
            >>> prior = HierarchicalNormalPrior(layers={"2.*": dist.HalfCauchy(0.1)})
            >>> prior.check_site_names(["net.0.weight", "net.2.weight"])
            Traceback (most recent call last):
              ...
            ValueError: layers pattern(s) ['2.*'] match no weight site; the patterns are over the site names, e.g. ['net.0.weight', 'net.2.weight']
        """  # noqa: E501
        unmatched = [p for p in self.layers if not any(fnmatchcase(n, p) for n in names)]
        if unmatched:
            raise ValueError(
                f"layers pattern(s) {unmatched} match no weight site; the patterns are over the "
                f"site names, e.g. {list(names[:3])}"
            )

    def scale_site(self, name: str) -> str:
        """The name of the scale site of weight site ``name``.

        Example:
            >>> HierarchicalNormalPrior().scale_site("net.0.weight")
            'net.0.weight_prior_scale'
        """
        return f"{name}_{self.SCALE_SITE}"

    def _scale(self, name: str, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        key = (name, device, dtype)
        d = self._built.get(key)
        if d is None:
            d = self._built[key] = rebuild_on(self.scale_prior_for(name), device, dtype)
        return pyro.sample(self.scale_site(name), d)

    def distribution(
        self,
        module: nn.Module,
        param_name: str,
        device: torch.device,
        dtype: torch.dtype,
        *,
        name: str | None = None,
    ) -> TorchDistribution:
        """``Normal(0, s)`` for one element of the weight site ``name``, ``s`` drawn here."""
        s = self._scale(require_name(self, name), torch.device(device), dtype)
        return dist.Normal(torch.zeros_like(s), s, validate_args=False)

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
        """Draws the scale site ``"<name>_prior_scale"`` and returns ``Normal(0, s)`` over
        ``shape`` (event) with the scale's plate dims as batch. ``name`` is required."""
        s = self._scale(require_name(self, name), torch.device(device), dtype)
        return normal_given_scale(s, 0, torch.Size(shape))

    @classmethod
    def _from_config(cls, own: dict[str, Any], selection: dict[str, Any]) -> Prior:
        layers = {p: scale_prior_from_config(c) for p, c in own.get("layers", {}).items()}
        return cls(scale_prior_from_config(own["scale_prior"]), layers, **selection)

    def _own_config(self) -> dict[str, Any]:
        return {
            "scale_prior": scale_prior_config(self.scale_prior),
            "layers": {p: scale_prior_config(d) for p, d in self.layers.items()},
        }

    def __repr__(self) -> str:
        def show(d: TorchDistribution) -> str:
            args = ", ".join(f"{k}={float(getattr(d, k)):g}" for k in d.arg_constraints)
            return f"{type(d).__name__}({args})"

        layers = ", ".join(f"{p!r}: {show(d)}" for p, d in self.layers.items())
        return f"HierarchicalNormalPrior(scale_prior={show(self.scale_prior)}, layers={{{layers}}})"
