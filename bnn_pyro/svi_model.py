"""``SVIModel``: what every Pyro-trained BNN here shares: input checks, the ``fit`` loop's data
plumbing, and prediction from posterior samples. A subclass defines the Pyro ``model``, a
``guide``, how to draw posterior samples (:meth:`SVIModel._draw_posterior`) and how to evaluate
the net on them (:meth:`SVIModel._outputs`): :class:`~bnn_pyro.VariationalBNN`,
:class:`~bnn_pyro.HiddenLayerBNN`."""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils.data import DataLoader

from bnn_pyro._checks import as_tensor, check_float, check_int, check_seed
from bnn_pyro._rng import seeded
from bnn_pyro._streaming import block_rows, stream_summary
from bnn_pyro.base import BaseBayesianMethod, PredictOutput
from bnn_pyro.exceptions import NotFittedError
from bnn_pyro.likelihoods import GaussianLikelihood, Likelihood
from bnn_pyro.map_init import check_init, start_from_map
from bnn_pyro.nn.inputs import InputSpec
from bnn_pyro.training import (
    Callback,
    GuardedSVI,
    History,
    KLWeightSpec,
    as_pyro_optim,
    check_callbacks,
    make_elbo,
    run_svi,
)
from bnn_pyro.training.batches import loader_batches, shuffled_batches, validation_nll
from bnn_pyro.training.resume import SVI_SETTINGS, ResumePath, open_resume
from bnn_pyro.training.schedules import LRScheduleSpec, check_schedule_args
from bnn_pyro.training.svi import ELBO_CLASSES

__all__ = ["SVIModel"]
_NO_NOISE = "include_noise=True needs a Gaussian likelihood, not {!r}"


class SVIModel(BaseBayesianMethod):
    """Base class of the SVI-trained BNNs (see the module docstring). Subclasses set
    ``self.likelihood``, ``self.guide``, ``self.site_names`` and define ``model(x, y=None,
    dataset_size=None, kl_weight=1.0)``, :meth:`_draw_posterior`, :meth:`_outputs` and
    :meth:`_output_dim`."""

    likelihood: Likelihood
    site_names: list[str]
    elbos: tuple[str, ...] = tuple(ELBO_CLASSES)  # the objectives fit takes by name
    default_elbo: str = "trace"  # fit's objective when its elbo is None

    def __init__(self) -> None:
        super().__init__()
        self.dataset_size: int | None = None
        self.input_shape: tuple[int, ...] | None = None

    # ------------------------------------------------------------------ hooks
    @abstractmethod
    def model(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        """The Pyro model, ``model(x, y=None, dataset_size=None, kl_weight=1.0) -> f``: the net
        output for ``x (B, ...)``, observing ``y`` in a data plate of size ``dataset_size``."""

    @abstractmethod
    def _draw_posterior(
        self, num_samples: int, generator: torch.Generator | None, x: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """``{site: (S, *shape)}`` draws from the guide."""

    @abstractmethod
    def _outputs(
        self, X: torch.Tensor, samples: Mapping[str, torch.Tensor], chunk_size: int | None
    ) -> torch.Tensor:
        """Net outputs ``(S, N, O)`` for the S weight samples, chunked over the rows."""

    @abstractmethod
    def _output_dim(self, x: torch.Tensor) -> int:
        """The width ``O`` of the net's output for inputs like ``x``."""

    def _expected_features(self) -> InputSpec | None:
        """The feature shape the net needs before any fit (``None``: learned by ``fit``)."""
        return None

    def _is_fitted(self) -> bool:
        return self.dataset_size is not None

    def _setup_guide(self, x: torch.Tensor, y: torch.Tensor, data: Any = None) -> None:
        """Create the guide's parameters (before the optimizer lists them); ``data``: ``(X, y)``
        (or a first batch) for initial values read from the data."""

    @contextmanager
    def _training_context(self) -> Iterator[None]:
        """Entered around the SVI loop."""
        yield

    # ------------------------------------------------------------------ checkpoint hooks
    def _fitted_state(self) -> dict[str, Any]:
        if not self._is_fitted():
            raise ValueError("fit the model before saving it: its guide has no parameters yet")
        return {"dataset_size": self.dataset_size, "input_shape": list(self.input_shape or ())}

    def _restore_fitted_state(self, fitted: dict[str, Any]) -> None:
        from bnn_pyro.checkpoint import create_guide_parameters

        self.input_shape = tuple(fitted["input_shape"]) or None
        self.dataset_size = fitted["dataset_size"]
        create_guide_parameters(self)  # created, then overwritten by the saved state

    # ------------------------------------------------------------------ inputs
    def _inputs(self, X: Any, name: str = "X") -> torch.Tensor:
        X = as_tensor(name, X, dtype=self.dtype, device=self.device, min_dim=2)
        if len(X) == 0:
            raise ValueError(f"{name} must have at least one row, got shape {tuple(X.shape)}")
        spec = InputSpec.exact(self.input_shape) if self.input_shape else None
        (spec or self._expected_features() or InputSpec(())).check(name, X)
        return X

    def _targets(
        self, y: Any, X: torch.Tensor, name: str = "y", out_dim: int | None = None
    ) -> torch.Tensor:
        y = as_tensor(name, y, device=self.device)
        if y.shape[0] != X.shape[0]:
            raise ValueError(
                f"X and {name} must have the same number of rows, got {X.shape[0]} and {y.shape[0]}"
            )
        return self.likelihood.check_targets(y, out_dim or self._output_dim(X))

    def _batch_targets(self) -> Callable[[Any, torch.Tensor, str], torch.Tensor]:
        """``_targets`` for a loader's batches: the net's output width is found once."""
        width: list[int] = []

        def targets(y: Any, X: torch.Tensor, name: str) -> torch.Tensor:
            if not width:
                width.append(self._output_dim(X))
            return self._targets(y, X, name, width[0])

        return targets

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
            optimizer: see :func:`bnn_pyro.training.as_pyro_optim`.
            elbo: ``None`` (the model's own, ``"trace"`` unless its constructor chose another),
                ``"trace"`` (``Trace_ELBO``: Monte Carlo KL), ``"meanfield"`` (exact KL),
                ``"stl"`` (the "sticking the landing" gradient), ``"alpha"`` (black-box alpha,
                10 particles unless ``num_particles`` says more) or an ELBO: see
                :func:`bnn_pyro.training.make_elbo`.
            num_particles: samples per step, vectorized (``vectorize_particles=True``).
            kl_weight: beta, a float or ``fn(epoch) -> float`` (e.g.
                :func:`bnn_pyro.training.linear_annealing`); 1 is the ELBO.
            callbacks: ``fn(bnn, epoch, history)``; a ``True`` return stops training.
            validation_data: ``(X_val, y_val)``; adds ``val_nll`` to the history.
            shuffle, progress: reshuffle the rows every epoch; show a progress bar.
            seed: makes the run reproducible (given the net's initial weights) without touching
                the global RNG.
            lr_schedule, average: the learning rate over the epochs (default ``None``: cosine
                decay to 0, which converges; ``"constant"``, ...) and Polyak averaging of the
                guide over the last share of them (see :func:`bnn_pyro.training.run_svi`).
            resume: a file path that makes the run resumable (:mod:`bnn_pyro.training.resume`).
            init, map_epochs: ``"map"``: the guide starts at a MAP fit of ``map_epochs`` (default
                ``epochs // 4``) epochs, not on resume (:mod:`bnn_pyro.map_init`).

        Returns:
            :class:`bnn_pyro.training.History` with ``loss``, ``nll``, ``kl`` per epoch.
        """
        epochs = check_int("epochs", epochs, minimum=0)
        lr = check_float("lr", lr, minimum=0.0, strict=True)
        num_particles = check_int("num_particles", num_particles)
        if not callable(kl_weight):
            check_float("kl_weight", kl_weight, minimum=0.0)
        check_seed("seed", seed)
        check_schedule_args(lr_schedule, average)
        map_epochs = check_init(self, init, map_epochs, epochs)
        elbo = self.default_elbo if elbo is None else elbo
        if isinstance(elbo, str) and elbo not in self.elbos:
            raise ValueError(f"elbo must be one of {self.elbos} or a pyro ELBO, got {elbo!r}")
        callbacks = check_callbacks(callbacks, validation_data is not None)
        resume = open_resume(resume, self, callbacks, locals(), SVI_SETTINGS)
        if isinstance(X, DataLoader):
            if y is not None:
                raise ValueError("pass either a DataLoader or (X, y), not both")
            batches, n, first_x, first_y = loader_batches(X, self._inputs, self._batch_targets())
        else:
            if y is None:
                raise ValueError("y is required when X is not a DataLoader")
            X = self._inputs(X)
            y = self._targets(y, X)
            n = X.shape[0]
            batch_size = None if batch_size is None else check_int("batch_size", batch_size)
            batches = shuffled_batches(X, y, min(batch_size or n, n), shuffle, seed)
            first_x, first_y = X[:2], y[:2]
        validation = validation_nll(self, validation_data) if validation_data is not None else None
        kept = self._kept_on_error("input_shape", "dataset_size")
        with kept, seeded(seed, self.device), self._training_context():
            self.input_shape = tuple(first_x.shape[1:])
            self._setup_guide(first_x, first_y, (first_x, first_y) if y is None else (X, y))
            params = list(self.parameters())
            loss = make_elbo(elbo, num_particles, vectorize=True)
            optim = as_pyro_optim(optimizer, params, lr)
            svi = GuardedSVI(self.model, self.guide, optim, loss, params)
            self.dataset_size = n
            was_training = self.training
            self.train()
            try:
                start_from_map(self, batches, n, map_epochs, lr, progress, resume)
                return run_svi(
                    self,
                    svi,
                    batches,
                    epochs=epochs,
                    dataset_size=n,
                    kl_weight=kl_weight,
                    callbacks=callbacks,
                    validation=validation,
                    progress=progress,
                    lr_schedule=lr_schedule,
                    average=average,
                    resume=resume,
                )
            finally:
                self.train(was_training)

    # ------------------------------------------------------------------ prediction
    def sample_posterior(
        self, num_samples: int, seed: int | None = None, x: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        """``num_samples`` joint draws of every latent site from the guide.

        Args:
            num_samples: ``S``.
            seed: makes the draw reproducible without touching the global RNG.
            x: an example input (only autoguides need one; defaults to zeros of the training
                input shape).

        Returns:
            ``{site name: (S, *site_shape)}``, e.g. ``"net.0.weight": (S, 50, 13)``.
        """
        num_samples = check_int("num_samples", num_samples)
        if not self._is_fitted():
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet: call fit(X, y)")
        if x is None:
            x = torch.zeros((1, *(self.input_shape or ())), device=self.device, dtype=self.dtype)
        generator = None
        if seed is not None:
            generator = torch.Generator(device=self.device)
            generator.manual_seed(check_int("seed", seed, minimum=0))
        with seeded(seed, self.device), torch.no_grad():
            return self._draw_posterior(num_samples, generator, x)

    def _resolve_samples(
        self,
        num_samples: int,
        posterior_samples: Mapping[str, torch.Tensor] | None,
        seed: int | None,
    ) -> Mapping[str, torch.Tensor]:
        if posterior_samples is None:
            return self.sample_posterior(num_samples, seed=seed)
        missing = [k for k in self.site_names if k not in posterior_samples]
        if missing:
            raise ValueError(f"posterior_samples lacks the site(s) {missing}")
        return {k: torch.as_tensor(v, device=self.device) for k, v in posterior_samples.items()}

    def predict(
        self,
        x: Any,
        return_samples: bool = False,
        *,
        num_samples: int | None = None,
        include_noise: bool = False,
        posterior_samples: Mapping[str, torch.Tensor] | None = None,
        chunk_size: int | None = None,
        seed: int | None = None,
        generator: torch.Generator | None = None,
    ) -> PredictOutput:
        """Posterior predictive mean and variance, vectorized over the samples.

        The ``S`` weight samples are evaluated in one pass per chunk of rows (no Python loop over
        samples); row blocks are reduced into result buffers allocated once: memory stays bounded.

        Args:
            x: ``(N, *features)`` inputs.
            return_samples: also return the per-sample predictive means ``(S, N, O')``.
            num_samples: ``S``, draws from the guide (default: ``self.num_samples``, 100 unless
                the constructor set it).
            include_noise: add the aleatoric variance (Gaussian likelihoods: the mean over
                samples of ``scale**2``) to the epistemic one.
            posterior_samples: ``{site: (S, ...)}`` to use instead of the guide, e.g.
                ``mcmc.get_samples()`` from ``MCMC(NUTS(bnn.model))``.
            chunk_size: rows per pass (default: sized from the layer widths).
            seed: reproducible draws without touching the global RNG.
            generator: the random source of the draws, as the classic methods take it (an
                alternative to ``seed``).

        Returns:
            ``mean (N, O')`` (class probabilities for ``Categorical``), ``variance (N, O')``:
            epistemic (the variance of the per-sample means) unless ``include_noise``, and, with
            ``return_samples``, ``samples (S, N, O')``.
        """
        num_samples = self._samples_to_draw(num_samples)
        chunk_size = None if chunk_size is None else check_int("chunk_size", chunk_size)
        X = self._inputs(x, "x")
        seed = self._predict_seed(seed, generator)
        samples = self._resolve_samples(num_samples, posterior_samples, seed)

        def block(start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor | None]:
            f = self._outputs(X[start:stop], samples, chunk_size)
            means = self.likelihood.mean(f)
            noise = self.likelihood.noise_variance(f, samples) if include_noise else None
            if include_noise and noise is None:
                raise ValueError(_NO_NOISE.format(self.likelihood))
            return means, None if noise is None else noise.expand_as(means).mean(0)

        width = self._output_dim(X[:2]) if X.shape[0] else 1
        rows = block_rows(next(iter(samples.values())).shape[0], width)
        return stream_summary(X.shape[0], rows, block, return_samples)

    def predictive_gaussian(
        self, x: Any, num_samples: int | None = None, seed: int | None = None, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Gaussian predictive as a mixture over samples: ``locs (S, N, O)``, ``scales`` (the noise
        standard deviation of each sample, broadcastable to ``locs``).

        Raises:
            ValueError: the likelihood is not Gaussian.
        """
        if not isinstance(self.likelihood, GaussianLikelihood):
            raise ValueError(
                f"predictive_gaussian needs a Gaussian likelihood, not {self.likelihood!r}"
            )
        X = self._inputs(x, "x")
        num_samples = self._samples_to_draw(num_samples)
        seed = self._predict_seed(seed, kwargs.get("generator"))
        samples = self._resolve_samples(num_samples, kwargs.get("posterior_samples"), seed)
        f = self._outputs(X, samples, kwargs.get("chunk_size"))
        return self.likelihood.mean(f), self.likelihood.noise_variance(f, samples).sqrt()

    def log_predictive_density(
        self,
        x: Any,
        y: Any,
        num_samples: int = 100,
        seed: int | None = None,
        posterior_samples: Mapping[str, torch.Tensor] | None = None,
    ) -> float:
        """Mean over points of ``log (1/S) sum_s p(y_n | x_n, w_s)`` (the test log-likelihood).

        Args:
            x: ``(N, *features)``; y: ``(N,)``/``(N, O)`` targets.
            num_samples: ``S`` draws from the guide.
            seed: reproducible draws without touching the global RNG.
            posterior_samples: ``{site: (S, ...)}`` to use instead of the guide (e.g. NUTS).
        """
        X = self._inputs(x, "x")
        y = self._targets(y, X)
        samples = self._resolve_samples(
            check_int("num_samples", num_samples), posterior_samples, seed
        )
        f = self._outputs(X, samples, None)
        log_p = self.likelihood.log_prob(f, y, samples)  # (S, N)
        return float((torch.logsumexp(log_p, 0) - math.log(log_p.shape[0])).mean())

    def forward(self, x: Any) -> torch.Tensor:
        """The predictive mean, ``predict(x)[0]``."""
        return self.predict(x)[0]
