"""``SGMCMC``: stochastic-gradient MCMC (SGHMC, SGLD, their cyclical variants) on the Pyro
model of :class:`~bnn_pyro.VariationalBNN`, predicting from the samples it collects."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn as nn
from torch.utils.data import DataLoader

from bnn_pyro._checks import check_choice, check_float, check_int, check_seed
from bnn_pyro._rng import seeded
from bnn_pyro.likelihoods import Likelihood
from bnn_pyro.methods.sgmcmc import dense
from bnn_pyro.methods.sgmcmc.chain import ChainStep, plan_run
from bnn_pyro.methods.sgmcmc.checkpointing import SGMCMCCheckpoint
from bnn_pyro.methods.sgmcmc.collector import SampleCollector
from bnn_pyro.methods.sgmcmc.potential import PyroPotential
from bnn_pyro.methods.sgmcmc.predictive import SamplePredictive
from bnn_pyro.methods.sgmcmc.stability import warn_if_hot
from bnn_pyro.methods.sgmcmc.stacked import chain_potential
from bnn_pyro.methods.sgmcmc.step_sizes import MDECAY, MEASURED, run_step
from bnn_pyro.methods.vi.model import VariationalBNN
from bnn_pyro.priors import Prior
from bnn_pyro.training import Callback, History, check_callbacks, train
from bnn_pyro.training.batches import gather_loader, shuffled_batches, validation_pair

__all__ = ["SGMCMC"]

SAMPLERS = ("sghmc", "sgld")
SCHEDULES = ("constant", "cyclical")


class SGMCMC(SGMCMCCheckpoint, SamplePredictive):
    """Stochastic-gradient MCMC over the weights (and a learned noise scale) of a BNN.

    The potential is that of :class:`~bnn_pyro.VariationalBNN`'s Pyro model, with the same net,
    prior and likelihood (see :mod:`bnn_pyro.methods.sgmcmc.potential`), in plain torch where
    the model allows (:func:`~bnn_pyro.methods.sgmcmc.stacked.chain_potential`); the update
    rules are those of :mod:`bnn_pyro.methods.sgmcmc.samplers`. :meth:`fit` runs one chain
    from the net's initial weights (a later ``fit`` goes on from where the last one stopped,
    with a new burn-in and a new collection); :meth:`predict` evaluates the net on ``S`` of
    the collected samples at once.

    Right by default. With nothing but ``epochs`` chosen, ``fit`` steps with full-batch
    gradients and a step size it measures on the posterior while the chain burns in (the
    largest curvature of the preconditioned potential, :attr:`fit_defaults`), so that on a
    Gaussian posterior (Bayesian linear regression) the chain's stationary law is the exact
    posterior (``sghmc``: the BAOAB integrator is exact there at every stable step) or within a
    few percent of it (``sgld``: ``1 / (1 - 0.1 / 2)`` of the variance), whatever the data's
    scale, noise or conditioning. What the run's length buys is the effective sample size:
    ``sghmc`` decorrelates in a few steps times the square root of the posterior's condition
    number; ``sgld`` on a model linear in its weights (``mlp(d, [], O)``) measures a dense
    preconditioner, the inverse of the posterior's curvature (:mod:`~bnn_pyro.methods.sgmcmc.
    dense`), and decorrelates in about ten steps on any Gaussian posterior (judge a run with
    :func:`~bnn_pyro.methods.sgmcmc.chain_diagnostics`). Minibatches (``batch_size``) add their
    gradient noise: a run on them takes a fixed step
    (:data:`~bnn_pyro.methods.sgmcmc.step_sizes.MINIBATCH_LR`) that trades exactness for speed,
    the more so the more rows; ``last_run["kinetic_temperature"]`` (1 on an exact chain) reads
    about the samples' variance over the posterior's, and a run warns from 2 on
    (:class:`~bnn_pyro.exceptions.HotChainWarning`). ``lr="measured"`` bounds the step by the
    noise it measures, with a control variate (:mod:`~bnn_pyro.methods.sgmcmc.measured`): right
    on linear regressions at about three passes over the data an epoch, but wider than the full
    batch's on a small network. Keep ``batch_size=None`` where the data fit one step. An SGHMC
    chain that turns unstable after its burn-in goes back, drops the samples since, halves its
    step and warns (:mod:`~bnn_pyro.methods.sgmcmc.stability`).

    The cyclical schedule (``csghmc``) is meant for visiting several modes and, by its design, is
    not right on a unimodal posterior: its samples are too narrow (why, and its defaults:
    :mod:`~bnn_pyro.methods.sgmcmc.chain`).

    Args:
        net: any ``torch.nn.Module`` ``(N, *features) -> (N, O)`` whose parameters the prior
            all covers (it runs in eval mode: dropout is off in the potential and in predict).
        likelihood: the observation model, e.g. ``Gaussian(scale="learned")``, ``Categorical()``.
        prior: default ``IIDPrior(Normal(0, 1))`` on every linear/conv parameter.
        sampler: ``"sghmc"`` (SGHMC with the preconditioner of Springenberg et al. 2016,
            integrated by BAOAB) or ``"sgld"``.
        temperature: ``T > 0``: the chain samples ``p(θ|D)^(1/T)`` (1: the posterior).
        mdecay: SGHMC's momentum decay (friction) per step, in (0, 1). ``None`` (the default):
            :data:`~bnn_pyro.methods.sgmcmc.step_sizes.MDECAY`, which damps a posterior's slow
            directions at about the critical rate for condition numbers of a few tens at the
            measured step, and its stiff ones within a few steps; at the fixed step on
            minibatches the friction that step was tuned with
            (:data:`~bnn_pyro.methods.sgmcmc.step_sizes.MINIBATCH_MDECAY`).
        schedule: ``"constant"`` step size, or ``"cyclical"`` (Zhang et al. 2020: a cosine from
            ``lr`` down to 0, restarted ``cycles`` times; the first ``explore`` share of each
            cycle moves without noise and collects nothing, the rest samples).
        cycles, explore: of the cyclical schedule.
        preconditioner: SGLD's with a measured step: ``"dense"``, ``"none"`` or ``"auto"``
            (dense for a net linear in its weights, :func:`~bnn_pyro.methods.sgmcmc.dense.
            uses_dense`); SGHMC adapts its own (``"auto"`` only).
        burn_in: steps before any sample is collected (SGHMC adapts its preconditioner during
            them); ``None``: a quarter of the run (``"constant"``), 0 (``"cyclical"``).
        thinning: collect every ``thinning``-th sampling step after the burn-in; ``None``:
            spread ``max_samples`` evenly over the run.
        max_samples: the most samples kept (reservoir sampling beyond it); memory is
            ``max_samples x P`` numbers.
        num_samples: the default ``S`` of :meth:`predict`.

    Shapes:
        ``fit(X: (N, *features), y: (N,) | (N, O))``; ``predict(X) -> mean (N, O'), variance
        (N, O')[, samples (S, N, O')]``; :meth:`samples` ``{site: (K, *shape)}``.

    Example:
        >>> import bnn_pyro as bp
        >>> X = torch.randn(64, 2); y = X[:, 0] - X[:, 1]
        >>> m = bp.make("sghmc", bp.nn.mlp(2, [8], 1), bp.Gaussian(scale=0.1))
        >>> history = m.fit(X, y, epochs=20, batch_size=32, progress=False, seed=0)
        >>> mean, var = m.predict(X[:3], num_samples=10, seed=0)
        >>> mean.shape, m.samples()["net.0.weight"].shape
        (torch.Size([3, 1]), torch.Size([30, 8, 2]))
    """

    hooks = (*SamplePredictive.hooks, "start_run", "keep_run", "fit_defaults")

    #: The step of each sampler when ``fit`` is not given an ``lr``, relative to the largest
    #: curvature ``λ_max`` of the (preconditioned, per-datum) potential the chain measures while
    #: it burns in: SGHMC's ``lr² λ_max`` and SGLD's ``lr λ_max`` (see :meth:`fit`).
    fit_defaults: dict[str, float] = {"sghmc": 2.0, "sgld": 0.1}

    def __init__(
        self,
        net: nn.Module,
        likelihood: Likelihood,
        prior: Prior | None = None,
        *,
        sampler: str = "sghmc",
        temperature: float = 1.0,
        mdecay: float | None = None,
        schedule: str = "constant",
        cycles: int = 4,
        explore: float = 0.8,
        preconditioner: str = "auto",
        burn_in: int | None = None,
        thinning: int | None = None,
        max_samples: int = 1000,
        num_samples: int = 100,
    ) -> None:
        super().__init__()
        self.sampler = check_choice("sampler", sampler, SAMPLERS)
        self.temperature = check_float("temperature", temperature, minimum=0.0, strict=True)
        if mdecay is not None:
            mdecay = check_float("mdecay", mdecay, minimum=0.0, strict=True, maximum=1.0)
        self.mdecay = mdecay
        self.schedule = check_choice("schedule", schedule, SCHEDULES)
        self.cycles = check_int("cycles", cycles)
        self.explore = check_float("explore", explore, minimum=0.0, maximum=1.0)
        self.preconditioner = dense.check_preconditioner(preconditioner, self.sampler)
        self.burn_in = None if burn_in is None else check_int("burn_in", burn_in, minimum=0)
        self.thinning = None if thinning is None else check_int("thinning", thinning)
        self.max_samples = check_int("max_samples", max_samples)
        self.num_samples = check_int("num_samples", num_samples)
        like = next((p for p in net.parameters() if p.is_floating_point()), None)
        dtype = torch.get_default_dtype() if like is None else like.dtype
        device = None if like is None else like.device  # the state follows the net
        self._linear = dense.linear_in_weights(net)  # before the model makes it a PyroModule
        self.bnn = VariationalBNN(net, likelihood, prior=prior, num_samples=num_samples)
        kept = [name for name, _ in self.bnn.net.named_parameters()]
        if kept:
            raise ValueError(
                f"net has parameters the prior leaves out ({kept}): SG-MCMC samples every "
                "parameter, so choose a prior that covers them all"
            )
        self.register_buffer("position", torch.empty(0, dtype=dtype, device=device))  # θ (P,)
        # (K, P): the kept samples, each site in its own space (θ unconstrained)
        self.register_buffer("kept_samples", torch.empty(0, 0, dtype=dtype, device=device))
        self.potential: PyroPotential | None = None
        self.dataset_size: int | None = None
        self.input_shape: tuple[int, ...] | None = None
        self.last_run: dict[str, Any] = {}
        #: The step the last run measured and sampled with (``None``: a given ``lr``).
        self.step_size: float | None = None

    @property
    def likelihood(self) -> Likelihood:
        """The observation model (the inner model's)."""
        return self.bnn.likelihood

    @property
    def prior(self) -> Prior:
        """The prior (the inner model's)."""
        return self.bnn.prior

    # ------------------------------------------------------------------ fit
    def fit(
        self,
        X: Any,
        y: Any = None,
        *,
        epochs: int = 100,
        batch_size: int | None = None,
        lr: float | str | None = None,
        shuffle: bool = True,
        progress: bool = True,
        seed: int | None = None,
        callbacks: Iterable[Callback] = (),
        validation_data: tuple[Any, Any] | None = None,
    ) -> History:
        """Run the chain for ``epochs`` passes over ``(X, y)`` and keep its samples.

        Args:
            X: ``(N, *features)`` inputs, or a ``DataLoader`` of ``(x, y)`` batches (gathered).
            y: ``(N,)`` or ``(N, O)`` targets (class indices for ``Categorical``).
            epochs: passes over the data; each minibatch is one step of the chain.
            batch_size: rows per step; ``None`` (the default): the whole data set. With
                ``lr="measured"``: equal minibatches
                (:func:`~bnn_pyro.methods.sgmcmc.step_sizes.even_batch`) and the control variate
                of the class docstring.
            lr: the step size. ``None`` (the default): on the whole data set, measured on the
                posterior (:mod:`~bnn_pyro.methods.sgmcmc.measured`): ``lr² λ_max`` (SGHMC) or
                ``lr λ_max`` (SGLD) is the sampler's :attr:`fit_defaults`, for ``λ_max`` the
                largest curvature of ``M⁻¹ ∇²U / N``; on minibatches, the fixed step of
                :data:`~bnn_pyro.methods.sgmcmc.step_sizes.MINIBATCH_LR`. ``"measured"``: measured
                on minibatches too, or less where their noise asks. A float: that step
                throughout, SGHMC's ``ε`` of Springenberg et al. (the kick per step is
                ``lr² M⁻¹ ∇U / N``), SGLD's ``ε N``. :attr:`step_size`: the measured step.
            shuffle: reshuffle the rows each epoch.
            progress: show a progress bar.
            seed: makes the run reproducible without touching the global RNG.
            callbacks: ``fn(method, epoch, history)`` after each epoch; ``True`` stops.
            validation_data: ``(X_val, y_val)``; adds ``val_nll`` (of the samples so far).

        Returns:
            The :class:`~bnn_pyro.training.History`: ``loss`` (the potential ``U``, the
            negative log joint of the whole data set, averaged over the epoch's steps).

        Warns:
            TrainingInstabilityWarning: a regression chain whose kept samples predict the
                training targets worse than their mean does (:meth:`check_in_sample`).
            HotChainWarning: an SGHMC chain that sampled at twice its temperature or more
                (``last_run["kinetic_temperature"]``): its samples are too wide.

        Raises:
            TrainingDivergedError: a potential or gradient that is not finite. Like any
                ``Exception`` raised inside ``fit``, it leaves the chain as it was before the
                call: no samples after a failed first run, the earlier run's samples and
                position after a failed later one.

        Example:
            >>> import bnn_pyro as bp
            >>> X = torch.randn(32, 2); y = X.sum(-1)
            >>> m = bp.make("sgld", bp.nn.mlp(2, [4], 1), bp.Gaussian(scale=0.1))
            >>> def fail(method, epoch, history):
            ...     raise RuntimeError("stopped by the callback")
            >>> m.fit(X, y, epochs=4, callbacks=[fail], progress=False, seed=0)
            Traceback (most recent call last):
              ...
            RuntimeError: stopped by the callback
            >>> m.potential is None, m.position.numel()  # no run kept
            (True, 0)
        """
        epochs = check_int("epochs", epochs)
        if lr is not None and lr != MEASURED:
            lr = check_float("lr", lr, minimum=0.0, strict=True)
        check_seed("seed", seed)
        callbacks = check_callbacks(callbacks, validation_data is not None)
        if isinstance(X, DataLoader):
            X, y = gather_loader(X, y, lambda t, name: self.bnn.prepare_inputs(t, name))
        elif y is None:
            raise ValueError("y is required when X is not a DataLoader")
        X = self.bnn.prepare_inputs(X)
        y = self.bnn.prepare_targets(y, X)
        n = X.shape[0]
        batch_size = None if batch_size is None else check_int("batch_size", batch_size)
        dense.check_dense_step(self.preconditioner, lr)
        lr, batch, mdecay = run_step(self.sampler, lr, batch_size, n, self.mdecay)
        validation = None
        if validation_data is not None:
            xv, yv = validation_pair(
                validation_data,
                self.bnn.prepare_inputs,
                lambda t, x: self.bnn.prepare_targets(t, x, "y_val"),
            )
            validation = self.validation_score(xv, yv)
        with seeded(seed, self.device):
            step = self.start_run(X, y, steps=epochs * math.ceil(n / batch), lr=lr, mdecay=mdecay)
            self._step = step
            batches = shuffled_batches(X, y, batch, shuffle, seed)
            was_training = self.bnn.training
            self.bnn.eval()  # dropout off: the potential of the model predict runs
            try:
                history = train(  # ChainStep.minimizes is False: no blow-up guard
                    self,
                    step,
                    batches,
                    epochs=epochs,
                    callbacks=callbacks,
                    validation=validation,
                    progress=progress,
                    desc=self.sampler.upper(),
                )
            finally:
                self.bnn.train(was_training)
                self._step = None
        self.keep_run(step, X, heat=step.heat())
        self.check_in_sample(X, y)
        return history

    def start_run(
        self,
        X: torch.Tensor,
        y: torch.Tensor,
        *,
        steps: int,
        lr: float | None,
        mdecay: float | None = None,
    ) -> ChainStep:
        """The first step of a run of ``steps`` steps on ``X (N, ...)``, ``y`` (both prepared
        as :meth:`fit` prepares them): the potential, the start (where the last run stopped,
        else the net's initial weights and the likelihood's initial latents), the plan, the
        collector and the noise generator, each drawn from the global RNG in the order ``fit``
        draws them (``fit`` runs this inside its seeded block; so does
        :func:`~bnn_pyro.methods.sgmcmc.stacked.fit_stacked_sgmcmc`, once per chain). ``lr``:
        ``fit``'s (``None``: the step is measured on the posterior, at :attr:`fit_defaults`);
        ``mdecay``: the run's friction (``None``: the method's, else
        :data:`~bnn_pyro.methods.sgmcmc.step_sizes.MDECAY`).

        Example:
            >>> import bnn_pyro as bp
            >>> X = torch.randn(16, 2); y = X.sum(-1, keepdim=True)
            >>> m = bp.make("sgld", bp.nn.mlp(2, [4], 1), bp.Gaussian(scale=0.1))
            >>> step = m.start_run(X, y, steps=8, lr=0.01)
            >>> step.theta.shape, step.plan.burn_in
            (torch.Size([17]), 2)
        """
        plan, thinning = plan_run(
            steps,
            1.0 if lr is None else lr,
            self.schedule,
            self.cycles,
            self.explore,
            self.burn_in,
            self.thinning,
            self.max_samples,
        )
        potential = chain_potential(self, X[:2], y[:2])
        start = dict(self.bnn.guide.init_loc)  # the net's own initial weights
        start.update(self.likelihood.initial_latents(X, y))  # e.g. the noise from the data
        theta = self.position if self.position.numel() == potential.size else None
        self.position = potential.flat(start) if theta is None else theta.clone()
        collector = SampleCollector(
            self.max_samples,
            plan.sampling_steps(0, plan.burn_in),
            thinning,
            seed=int(torch.randint(0, 2**62, (1,))),
        )
        noise = torch.Generator(device=self.device)
        noise.manual_seed(int(torch.randint(0, 2**62, (1,))))
        return ChainStep(
            potential,
            self.position,
            self.sampler,
            plan,
            collector,
            X.shape[0],
            self.temperature,
            mdecay if mdecay is not None else self.mdecay if self.mdecay is not None else MDECAY,
            noise,
            target=self.fit_defaults[self.sampler] if lr is None else None,
            data=(X, y),
            dense=dense.uses_dense(self.preconditioner, self._linear, potential.size),
        )

    def keep_run(
        self, step: ChainStep, X: torch.Tensor, heat: float | None = None, what: str = "the chain"
    ) -> None:
        """Keep what a run collected (``step``: its :class:`ChainStep`, this chain's alone), what
        :meth:`predict` needs of its data ``X (N, ...)``, and ``heat`` (:meth:`ChainStep.heat`)
        in :attr:`last_run`, warning if it is hot (``what``: the chain)."""
        potential, plan = step.potential, step.plan
        self.potential = potential
        self.kept_samples = step.collector.samples.clone()
        self.dataset_size = X.shape[0]
        self.input_shape = tuple(X.shape[1:])
        self.bnn.input_shape = self.input_shape
        measured = step.step_size()
        self.step_size = None if measured is None else float(measured[0])
        self.last_run = {
            "steps": plan.total,
            "burn_in": plan.burn_in,
            "thinning": step.collector.thinning,
            "seen": step.collector.seen,
            "kinetic_temperature": heat,
        }
        warn_if_hot(heat, what)

    def extra_repr(self) -> str:
        fitted = f"{len(self.kept_samples)} samples" if self.potential else "not fitted"
        return (
            f"sampler={self.sampler!r}, schedule={self.schedule!r}, "
            f"temperature={self.temperature}, {fitted}"
        )
