"""``SVIModel``: what every Pyro-trained BNN here shares to be fitted and saved: ``fit`` (the
data plumbing of the one loop around Pyro's ``SVI``) and the checkpoint hooks, on top of its
predictive (:class:`~bnn_pyro.methods.vi.predictive.SVIPredictive`). A subclass defines the Pyro
``model``, a ``guide`` and its set-up (:meth:`SVIModel.setup_guide`), how to draw posterior
samples and how to evaluate the net on them: :class:`~bnn_pyro.VariationalBNN`,
:class:`~bnn_pyro.HiddenLayerBNN`."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import pyro.poutine as poutine
import torch
from torch.utils.data import DataLoader

from bnn_pyro._checks import check_float, check_int, check_seed
from bnn_pyro._rng import seeded
from bnn_pyro.elbos.jit import check_jit_elbo
from bnn_pyro.methods.vi.compiled_loss import check_compile, compiled_objective
from bnn_pyro.methods.vi.diagnostics import LayerDiagnostics
from bnn_pyro.methods.vi.engine import ObjectiveStep, direct_objective, why_not_direct
from bnn_pyro.methods.vi.map_init import check_init, start_from_map
from bnn_pyro.methods.vi.predictive import SVIPredictive
from bnn_pyro.methods.vi.state_loading import LazyGuideLoading
from bnn_pyro.methods.vi.svi import (
    ELBO_CLASSES,
    GuardedSVI,
    SVIStep,
    as_pyro_optim,
    make_elbo,
    needs_param_sites,
    run_svi,
)
from bnn_pyro.nn.param_scope import ParamScope
from bnn_pyro.training import Callback, History, KLWeightSpec, check_callbacks, kl_weight_at
from bnn_pyro.training.batches import loader_batches, shuffled_batches, validation_nll
from bnn_pyro.training.in_sample import check_predictive_in_sample
from bnn_pyro.training.optim import make_optimizer
from bnn_pyro.training.resume import SVI_SETTINGS, ResumePath, open_resume
from bnn_pyro.training.schedules import LRScheduleSpec, check_schedule_args

__all__ = ["SVIModel", "check_fit_in_sample"]


def check_fit_in_sample(
    bnn: SVIPredictive, X: torch.Tensor, y: torch.Tensor, what: str = "the fit"
) -> torch.Tensor | None:
    """After a fit whose noise is learned per input (``HeteroscedasticGaussian``): warn when
    its predictive mean is worse on its own training rows than their mean is
    (:func:`bnn_pyro.training.in_sample.check_predictive_in_sample`; its module says why).
    ``fit`` and the stacked fit call it; other likelihoods are not checked (``None``).

    Args:
        bnn: a fitted model.
        X: ``(N, ...)`` and y: ``(N, O)``: its training rows, prepared as ``fit`` prepares them.
        what: how the warning names the fit.

    Returns:
        ``(O,)`` in-sample ``R²``, or ``None`` where the likelihood is not checked.

    Example:
        >>> import bnn_pyro as bp
        >>> X = torch.linspace(-1, 1, 64)[:, None]; y = 2 * X
        >>> _ = torch.manual_seed(0)  # the net's initial weights
        >>> bnn = bp.VariationalBNN(bp.nn.mlp(1, [8], 2), bp.HeteroscedasticGaussian())
        >>> _ = bnn.fit(X, y, epochs=100, batch_size=None, progress=False, seed=0)
        >>> bool(check_fit_in_sample(bnn, X, y) > 0.9)  # fit has run it, and warned nothing
        True
    """
    likelihood = bnn.likelihood
    if not likelihood.gaussian or likelihood.homoscedastic:  # a noise learned per input only
        return None
    return check_predictive_in_sample(bnn, X, y, what)


class SVIModel(LazyGuideLoading, SVIPredictive):
    """Base class of the SVI-trained BNNs (see the module docstring). Subclasses set
    ``self.likelihood``, ``self.guide``, ``self.site_names`` and define ``model(x, y=None,
    dataset_size=None, kl_weight=1.0)``, :meth:`setup_guide` and the hooks of
    :class:`~bnn_pyro.methods.vi.predictive.SVIPredictive`."""

    hooks = (*SVIPredictive.hooks, "setup_guide", "fast_loss", "why_no_fast_loss", "default_elbo")
    elbos: tuple[str, ...] = tuple(ELBO_CLASSES)  # the objectives fit takes by name
    default_elbo: str = "trace"  # fit's objective when its elbo is None

    def __init__(self) -> None:
        super().__init__()
        self.dataset_size: int | None = None
        self.input_shape: tuple[int, ...] | None = None
        self._param_scope = ParamScope()
        #: Whether the guide must announce its parameters as Pyro param sites while ``fit``
        #: trains (an ELBO that finds them through the trace: the JIT ones, those without
        #: ``differentiable_loss``); ``fit`` sets it.
        self.param_sites_needed = False

    def param_scope(self) -> ParamScope:
        """This model's own Pyro param store, as a context manager.

        Every call of the model and its guide runs inside it, so two models never share a
        parameter and Pyro's global store is left as it was (see
        :mod:`bnn_pyro.nn.param_scope`). Enter it yourself around a loop that looks
        parameters up by name between calls: Pyro's JIT ELBOs, or ``pyro.param(name)`` and
        ``pyro.get_param_store()`` to read what the guide holds.

        Example:
            >>> import pyro, bnn_pyro as bp
            >>> from pyro.infer import SVI, JitTrace_ELBO
            >>> X = torch.randn(32, 2); y = X.sum(-1)
            >>> bnn = bp.VariationalBNN(bp.nn.mlp(2, [], 1), bp.Gaussian(0.1), guide="normal")
            >>> elbo = JitTrace_ELBO(ignore_jit_warnings=True)
            >>> svi = SVI(bnn.model, bnn.guide, pyro.optim.Adam({"lr": 0.01}), elbo)
            >>> outside = set(pyro.get_param_store().keys())
            >>> with bnn.param_scope():
            ...     losses = [svi.step(X, y) for _ in range(3)]
            ...     names = sorted(pyro.get_param_store().keys())
            >>> names[0], set(pyro.get_param_store().keys()) == outside
            ('AutoNormal.locs.net.0.bias', True)
        """
        return self._param_scope

    # ------------------------------------------------------------------ hooks of fit
    def setup_guide(self, x: torch.Tensor, y: torch.Tensor, data: Any = None) -> None:
        """Create the guide's parameters (before the optimizer lists them); ``data``: ``(X, y)``
        (or a first batch) for initial values read from the data."""

    def fast_loss(self, stl: bool = False, **objective: Any) -> Any:
        """A plain-torch implementation of this model's ``Trace_ELBO`` loss, what ``fit``
        steps with where :func:`~bnn_pyro.methods.vi.engine.why_not_direct` passes the model,
        or ``None`` (the default: Pyro's path). ``objective``: what else the objective asks
        for (``analytic_kl``, ``alpha`` and ``particles``)."""
        return None

    def why_no_fast_loss(self) -> str | None:
        """Why this model has no :meth:`fast_loss` once its guide is set up (what
        ``fit(compile=True)`` says when it refuses), or ``None`` where it has one."""
        return f"{type(self).__name__} has no plain-torch loss (only VariationalBNN has)"

    @contextmanager
    def _training_context(self) -> Iterator[None]:
        """Entered around the SVI loop."""
        yield

    # ------------------------------------------------------------------ checkpoint hooks
    def fitted_state(self) -> dict[str, Any]:
        if not self.is_fitted():
            raise ValueError("fit the model before saving it: its guide has no parameters yet")
        return {"dataset_size": self.dataset_size, "input_shape": list(self.input_shape or ())}

    def restore_fitted_state(self, fitted: dict[str, Any]) -> None:
        self.input_shape = tuple(fitted["input_shape"]) or None
        self.dataset_size = fitted["dataset_size"]
        # the guide's parameters are made lazily: create them from one dummy row and a y drawn
        # from the model, to be overwritten by the saved state
        x = torch.zeros((1, *(self.input_shape or ())), dtype=self.dtype, device=self.device)
        with torch.no_grad():
            y = poutine.trace(self.model).get_trace(x).nodes[self.likelihood.name]["value"]
            self.setup_guide(x, y)

    # ------------------------------------------------------------------ training
    def fit(
        self,
        X: Any,
        y: Any = None,
        *,
        epochs: int = 100,
        batch_size: int | None = 128,
        lr: float = 1e-2,
        optimizer: Any = None,
        elbo: Any = None,
        num_particles: int = 1,
        kl_weight: KLWeightSpec = 1.0,
        callbacks: Iterable[Callback] = (),
        validation_data: tuple[Any, Any] | None = None,
        shuffle: bool = True,
        progress: bool = True,
        seed: int | None = None,
        lr_schedule: LRScheduleSpec = None,
        average: float | None = None,
        resume: ResumePath = None,
        init: str | None = None,
        map_epochs: int | None = None,
        compile: bool = False,
    ) -> History:
        """Train the posterior by SVI on ``(X, y)`` or a ``DataLoader`` of ``(x, y)`` batches.

        The data set size ``N`` comes from the data; each minibatch log-likelihood is scaled by
        ``N / B`` and the KL enters once per step, so the loss is the negative ELBO of the whole
        data set. Calling ``fit`` again continues training.

        Args:
            X: ``(N, *features)`` inputs, or a ``DataLoader`` yielding ``(x, y)``.
            y: ``(N,)`` or ``(N, O)`` targets (class labels for ``Categorical``).
            epochs: passes over the data.
            batch_size: minibatch size; ``None`` = full batch. Ignored for a DataLoader.
            lr: learning rate of the default ``torch.optim.Adam`` (or of an optimizer class).
            optimizer: see :func:`bnn_pyro.methods.vi.svi.as_pyro_optim`.
            elbo: ``None`` (the model's own, ``"trace"`` unless its constructor chose another),
                ``"trace"`` (``Trace_ELBO``: Monte Carlo KL), ``"meanfield"`` (exact KL),
                ``"stl"`` (the "sticking the landing" gradient), ``"alpha"`` (black-box alpha,
                10 particles unless ``num_particles`` says more) or an ELBO: see
                :func:`bnn_pyro.methods.vi.svi.make_elbo`.
            num_particles: samples per step, vectorized (``vectorize_particles=True``).
            kl_weight: beta, a float or ``fn(epoch) -> float`` (e.g.
                :func:`bnn_pyro.training.linear_annealing`); 1 is the ELBO.
            callbacks: ``fn(bnn, epoch, history)``; a ``True`` return stops training.
            validation_data: ``(X_val, y_val)``; adds ``val_nll`` to the history.
            shuffle: reshuffle the rows every epoch.
            progress: show a progress bar.
            seed: makes the run reproducible (given the net's initial weights) without touching
                the global RNG.
            lr_schedule: the learning rate over the epochs (default ``None``: cosine decay to
                0, which converges; ``"constant"``, ...; see
                :func:`bnn_pyro.methods.vi.svi.run_svi`).
            average: Polyak averaging of the guide over the last share of the epochs (e.g.
                ``0.5``); ``None``: the last iterate.
            resume: a file path that makes the run resumable (:mod:`bnn_pyro.training.resume`).
            init: ``"map"``: the guide starts at a MAP fit, not on resume
                (:mod:`bnn_pyro.methods.vi.map_init`); ``None``: at the net's own weights.
            map_epochs: the MAP fit's epochs with ``init="map"`` (default ``epochs // 4``).
            compile: compile the step's loss, forward and backward, with ``torch.compile``
                (:mod:`bnn_pyro.methods.vi.compiled_loss`): the first step compiles it (tens of
                seconds), each later step runs the compiled graph, with the eager loss's draws.
                For a mean-field ``VariationalBNN`` with one particle and ``elbo`` ``"trace"``,
                ``"meanfield"`` or ``"stl"``; others are refused before any work.

        Returns:
            :class:`bnn_pyro.training.History` with ``loss``, ``nll``, ``kl`` per epoch.

        Warns:
            TrainingInstabilityWarning: a fit whose noise is learned per input
                (``HeteroscedasticGaussian``) that predicts its own training targets worse
                than their mean does (:func:`check_fit_in_sample`); and a fit that blew up
                (the loop's guard, which then keeps its best epoch).

        Raises:
            TrainingDivergedError: a NaN or infinite loss (the epoch and step named). Like any
                ``Exception`` raised inside ``fit``, it leaves the model as it was before the
                call (the guide's parameters and param store too): unfitted after a failed
                first fit, the earlier fit after a failed refit.

        Example:
            >>> import bnn_pyro as bp
            >>> X = torch.randn(32, 2); y = X.sum(-1)
            >>> bnn = bp.VariationalBNN(bp.nn.mlp(2, [8], 1), bp.Gaussian(0.1))
            >>> def fail(model, epoch, history):
            ...     raise RuntimeError("stopped by the callback")
            >>> bnn.fit(X, y, epochs=2, callbacks=[fail], progress=False)
            Traceback (most recent call last):
              ...
            RuntimeError: stopped by the callback
            >>> bnn.is_fitted()  # the guide made in the failed first fit is gone again
            False
            >>> history = bnn.fit(X, y, epochs=2, progress=False, seed=0)
            >>> bnn.is_fitted()
            True
        """
        epochs = check_int("epochs", epochs, minimum=0)
        lr = check_float("lr", lr, minimum=0.0, strict=True)
        num_particles = check_int("num_particles", num_particles)
        if callable(kl_weight):
            kl_weight_at(kl_weight, 0)  # a bad schedule is refused before anything changes
        else:
            check_float("kl_weight", kl_weight, minimum=0.0)
        check_seed("seed", seed)
        check_schedule_args(lr_schedule, average)
        map_epochs = check_init(self, init, map_epochs, epochs)
        elbo = self.default_elbo if elbo is None else elbo
        if isinstance(elbo, str) and elbo not in self.elbos:
            raise ValueError(f"elbo must be one of {self.elbos} or a pyro ELBO, got {elbo!r}")
        callbacks = check_callbacks(callbacks, validation_data is not None)
        check_compile(self, compile, elbo, num_particles, optimizer)
        resume = open_resume(resume, self, callbacks, locals(), SVI_SETTINGS)
        if isinstance(X, DataLoader):
            if y is not None:
                raise ValueError("pass either a DataLoader or (X, y), not both")
            batches, n, first_x, first_y = loader_batches(
                X, self.prepare_inputs, self.batch_targets()
            )
        else:
            if y is None:
                raise ValueError("y is required when X is not a DataLoader")
            X = self.prepare_inputs(X)
            y = self.prepare_targets(y, X)
            n = X.shape[0]
            batch_size = None if batch_size is None else check_int("batch_size", batch_size)
            batches = shuffled_batches(X, y, min(batch_size or n, n), shuffle, seed)
            first_x, first_y = X[:2], y[:2]
        validation = validation_nll(self, validation_data) if validation_data is not None else None
        # the engine, chosen by type before any work: the plain-torch objective where it covers
        # the model, elbo and optimizer (bnn_pyro.methods.vi.engine), else Pyro's SVI
        pyro_path = why_not_direct(self, elbo, num_particles, optimizer) is not None
        loss = make_elbo(elbo, num_particles, vectorize=True) if pyro_path else None
        # one bound method per model: Pyro's JIT keys its compiled loss by id(model), and a
        # fresh `self.model` each fit would compile it again on every call of fit
        model = self.__dict__.setdefault("_model_fn", self.model)
        if loss is not None:
            check_jit_elbo(loss, model, self.guide)
        self.param_sites_needed = loss is not None and needs_param_sites(loss)
        with seeded(seed, self.device), self._training_context(), self.param_scope():
            self.input_shape = tuple(first_x.shape[1:])
            self.setup_guide(first_x, first_y, (first_x, first_y) if y is None else (X, y))
            params = list(self.parameters())
            diagnostics = LayerDiagnostics.for_model(self)
            step: SVIStep | ObjectiveStep
            if loss is None:
                objective = direct_objective(self, elbo, num_particles)
                if compile:
                    objective = compiled_objective(self, elbo, objective)
                step = ObjectiveStep(
                    lambda xb, yb, beta: objective(xb, yb, n, beta),
                    make_optimizer(optimizer, params, lr),
                    kl_weight,
                    diagnostics=diagnostics,
                )
            else:
                optim = as_pyro_optim(optimizer, params, lr)
                svi = GuardedSVI(model, self.guide, optim, loss, params)
                step = SVIStep(svi, n, kl_weight, diagnostics)
            self.dataset_size = n
            was_training = self.training
            self.train()
            try:
                start_from_map(self, batches, n, map_epochs, lr, progress, resume)
                history = run_svi(
                    self,
                    step,
                    batches,
                    epochs=epochs,
                    callbacks=callbacks,
                    validation=validation,
                    progress=progress,
                    lr_schedule=lr_schedule,
                    average=average,
                    resume=resume,
                    null_nll=None if y is None else self.likelihood.null_nll(y),
                )
            finally:
                self.train(was_training)
        if y is not None:  # (a DataLoader's rows are not kept to be checked)
            check_fit_in_sample(self, X, y)
        return history
