"""Empirical-Bayes priors: a Normal prior whose scale per layer is learned with the posterior.

:class:`LearnedNormalPrior` gives every weight and bias of a layer the prior ``Normal(0, s_l)``
with one scale ``s_l`` per layer, a learnable parameter (``log s_l``) that ``fit`` optimises
together with the guide: maximising the ELBO over ``s_l`` as well as over the variational
parameters is type-II maximum likelihood (empirical Bayes) with the ELBO standing in for the
evidence (MacKay 1992 for the exact evidence; Blundell et al. 2015 and Wu et al. 2019 for the
variational version).

**Why per layer.** With ``n_l`` weights in a layer, the ELBO's only term in ``s_l`` is
``-KL(q || N(0, s_l^2))``, stationary at ``s_l^2 = (1 / n_l) * sum_i (mu_i^2 + sigma_i^2)``: the
mean second moment of the layer's posterior. One scale per layer is estimated from hundreds of
weights; one per weight would set each prior onto its own posterior and the KL to zero (the
degenerate optimum of per-weight empirical Bayes). A tiny layer (the bias of an output layer)
shares its layer's scale with the weight matrix.

**Where the scales live.** The prior object a user passes is a recipe; :class:`VariationalBNN`
binds a *copy* to its net (:meth:`Prior.bound_to`), so two models built from one prior never
share scales. The bound copy is a submodule of the model (``bnn.prior.log_scales``): the
optimizer finds it, ``bnn.state_dict()`` and checkpoints carry it.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import pyro.distributions as dist
import torch
import torch.nn as nn
from pyro.distributions.torch_distribution import TorchDistribution

from bnn_pyro._checks import check_float
from bnn_pyro.nn.pyro_net import param_statement
from bnn_pyro.priors.base import Prior

__all__ = ["LearnedNormalPrior"]

_LAYER_KEY = "_bnn_learned_prior_layer"  # on each bound layer: its key in ``log_scales``


class LearnedNormalPrior(Prior, nn.Module):
    """Zero-mean Normal prior with one learned scale per layer (type-II maximum likelihood).

    Args:
        init_scale: the scale every layer starts at (``fit`` then learns it). Default 1, the
            library's default ``Normal(0, 1)`` prior.
        **selection: ``include``/``exclude``/``types``, see :class:`~bnn_pyro.priors.Prior`.

    Attributes:
        log_scales: after binding to a net, ``{layer key: log s_l}`` (0-dim parameters); the
            key is the layer's dotted path with ``.`` replaced by ``__`` (``"root"`` for the net
            itself).

    Example:
        >>> import bnn_pyro as bp
        >>> X = torch.randn(64, 3); y = X @ torch.tensor([0.5, -0.2, 0.1]) + 0.05 * torch.randn(64)
        >>> bnn = bp.VariationalBNN(bp.nn.mlp(3, [], 1), bp.Gaussian(0.05),
        ...                         prior=bp.LearnedNormalPrior())
        >>> history = bnn.fit(X, y, epochs=200, lr=0.05, batch_size=None, progress=False, seed=0)
        >>> s = bnn.prior.scales()["0"]  # learned: near the weights' size, not the initial 1
        >>> bool(0.1 < s < 0.8)
        True
    """

    cached = False  # the scale is a live parameter: a fresh distribution on every call

    def __init__(self, init_scale: float = 1.0, **selection: Any) -> None:
        nn.Module.__init__(self)
        Prior.__init__(self, **selection)
        self.init_scale = check_float("init_scale", init_scale, minimum=0.0, strict=True)
        self.log_scales = nn.ParameterDict()
        #: Announce each ``log s_l`` as the Pyro param site ``"prior.log_scales.<layer key>"``
        #: (so a plain ``SVI`` with a ``pyro.optim`` optimizer learns it, as ``fit`` does);
        #: ``fit`` optimizes the module's parameters directly and switches this off.
        self.emit_params = True

    # ------------------------------------------------------------------ binding
    @staticmethod
    def _key(module_name: str) -> str:
        return module_name.replace(".", "__") if module_name else "root"

    def bound_to(self, net: nn.Module) -> LearnedNormalPrior:
        """A copy of this prior with one scale parameter for every layer of ``net`` that has a
        Bayesian parameter, each at ``init_scale``; the layers are marked with their key.

        Args:
            net: the plain net, before :func:`~bnn_pyro.nn.pyro_net.make_bayesian_`.
        """
        bound = copy.deepcopy(self)
        bound.log_scales = nn.ParameterDict()
        for module_name, module in net.named_modules():
            if any(
                self.is_bayesian(module_name, module, p)
                for p, _ in module.named_parameters(recurse=False)
            ):
                key = self._key(module_name)
                param = next(module.parameters(recurse=False))
                value = torch.tensor(
                    math.log(self.init_scale), dtype=param.dtype, device=param.device
                )
                bound.log_scales[key] = nn.Parameter(value)
                module.__dict__[_LAYER_KEY] = key
        return bound

    def scales(self) -> dict[str, float]:
        """``{layer path: learned prior scale}`` (``""`` is the net itself).

        Example:
            >>> net = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))
            >>> {k: round(v, 6) for k, v in LearnedNormalPrior(0.5).bound_to(net).scales().items()}
            {'0': 0.5, '2': 0.5}
        """  # noqa: E501
        out = {}
        for key, log_scale in self.log_scales.items():
            name = "" if key == "root" else key.replace("__", ".")
            out[name] = math.exp(float(log_scale.detach()))
        return out

    # ------------------------------------------------------------------ the Prior interface
    def _log_scale(self, module: nn.Module) -> torch.Tensor:
        key = module.__dict__.get(_LAYER_KEY)
        if key is None or key not in self.log_scales:
            raise RuntimeError(
                "LearnedNormalPrior is not bound to this net: pass it to VariationalBNN (which "
                "binds a copy with Prior.bound_to) rather than calling make_bayesian_ directly"
            )
        return self.log_scales[key]

    def distribution(
        self, module: nn.Module, param_name: str, device: torch.device, dtype: torch.dtype
    ) -> TorchDistribution:
        log_scale = self._log_scale(module)
        if self.emit_params:  # a param site: a user's own SVI loop and pyro.optim train it too
            key = module.__dict__[_LAYER_KEY]
            log_scale = param_statement(f"prior.log_scales.{key}", log_scale)
        scale = log_scale.to(device=device, dtype=dtype).exp()
        return dist.Normal(torch.zeros_like(scale), scale, validate_args=False)

    def _own_config(self) -> dict[str, Any]:
        return {"init_scale": self.init_scale}

    def __repr__(self) -> str:
        return f"LearnedNormalPrior(init_scale={self.init_scale!r})"

    # nn.Module and Prior both define __repr__-adjacent hooks; keep the Prior one and the
    # module's identity hash (the default object hash is what nn.Module relies on).
    __hash__ = nn.Module.__hash__
