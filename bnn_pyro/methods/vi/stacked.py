"""K mean-field ``VariationalBNN`` models' guides stacked as one: :class:`StackedVI`.

:func:`bnn_pyro.fit_stacked` (:mod:`bnn_pyro.methods.vi.stacked_fit`) trains K models of one
architecture as one (see :mod:`bnn_pyro.training.stacked` for the idea) with the
library's one VI objective (:class:`~bnn_pyro.methods.vi.objective.VIObjective`, the loss a
single model's ``fit`` minimises too), each member on its own data (a shared ``(N, D)`` set or
one ``(N, D)`` set per member, e.g. the splits of a benchmark), with its own seed, prior and
noise. Every member draws its noise from a generator of its own
in the order its own ``fit`` would draw from the global one (the guide's set-up draw included),
and its minibatch order from its own seeded generator: the result is each member's
``bnn.fit(..., seed=seed_k)`` up to float rounding (tested).

Covered: the library's mean-field guide, any fixed prior without latent sites of its own (a
Normal with one loc and scale per layer, the default, scored as one stacked term; any other
member by member), a ``Gaussian`` (fixed or learned noise), ``HeteroscedasticGaussian``,
``Categorical`` or ``Bernoulli`` likelihood; the ELBO (``Trace_ELBO``'s, the
sticking-the-landing or the closed-form-KL estimator) or the black-box alpha energy's P
particles; the weight-space estimator or local reparameterization / flipout of linear layers.
:func:`why_not_stacked_vi` names what is not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn as nn

from bnn_pyro.elbos.alpha import DEFAULT_ALPHA
from bnn_pyro.methods.vi.objective import VIObjective
from bnn_pyro.methods.vi.stacked_support import why_not_stacked_vi

__all__ = ["StackedVI", "why_not_stacked_vi"]


class StackedVI(nn.Module):
    """The guides of K set-up ``VariationalBNN`` models stacked; ``member_losses(x, y)`` is
    each member's loss on its minibatch under :class:`~bnn_pyro.methods.vi.objective.
    VIObjective` (the negative ELBO estimate by default): ``x (K, B, D)``, ``y (K, B, ...)`` →
    ``(K,)``.

    Args:
        bnns: the models, guides set up (see :func:`fit_stacked`, which does that).
        generators: one per member: the source of its noise.
        dataset_size: ``N``, the rows each member's minibatches stand for.
        kl_weight: beta.
        mode: the objective, one of :data:`~bnn_pyro.methods.vi.objective.MODES` (``"alpha"``
            with ``particles``).
        alpha: the alpha energy's ``alpha``.
        particles: the alpha energy's draws per member and step (``P >= 2``).

    Example:
        >>> import bnn_pyro as bp
        >>> from bnn_pyro.stacking import fit_stacked
        >>> X = torch.randn(64, 2); y = X.sum(-1, keepdim=True)
        >>> bnns = [bp.VariationalBNN(bp.nn.mlp(2, [8], 1), bp.Gaussian(0.1)) for _ in range(3)]
        >>> h = fit_stacked(bnns, X, y, seeds=[0, 1, 2], epochs=2, progress=False)
        >>> len(h["member_loss"][-1])
        3
    """

    def __init__(
        self,
        bnns: Sequence[Any],
        generators: Sequence[torch.Generator],
        dataset_size: int,
        kl_weight: float = 1.0,
        *,
        mode: str = "trace",
        alpha: float = DEFAULT_ALPHA,
        particles: int = 0,
    ) -> None:
        super().__init__()
        self.bnns, self.generators = list(bnns), list(generators)
        self.dataset_size, self.kl_weight = dataset_size, float(kl_weight)
        self.objective = VIObjective(
            self.bnns, self.generators, mode=mode, alpha=alpha, particles=particles
        )
        first = self.bnns[0]
        self.specs = list(first.guide.site_specs)
        keys = [first.guide.param_key(s.name) for s in self.specs]
        self.locs = nn.ParameterList(
            [nn.Parameter(torch.stack([b.guide.locs[k].detach() for b in self.bnns])) for k in keys]
        )
        self.rhos = nn.ParameterList(
            [nn.Parameter(torch.stack([b.guide.rhos[k].detach() for b in self.bnns])) for k in keys]
        )

    def forward(
        self, x: torch.Tensor, y: torch.Tensor, kl_weight: float | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``((K,), (K,))``: each member's loss, e.g. ``-(N/B log p(y | x, w_k) + beta (log
        p(w_k) - log q(w_k)))``, and its data part ``-N/B log p(y | x, w_k)`` (detached), at
        ``kl_weight`` (``None``: the module's); what the VI engine's
        :class:`~bnn_pyro.methods.vi.engine.ObjectiveStep` steps with."""
        beta = self.kl_weight if kl_weight is None else kl_weight
        return self.objective(list(self.locs), list(self.rhos), x, y, self.dataset_size, beta)

    def member_losses(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``(K,)``: each member's loss (:meth:`forward`'s first part)."""
        return self(x, y)[0]

    @torch.no_grad()
    def write_back(self) -> None:
        """Copy member k's slice of the stacked guide into ``bnns[k]``'s guide."""
        for spec, loc, rho in zip(self.specs, self.locs, self.rhos, strict=True):
            for k, b in enumerate(self.bnns):
                key = b.guide.param_key(spec.name)
                b.guide.locs[key].copy_(loc[k])
                b.guide.rhos[key].copy_(rho[k])

    @torch.no_grad()
    def read_from(self) -> None:
        """Copy ``bnns[k]``'s guide into member k's slice (the inverse of :meth:`write_back`:
        a guide changed from outside, e.g. restored to its best epoch by a callback)."""
        for spec, loc, rho in zip(self.specs, self.locs, self.rhos, strict=True):
            for k, b in enumerate(self.bnns):
                key = b.guide.param_key(spec.name)
                loc[k].copy_(b.guide.locs[key])
                rho[k].copy_(b.guide.rhos[key])
