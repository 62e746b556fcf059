"""The SVI step behind :meth:`bnn_pyro.VariationalBNN.fit`, plugged into the one loop.

:class:`GuardedSVI` refuses a non-finite loss before the optimizer moves; :class:`SVIStep` turns
it into a :class:`~bnn_pyro.training.loop.TrainingStep` with ``kl_weight`` (beta) for annealing
and tempering; :func:`make_elbo` names the ELBOs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import pyro
import torch
from pyro.infer import ELBO, SVI, TraceTailAdaptive_ELBO
from pyro.optim import PyroOptim

from bnn_pyro.elbos.alpha import AlphaELBO, alpha_particles
from bnn_pyro.elbos.jit import JIT_ELBOS
from bnn_pyro.elbos.stl import StickingTheLanding_ELBO
from bnn_pyro.elbos.trace import FastTrace_ELBO, RecordingMeanField_ELBO
from bnn_pyro.exceptions import TrainingDivergedError
from bnn_pyro.methods.vi.diagnostics import LayerDiagnostics
from bnn_pyro.methods.vi.engine import vi_row
from bnn_pyro.training import distributed
from bnn_pyro.training.callbacks import History
from bnn_pyro.training.loop import Batch, Callback, TrainingStep, train
from bnn_pyro.training.optim import make_optimizer
from bnn_pyro.training.schedules import KLWeightSpec, kl_weight_at

#: The learning rate of an SVI fit unless told otherwise: cosine decay from ``lr`` to 0 over the
#: epochs. With a constant step, Adam's iterates keep jittering around the optimum, far off the
#: exact posterior of the Bayesian linear regression of
#: ``tests/methods/vi/test_exact_posterior.py``; decayed to 0 they settle within the tolerance that
#: ``test_default_fit_recovers_the_exact_posterior`` asks. Averaging the iterates as well
#: (``average=0.5``) did no better (the scales are still moving in the averaged half), so it
#: stays an option.
#: Measured: ``benchmarks/results/library_measurements.md``, section 'Cosine learning-rate default'.
DEFAULT_SCHEDULE = "cosine"

__all__ = [
    "DEFAULT_SCHEDULE",
    "ELBO_CLASSES",
    "GuardedSVI",
    "SVIStep",
    "as_pyro_optim",
    "make_elbo",
    "needs_param_sites",
    "run_svi",
]


class _TorchOptim(PyroOptim):
    """Presents one torch optimizer over all parameters as a ``PyroOptim`` for ``SVI``."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:  # no super(): no per-param state
        self.optimizer = optimizer

    def __call__(self, params: Iterable[torch.Tensor], *args: Any, **kwargs: Any) -> None:
        self.optimizer.step()
        # what zero_grad(set_to_none=True) does, without its profiler record per call (a
        # visible share of a small net's step)
        # Measured: ``benchmarks/results/library_measurements.md``, section 'Clearing gradients
        # by hand'.
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                p.grad = None


def as_pyro_optim(optimizer: Any, params: list[torch.nn.Parameter], lr: float) -> PyroOptim:
    """The ``PyroOptim`` that ``SVI`` steps: a ``pyro.optim.PyroOptim`` as given (e.g.
    ``pyro.optim.ClippedAdam({"lr": 0.01})``; one optimizer per tensor, as in Pyro), anything
    else through :func:`bnn_pyro.training.make_optimizer` (``None``: fused Adam).

    Example:
        >>> params = [torch.nn.Parameter(torch.zeros(3))]
        >>> optim = as_pyro_optim(torch.optim.SGD, params, lr=0.1)
        >>> type(optim.optimizer).__name__
        'SGD'
    """
    if isinstance(optimizer, PyroOptim):
        return optimizer
    return _TorchOptim(make_optimizer(optimizer, params, lr))


#: The objectives :func:`make_elbo` (and so ``fit``) builds by name.
ELBO_CLASSES: dict[str, type[ELBO]] = {
    "trace": FastTrace_ELBO,
    "meanfield": RecordingMeanField_ELBO,
    "stl": StickingTheLanding_ELBO,
    "alpha": AlphaELBO,
}


def make_elbo(
    elbo: str | ELBO,
    num_particles: int,
    vectorize: bool,
) -> ELBO:
    """``"trace"`` → ``Trace_ELBO`` (:class:`~bnn_pyro.elbos.trace.FastTrace_ELBO`),
    ``"meanfield"`` →
    ``TraceMeanField_ELBO``, ``"stl"`` → ``Trace_ELBO`` with the "sticking the landing" gradient
    (:class:`~bnn_pyro.elbos.stl.StickingTheLanding_ELBO`), ``"alpha"`` → the black-box alpha
    energy at ``alpha = 0.5`` (:class:`~bnn_pyro.elbos.alpha.AlphaELBO`; ``num_particles`` 1
    becomes its default 10: one draw has no ``log mean exp``), all recording the NLL part for
    the history; or an ``ELBO`` instance used as given. (These are ``fit``'s Pyro path; where the
    plain-torch objective covers the model, ``fit`` steps with that instead:
    :mod:`bnn_pyro.methods.vi.engine`.)

    Example:
        >>> type(make_elbo("meanfield", num_particles=4, vectorize=True)).__name__
        'RecordingMeanField_ELBO'
        >>> make_elbo("alpha", num_particles=1, vectorize=True).num_particles
        10
    """
    if isinstance(elbo, TraceTailAdaptive_ELBO):
        raise ValueError(
            "TraceTailAdaptive_ELBO gives gradients but no loss value, which fit's divergence "
            "guard and history read: run it in your own SVI loop on bnn.model and bnn.guide"
        )
    if isinstance(elbo, ELBO):
        return elbo
    if elbo not in ELBO_CLASSES:
        raise ValueError(f"elbo must be one of {tuple(ELBO_CLASSES)} or a pyro ELBO, got {elbo!r}")
    if not isinstance(num_particles, int) or num_particles < 1:
        raise ValueError(f"num_particles must be an int >= 1, got {num_particles!r}")
    if elbo == "alpha":
        return AlphaELBO(num_particles=alpha_particles(num_particles))
    return ELBO_CLASSES[elbo](
        num_particles=num_particles,
        vectorize_particles=vectorize and num_particles > 1,
        max_plate_nesting=1,
    )


def needs_param_sites(elbo: ELBO) -> bool:
    """Whether ``elbo`` finds the parameters it trains through the param sites of its traces:
    Pyro's JIT ELBOs (the parameters are the compiled function's inputs, looked up by name) and
    those without ``differentiable_loss`` (``TraceGraph_ELBO``, ``RenyiELBO``, ...), whose
    ``loss_and_grads`` back-propagates only when it sees a param site. Every other ELBO
    back-propagates into the module's parameters without them.

    Judged by class, so a user's subclass of one of Pyro's ELBOs is judged as its base.

    Example:
        >>> from pyro.infer import JitTrace_ELBO, RenyiELBO, Trace_ELBO
        >>> [needs_param_sites(e) for e in (Trace_ELBO(), RenyiELBO(), JitTrace_ELBO())]
        [False, True, True]
    """
    return isinstance(elbo, JIT_ELBOS) or not hasattr(elbo, "differentiable_loss")


class GuardedSVI(SVI):
    """``pyro.infer.SVI`` over a module's parameters, refusing to apply a non-finite loss.

    ``step`` computes the ELBO's ``differentiable_loss`` (the same estimator and gradients as
    ``loss_and_grads``), checks it, back-propagates and steps the optimizer over ``params``: the
    parameters live in modules, not in Pyro's global param store. A NaN or infinite loss raises
    :class:`TrainingDivergedError` before anything moves. An ELBO without
    ``differentiable_loss`` (``TraceGraph_ELBO``, ``RenyiELBO``) runs its own
    ``loss_and_grads``, and its gradients are dropped, unapplied, when the loss is not finite.

    The first step runs under Pyro's validation as the user set it; later steps run without it
    (``pyro.validation_enabled(False)``, scoped to the step): the checks are structural and the
    structure does not change between steps, while they cost about a fifth of a small net's
    step. Pass ``validate_every_step=True`` to keep them on.

    Args:
        model, guide: callables taking the same arguments.
        optim: a ``PyroOptim`` (see :func:`as_pyro_optim`).
        loss: a Pyro ELBO with ``differentiable_loss``.
        params: the trainable tensors.
        validate_every_step: keep Pyro's validation on for every step.

    Example:
        >>> import pyro, pyro.distributions as dist
        >>> loc = torch.nn.Parameter(torch.tensor(0.0))
        >>> def model():
        ...     pyro.sample("w", dist.Normal(3.0, 1.0))
        >>> def guide():
        ...     pyro.sample("w", dist.Normal(loc, 1.0))
        >>> svi = GuardedSVI(model, guide, as_pyro_optim(None, [loc], 0.1),
        ...                  make_elbo("meanfield", 1, False), [loc])
        >>> for _ in range(300):
        ...     _ = svi.step()
        >>> round(float(loc.detach()), 1)
        3.0
    """

    def __init__(
        self,
        model: Callable[..., Any],
        guide: Callable[..., Any],
        optim: PyroOptim,
        loss: ELBO,
        params: list[torch.Tensor],
        validate_every_step: bool = False,
    ) -> None:
        super().__init__(model, guide, optim, loss)
        if not hasattr(loss, "differentiable_loss") and not hasattr(loss, "loss_and_grads"):
            raise TypeError(
                f"{type(loss).__name__} has neither differentiable_loss nor loss_and_grads"
            )
        self.elbo = loss
        self.params = [p for p in params if p.requires_grad]
        self.validate_every_step = validate_every_step
        self._validated = False

    def _loss(self, *args: Any, **kwargs: Any) -> torch.Tensor | float:
        if not hasattr(self.elbo, "differentiable_loss"):  # back-propagates by itself
            return self.elbo.loss_and_grads(self.model, self.guide, *args, **kwargs)
        return self.elbo.differentiable_loss(self.model, self.guide, *args, **kwargs)

    def step(self, *args: Any, **kwargs: Any) -> float:
        if self._validated and not self.validate_every_step:
            with pyro.validation_enabled(False):
                loss = self._loss(*args, **kwargs)
        else:
            loss = self._loss(*args, **kwargs)
            self._validated = True
        value = float(loss.detach()) if isinstance(loss, torch.Tensor) else float(loss)
        finite = math.isfinite(value)
        if finite and isinstance(loss, torch.Tensor):
            loss.backward()
        if not distributed.average_gradients(self.params, finite):  # (no-op in one process)
            for p in self.params:
                p.grad = None
            raise TrainingDivergedError(f"the loss is {value}")
        self.optim(self.params)
        for p in self.params:
            p.grad = None
        return value


class SVIStep(TrainingStep):
    """One ``GuardedSVI`` step on a minibatch, for :func:`bnn_pyro.training.train`.

    The history row holds ``loss`` (the negative ELBO of the whole data set, the mean of the
    epoch's minibatch estimates), ``nll`` (its expected negative log-likelihood part), ``kl``
    (``(loss - nll) / kl_weight``) and ``kl_weight``, and with ``diagnostics`` the per-layer
    ``kl/<site>`` and ``std/<site>`` (:class:`~bnn_pyro.methods.vi.diagnostics.LayerDiagnostics`).

    Args:
        svi: the SVI object; its model and guide take ``(x, y, dataset_size=, kl_weight=)``.
        dataset_size: ``N``, the number of training points the minibatches stand for.
        kl_weight: beta, a float or a function of the epoch.
        diagnostics: per-layer entries added to every row, or ``None``.

    Example:
        >>> import bnn_pyro as bp
        >>> bnn = bp.VariationalBNN(bp.nn.mlp(2, [], 1), bp.Gaussian(0.1))
        >>> X = torch.randn(8, 2); y = X.sum(-1, keepdim=True)
        >>> bnn.setup_guide(X, y)
        >>> params = list(bnn.parameters())
        >>> svi = GuardedSVI(bnn.model, bnn.guide, as_pyro_optim(None, params, 0.01),
        ...                  make_elbo("meanfield", 1, False), params)
        >>> step = SVIStep(svi, dataset_size=8)
        >>> step.start_epoch(0); loss = step(X, y)
        >>> sorted(step.end_epoch([loss], [8]))
        ['kl', 'kl_weight', 'loss', 'nll']
    """

    def __init__(
        self,
        svi: GuardedSVI,
        dataset_size: int,
        kl_weight: KLWeightSpec = 1.0,
        diagnostics: LayerDiagnostics | None = None,
    ) -> None:
        self.svi, self.dataset_size, self.kl_weight = svi, dataset_size, kl_weight
        self.diagnostics = diagnostics
        self.beta, self.nll_total = 1.0, 0.0
        if isinstance(svi.optim, _TorchOptim):
            self.optimizer = svi.optim.optimizer

    def start_epoch(self, epoch: int) -> None:
        self.beta, self.nll_total = kl_weight_at(self.kl_weight, epoch), 0.0

    def __call__(self, xb: torch.Tensor, yb: torch.Tensor) -> float:
        loss = self.svi.step(xb, yb, dataset_size=self.dataset_size, kl_weight=self.beta)
        self.nll_total += float(getattr(self.svi.elbo, "last_nll", math.nan))
        return loss

    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state (a ``PyroOptim``'s through its ``get_state``)."""
        if self.optimizer is None:
            return {"pyro_optim": self.svi.optim.get_state()}
        return super().state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.optimizer is None:
            self.svi.optim.set_state(state["pyro_optim"])
        else:
            super().load_state_dict(state)

    def end_epoch(self, losses: list[float], sizes: list[int]) -> dict[str, float]:
        loss, nll = sum(losses) / len(losses), self.nll_total / len(losses)
        return vi_row(loss, nll, self.beta, self.diagnostics)


def run_svi(
    bnn: Any,
    step: TrainingStep,
    batches: Callable[[], Iterable[Batch]],
    *,
    epochs: int,
    callbacks: Iterable[Callback] = (),
    validation: Callable[[], float] | None = None,
    progress: bool = True,
    lr_schedule: Any = None,
    average: float | None = None,
    resume: Any = None,
    null_nll: float | None = None,
) -> History:
    """Run ``epochs`` passes of a VI ``step`` over ``batches()`` and return the :class:`History`
    (:func:`bnn_pyro.training.train` with the VI defaults): what ``fit`` runs, with an
    :class:`SVIStep` (Pyro's ``SVI``) or an :class:`~bnn_pyro.methods.vi.engine.ObjectiveStep`
    (the plain-torch objective).

    Args:
        bnn: the module being trained (for snapshots and callbacks).
        step: the step; its ``diagnostics`` (a
            :class:`~bnn_pyro.methods.vi.diagnostics.LayerDiagnostics` or ``None``) record
            ``kl/<site>`` and ``std/<site>`` after each epoch and warn
            (:class:`~bnn_pyro.exceptions.PosteriorCollapseWarning`) at the end when a layer
            learned nothing.
        batches: called once per epoch; yields ``(x, y)`` minibatches.
        epochs: number of passes.
        callbacks: ``fn(bnn, epoch, history)``; a ``True`` return stops training.
        validation: returns the validation NLL per point, evaluated after each epoch.
        progress: show a tqdm progress bar.
        lr_schedule: see :func:`bnn_pyro.training.train`; ``None`` is :data:`DEFAULT_SCHEDULE`
            (cosine decay to 0 over the run) with a torch optimizer, a constant rate with a
            ``pyro.optim`` one; ``"constant"`` asks for a constant rate.
        average, resume: see :func:`bnn_pyro.training.train`.
        null_nll: the training data's NLL under a prediction that ignores the inputs
            (:meth:`bnn_pyro.likelihoods.Likelihood.null_nll`): a layer at its prior is named
            underfitting only where the last epoch's NLL is no better; ``None``: always.

    Example:
        >>> import warnings, bnn_pyro as bp
        >>> X = torch.randn(16, 2); y = X.sum(-1)
        >>> bnn = bp.VariationalBNN(bp.nn.mlp(2, [], 1), bp.Gaussian(0.1))
        >>> with warnings.catch_warnings():  # 3 epochs: the stds have not moved yet
        ...     warnings.simplefilter("ignore", bp.PosteriorCollapseWarning)
        ...     history = bnn.fit(X, y, epochs=3, progress=False)  # fit calls run_svi
        >>> sorted(history)[:3], len(history["std/net.0.weight"])
        (['epoch', 'kl', 'kl/net.0.bias'], 3)
    """
    val = None if validation is None else (lambda: {"val_nll": validation()})
    if lr_schedule is None and step.optimizer is not None:
        lr_schedule = DEFAULT_SCHEDULE
    history = train(
        bnn,
        step,
        batches,
        epochs=epochs,
        callbacks=callbacks,
        validation=val,
        progress=progress,
        lr_schedule=lr_schedule,
        average=average,
        resume=resume,
    )
    diag = getattr(step, "diagnostics", None)
    if diag is not None and history.get("epoch"):
        nll = history.get("nll", [None])[-1]
        diag.check(nll if nll is None or math.isfinite(nll) else None, null_nll)
    return history
