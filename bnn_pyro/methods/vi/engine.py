"""The VI engine: one step of the library's plain-torch objective, for one model or K stacked.

``VariationalBNN.fit`` and :func:`bnn_pyro.fit_stacked` of ``VariationalBNN`` models train through
the same :class:`ObjectiveStep` in the one loop (:func:`bnn_pyro.training.train`): a
:class:`~bnn_pyro.methods.vi.objective.VIObjective` of one model (``fit``: the guide's own
parameters, the global random generator) or of K (the stacked guides, a generator per member),
minimised by a torch optimizer. ``fit`` runs Pyro's ``SVI`` instead wherever the objective does
not cover the model; :func:`why_not_direct` decides which, **by type, before any work**: a
custom guide, a prior with latent sites of its own, hooks on the net, a user's ELBO instance,
several particles of the ELBO, a ``pyro.optim`` optimizer, a likelihood whose class scores or
observes its rows by code of its own (:func:`~bnn_pyro.likelihoods.plain.why_not_plain`).
That the two paths are one objective is the parametrised test of
``tests/methods/vi/test_fast_loss.py`` (loss and gradients against Pyro's ELBOs under the same
draws, for every configuration the objective covers) and ``tests/methods/vi/test_engine.py``
(whole fits).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pyro
import torch
from pyro.optim import PyroOptim

from bnn_pyro.elbos.alpha import DEFAULT_ALPHA, alpha_particles
from bnn_pyro.likelihoods.plain import why_not_plain
from bnn_pyro.methods.vi.diagnostics import LayerDiagnostics
from bnn_pyro.training.loop import LossStep
from bnn_pyro.training.schedules import KLWeightSpec, kl_weight_at

__all__ = ["ONE_PARTICLE", "ObjectiveStep", "direct_objective", "vi_row", "why_not_direct"]

#: The objectives of one particle that the plain-torch objective has, by ``fit``'s names.
ONE_PARTICLE = ("trace", "stl", "meanfield")

Objective = Callable[[torch.Tensor, torch.Tensor, float], tuple[torch.Tensor, torch.Tensor]]


def why_not_direct(bnn: Any, elbo: Any, num_particles: int, optimizer: Any = None) -> str | None:
    """Why ``fit(elbo=elbo, num_particles=num_particles, optimizer=optimizer)`` of ``bnn`` runs
    Pyro's ``SVI`` rather than the plain-torch objective, or ``None`` where it runs the
    objective. Read off types and arguments alone (the guide need not be set up).

    Example:
        >>> import bnn_pyro as bp
        >>> bnn = bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1))
        >>> why_not_direct(bnn, "trace", 1) is None
        True
        >>> why_not_direct(bnn, "trace", 4)
        "elbo='trace' with num_particles=4: Pyro's vectorized particles"
    """
    if not isinstance(elbo, str):
        return f"elbo is an ELBO instance ({type(elbo).__name__}): Pyro's SVI runs it as given"
    if elbo not in (*ONE_PARTICLE, "alpha"):
        return f"elbo={elbo!r} has no plain-torch objective"
    if elbo != "alpha" and num_particles != 1:
        return f"elbo={elbo!r} with num_particles={num_particles}: Pyro's vectorized particles"
    if isinstance(optimizer, PyroOptim):
        return f"the optimizer is a pyro.optim one ({type(optimizer).__name__}), which SVI steps"
    reason = bnn.why_no_fast_loss()
    if reason is None and elbo == "alpha" and bnn.local_reparameterization:
        reason = "elbo='alpha' with local reparameterization: Pyro's vectorized particles"
    if reason is None:
        reason = why_not_plain(bnn.likelihood, particles=elbo == "alpha")
    return reason


def direct_objective(bnn: Any, elbo: str, num_particles: int) -> Any:
    """The plain-torch objective ``(x, y, dataset_size=N, kl_weight=beta) -> (loss, nll)`` that
    ``fit`` steps with (a :class:`~bnn_pyro.methods.vi.fast_loss.DirectLoss` on the guide's own
    parameters) for a model :func:`why_not_direct` passes, its guide set up.

    Example:
        >>> import bnn_pyro as bp
        >>> bnn = bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1))
        >>> X, y = torch.randn(8, 2), torch.randn(8, 1)
        >>> bnn.setup_guide(X, y)
        >>> loss, nll = direct_objective(bnn, "alpha", 1)(X, y, dataset_size=8)
        >>> loss.shape, direct_objective(bnn, "alpha", 1).objective.particles
        (torch.Size([]), 10)
    """
    if elbo not in (*ONE_PARTICLE, "alpha"):
        raise ValueError(f"elbo must be one of {(*ONE_PARTICLE, 'alpha')}, got {elbo!r}")
    if elbo == "alpha":
        particles = alpha_particles(num_particles)
        return bnn.fast_loss(alpha=DEFAULT_ALPHA, particles=particles)
    return bnn.fast_loss(elbo == "stl", analytic_kl=elbo == "meanfield")


class ObjectiveStep(LossStep):
    """One step of a VI objective for :func:`bnn_pyro.training.train`: the one
    :class:`~bnn_pyro.training.LossStep` on ``objective(xb, yb, beta) -> (loss, nll)``, each
    ``()`` for one model or ``(K,)`` for K stacked members, run with Pyro's validation off.

    The history row: ``loss`` (the negative ELBO of the whole data set: the mean of the epoch's
    minibatch estimates; K members: their mean), ``nll`` (its expected negative
    log-likelihood part), ``kl`` (``(loss - nll) / kl_weight``), ``kl_weight``; K members add
    ``member_loss`` (a list); ``diagnostics`` adds per-layer ``kl/<site>`` and ``std/<site>``.

    Args:
        objective: ``(xb, yb, beta) -> (loss, nll)``.
        optimizer: a torch optimizer over the objective's parameters (elementwise for K > 1).
        kl_weight: beta, a float or a function of the epoch.
        desc: names the run in the divergence error (``None``: one model's fit, unnamed).
        diagnostics: per-layer entries added to every row, or ``None``.

    Example:
        >>> import bnn_pyro as bp
        >>> bnn = bp.VariationalBNN(bp.nn.mlp(2, [], 1), bp.Gaussian(0.1))
        >>> X = torch.randn(8, 2); y = X.sum(-1, keepdim=True)
        >>> bnn.setup_guide(X, y)
        >>> loss = direct_objective(bnn, "trace", 1)
        >>> opt = torch.optim.Adam(bnn.parameters(), lr=0.01)
        >>> step = ObjectiveStep(lambda x, t, beta: loss(x, t, 8, beta), opt)
        >>> step.start_epoch(0); value = step(X, y)
        >>> sorted(step.end_epoch([value], [8]))
        ['kl', 'kl_weight', 'loss', 'nll']
    """

    def __init__(
        self,
        objective: Objective,
        optimizer: torch.optim.Optimizer,
        kl_weight: KLWeightSpec = 1.0,
        *,
        desc: str | None = None,
        diagnostics: LayerDiagnostics | None = None,
    ) -> None:
        if not callable(objective):
            raise TypeError(f"objective must be callable, got {type(objective).__name__}")
        super().__init__(objective, optimizer, desc)  # held as ``losses``, called by ``loss``
        self.kl_weight, self.diagnostics = kl_weight, diagnostics
        # a fixed weight holds from construction; a schedule is asked at each start_epoch only
        # (once per epoch, as the loop promises it), so it reads NaN before the first
        self.beta = math.nan if callable(kl_weight) else float(kl_weight)
        self._losses: list[torch.Tensor] = []
        self._nlls: list[torch.Tensor] = []

    def start_epoch(self, epoch: int) -> None:
        self.beta = kl_weight_at(self.kl_weight, epoch)
        self._losses, self._nlls = [], []

    def loss(self, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        # the distributions the objective builds are its own, not a model's to check (as Pyro's
        # path validates its first step only): a scale that underflowed to 0 is a non-finite
        # loss, refused by the step, not a distribution's ValueError
        with pyro.validation_enabled(False):
            loss, self._nll = self.losses(xb, yb, self.beta)
        return loss

    def record(self, loss: torch.Tensor, xb: torch.Tensor) -> None:
        self._losses.append(loss)
        self._nlls.append(self._nll.detach())

    def end_epoch(self, losses: list[float], sizes: list[int]) -> dict[str, Any]:
        member_loss = torch.stack(self._losses).double().mean(0)
        loss, nll = float(member_loss.mean()), float(torch.stack(self._nlls).double().mean())
        row = vi_row(loss, nll, self.beta, self.diagnostics)
        if member_loss.dim():
            row["member_loss"] = member_loss.tolist()
        return row


def vi_row(
    loss: float, nll: float, beta: float, diagnostics: LayerDiagnostics | None = None
) -> dict[str, Any]:
    """A VI fit's history row from an epoch's mean ``loss`` and ``nll``: ``loss``, ``nll``,
    ``kl`` (``(loss - nll) / beta``; NaN at ``beta = 0``), ``kl_weight`` and the per-layer
    ``diagnostics`` entries; what both engines' steps record.

    Example:
        >>> vi_row(10.0, 4.0, 0.5)
        {'loss': 10.0, 'nll': 4.0, 'kl': 12.0, 'kl_weight': 0.5}
    """
    kl = (loss - nll) / beta if beta > 0 else math.nan
    row: dict[str, Any] = {"loss": loss, "nll": nll, "kl": kl, "kl_weight": beta}
    return row if diagnostics is None else {**row, **diagnostics.row()}
