"""``SVIPredictive``: the posterior predictive of a Pyro-trained BNN, from samples of its guide
or from samples given (``posterior_samples=``: NUTS, SG-MCMC, any ``{site: (S, *shape)}``).

The base of :class:`~bnn_pyro.methods.vi.svi_model.SVIModel`: input checks, posterior draws and
``predict`` (and the Gaussian predictive and test log-likelihood built on them), vectorized over
the samples and streamed over blocks of rows. A subclass defines how to draw posterior samples
(:meth:`SVIPredictive._draw_posterior`) and how to evaluate the net on them
(:meth:`SVIPredictive._outputs`).
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Callable, Mapping
from typing import Any

import torch

from bnn_pyro._checks import as_tensor, check_int
from bnn_pyro._rng import seeded
from bnn_pyro._streaming import block_rows, stream_summary
from bnn_pyro.base import BaseBayesianMethod, PredictOutput
from bnn_pyro.exceptions import NotFittedError
from bnn_pyro.likelihoods import Likelihood
from bnn_pyro.methods.vi.given_samples import check_posterior_samples, model_site_shapes
from bnn_pyro.nn.inputs import InputSpec
from bnn_pyro.nn.modes import modes

__all__ = ["SVIPredictive"]
_NO_NOISE = "include_noise=True needs a Gaussian likelihood, not {!r}"


class SVIPredictive(BaseBayesianMethod):
    """The predictive side of an SVI-trained BNN (see the module docstring). Subclasses set
    ``self.likelihood`` and ``self.site_names`` and define ``model``,
    :meth:`_draw_posterior`, :meth:`_outputs` and :meth:`_output_dim`; ``dataset_size`` and
    ``input_shape`` are set by ``fit`` (``None`` before)."""

    hooks = (
        *BaseBayesianMethod.hooks,
        "prepare_inputs",
        "prepare_targets",
        "batch_targets",
        "prepare_posterior_samples",
        "posterior_samples_note",
    )
    likelihood: Likelihood
    site_names: list[str]
    dataset_size: int | None
    input_shape: tuple[int, ...] | None

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

    #: Appended to the error on a given posterior sample of the wrong shape.
    posterior_samples_note: str = ""

    def _posterior_site_shapes(self, x: torch.Tensor) -> dict[str, tuple[int, ...]]:
        """``{site: shape}`` of one posterior draw of every sample site of the model, for inputs
        like ``x`` (its first row is run through the model, in evaluation mode)."""
        with modes(self, lambda m: False):
            return model_site_shapes(self.model, x[:1])

    def is_fitted(self) -> bool:
        """Whether ``fit`` has run (or a saved model was loaded): the guide has parameters."""
        return self.dataset_size is not None

    # ------------------------------------------------------------------ inputs
    def prepare_inputs(self, X: Any, name: str = "X") -> torch.Tensor:
        """``X`` as a tensor on the model's device and dtype, ``(N, *features)`` with ``N >= 1``
        and the features the net takes (after a fit: the training inputs' shape); a
        ``ValueError``/``TypeError`` naming ``name`` otherwise.

        Example:
            >>> import bnn_pyro as bp
            >>> bnn = bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1))
            >>> bnn.prepare_inputs([[0.0, 1.0]]).shape
            torch.Size([1, 2])
        """
        X = as_tensor(name, X, dtype=self.dtype, device=self.device, min_dim=2)
        if len(X) == 0:
            raise ValueError(f"{name} must have at least one row, got shape {tuple(X.shape)}")
        spec = InputSpec.exact(self.input_shape) if self.input_shape else None
        (spec or self._expected_features() or InputSpec(())).check(name, X)
        return X

    def prepare_targets(
        self, y: Any, X: torch.Tensor, name: str = "y", out_dim: int | None = None
    ) -> torch.Tensor:
        """``y`` checked against ``X (N, ...)`` (the same ``N``) and the likelihood (e.g. class
        indices below the net's ``out_dim`` outputs for a ``Categorical``), on the model's device:
        ``(N,)`` or ``(N, O)`` as the likelihood takes it."""
        y = as_tensor(name, y, device=self.device)
        if y.shape[0] != X.shape[0]:
            raise ValueError(
                f"X and {name} must have the same number of rows, got {X.shape[0]} and {y.shape[0]}"
            )
        return self.likelihood.check_targets(y, out_dim or self._output_dim(X))

    def batch_targets(self) -> Callable[[Any, torch.Tensor, str], torch.Tensor]:
        """:meth:`prepare_targets` for a loader's batches: the net's output width is found once."""
        width: list[int] = []

        def targets(y: Any, X: torch.Tensor, name: str) -> torch.Tensor:
            if not width:
                width.append(self._output_dim(X))
            return self.prepare_targets(y, X, name, width[0])

        return targets

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
        if not self.is_fitted():
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet: call fit(X, y)")
        if x is None:
            x = torch.zeros((1, *(self.input_shape or ())), device=self.device, dtype=self.dtype)
        generator = None
        if seed is not None:
            generator = torch.Generator(device=self.device)
            generator.manual_seed(check_int("seed", seed, minimum=0))
        with seeded(seed, self.device), torch.no_grad():
            return self._draw_posterior(num_samples, generator, x)

    def prepare_posterior_samples(
        self, samples: Mapping[str, Any], X: Any, needed_by: str | None = None
    ) -> dict[str, torch.Tensor]:
        """Given posterior samples checked against this model, as :meth:`predict` reads them.

        The model need not be fitted (``X`` gives the input shape). Before any work
        (:func:`~bnn_pyro.methods.vi.given_samples.check_posterior_samples`): every weight site
        of ``self.site_names`` given; no site the model lacks (its other sites, such as
        ``"obs"`` or a prior's scales, are ignored); each site's shape; one ``S``; no NaN or
        inf. Chains ``(C, S, *shape)`` (``mcmc.get_samples(group_by_chain=True)``) are
        flattened to ``(C * S, *shape)``, as ``mcmc.get_samples()`` lays them out.

        Args:
            samples: ``{site: (S, *site_shape)}``, e.g. ``mcmc.get_samples()`` of
                ``MCMC(NUTS(bnn.model))``; tensors or arrays.
            X: ``(N, *features)`` inputs (:meth:`prepare_inputs`).
            needed_by: the call that reads the likelihood's own sites (a learned noise scale
                ``"likelihood.scale"``, ``(S, O)``), which must then be given; ``None``: they
                are used when given.

        Returns:
            ``{site: (S, *site_shape)}`` on the model's device and dtype: the weights and the
            likelihood's sites that were given.

        Example:
            >>> import bnn_pyro as bp
            >>> bnn = bp.VariationalBNN(bp.nn.mlp(2, [], 1), bp.Gaussian(0.1))
            >>> draws = {"net.0.weight": torch.ones(4, 1, 2), "net.0.bias": torch.zeros(4, 1)}
            >>> sorted(bnn.prepare_posterior_samples(draws, torch.zeros(3, 2)))
            ['net.0.bias', 'net.0.weight']
        """
        X = self.prepare_inputs(X, "x")
        shapes = self._posterior_site_shapes(X)
        out = torch.zeros((1, self._output_dim(X[:2])), device=self.device, dtype=self.dtype)
        latents = list(model_site_shapes(self.likelihood.sample_latents, out))
        args = (self.site_names, latents, needed_by, self.device, self.dtype)
        return check_posterior_samples(samples, shapes, *args, self.posterior_samples_note)

    def _resolve_samples(
        self,
        num_samples: int | None,
        posterior_samples: Mapping[str, torch.Tensor] | None,
        seed: int | None,
        X: torch.Tensor,
        needed_by: str | None = None,
    ) -> Mapping[str, torch.Tensor]:
        """The guide's draws, or the given ones checked (``num_samples``, if set, must be their
        ``S``)."""
        if posterior_samples is None:
            return self.sample_posterior(self._samples_to_draw(num_samples), seed=seed)
        samples = self.prepare_posterior_samples(posterior_samples, X, needed_by)
        given = next(iter(samples.values())).shape[0]
        if num_samples is not None and num_samples != given:
            raise ValueError(
                f"num_samples={num_samples} but posterior_samples holds S = {given} draws: leave "
                "num_samples out (every given draw is used)"
            )
        return samples

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

        From samples of your own: ``posterior_samples={site: (S, *site_shape)}`` replaces the
        guide's draws (the model need not be fitted), e.g. ``mcmc.get_samples()`` of
        ``MCMC(NUTS(bnn.model))``, an SG-MCMC run's ``samples()`` or a dict by hand; so does the
        same keyword of :meth:`predictive_gaussian` (the mixture :mod:`bnn_pyro.metrics` scores)
        and of :meth:`log_predictive_density`. They are checked first
        (:meth:`prepare_posterior_samples`); a learned noise is read from its site
        ``"likelihood.scale"`` ``(S, O)``, which ``include_noise`` then needs.

        Args:
            x: ``(N, *features)`` inputs.
            return_samples: also return the per-sample predictive means ``(S, N, O')``.
            num_samples: ``S``, draws from the guide (default: ``self.num_samples``, 100 unless
                the constructor set it); with ``posterior_samples``, leave it out (or give
                their ``S``).
            include_noise: add the aleatoric variance (Gaussian likelihoods: the mean over
                samples of ``scale**2``) to the epistemic one.
            posterior_samples: ``{site: (S, *site_shape)}`` (or ``(C, S, *site_shape)``) to
                use instead of the guide (see above); ``seed`` and ``generator`` then draw
                nothing.
            chunk_size: rows per pass (default: sized from the layer widths).
            seed: reproducible draws without touching the global RNG.
            generator: the random source of the draws, as the classic methods take it (an
                alternative to ``seed``).

        Returns:
            ``mean (N, O')`` (class probabilities for ``Categorical``), ``variance (N, O')``:
            epistemic (the variance of the per-sample means) unless ``include_noise``, and, with
            ``return_samples``, ``samples (S, N, O')``.

        Example:
            NUTS on the model of an unfitted ``f = w x + b``, then its predictive:

            >>> import pyro, bnn_pyro as bp
            >>> from pyro.infer import MCMC, NUTS
            >>> X = torch.linspace(-1, 1, 20)[:, None]; y = 2 * X[:, 0]
            >>> bnn = bp.VariationalBNN(bp.nn.mlp(1, [], 1), bp.Gaussian(scale="learned"))
            >>> pyro.set_rng_seed(0)
            >>> mcmc = MCMC(NUTS(bnn.model), num_samples=50, warmup_steps=50, disable_progbar=True)
            >>> mcmc.run(X, y)
            >>> draws = mcmc.get_samples()  # {site: (50, *shape)}, the noise scale among them
            >>> mean, var = bnn.predict(X, posterior_samples=draws, include_noise=True)
            >>> locs, scales = bnn.predictive_gaussian(X, posterior_samples=draws)
            >>> mean.shape, locs.shape, scales.shape
            (torch.Size([20, 1]), torch.Size([50, 20, 1]), torch.Size([50, 1, 1]))
        """
        if num_samples is not None:
            check_int("num_samples", num_samples)
        chunk_size = None if chunk_size is None else check_int("chunk_size", chunk_size)
        X = self.prepare_inputs(x, "x")
        seed = self._predict_seed(seed, generator)
        needed_by = "predict(include_noise=True)" if include_noise else None
        samples = self._resolve_samples(num_samples, posterior_samples, seed, X, needed_by)

        def block(start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor | None]:
            f = self._outputs(X[start:stop], samples, chunk_size)
            means = self.likelihood.mean(f)
            noise = self.likelihood.noise_variance(f, samples) if include_noise else None
            if include_noise and noise is None:
                raise ValueError(_NO_NOISE.format(self.likelihood))
            return means, None if noise is None else noise.expand_as(means).mean(0)

        width = self._output_dim(X[:2])  # X has rows: prepare_inputs refuses none
        rows = block_rows(next(iter(samples.values())).shape[0], width)
        return stream_summary(X.shape[0], rows, block, return_samples)

    def predictive_gaussian(
        self,
        x: Any,
        num_samples: int | None = None,
        seed: int | None = None,
        *,
        posterior_samples: Mapping[str, torch.Tensor] | None = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Gaussian predictive as a mixture over samples: ``locs (S, N, O)``, ``scales`` (the noise
        standard deviation of each sample, broadcastable to ``locs``).

        Args:
            x: ``(N, *features)`` inputs.
            num_samples: ``S``, the draws from the guide.
            seed: makes the draws reproducible without touching the global RNG.
            posterior_samples: ``{site: (S, *site_shape)}`` to use instead of the guide, as
                :meth:`predict` takes them (a learned noise scale must be among them).
            **kwargs: ``chunk_size``, ``generator`` as :meth:`predict` takes them.

        Raises:
            ValueError: the likelihood is not Gaussian.

        Example:
            >>> import bnn_pyro as bp
            >>> bnn = bp.VariationalBNN(bp.nn.mlp(1, [], 1), bp.Gaussian(scale="learned"))
            >>> draws = {"net.0.weight": torch.ones(3, 1, 1), "net.0.bias": torch.zeros(3, 1),
            ...          "likelihood.scale": torch.full((3, 1), 0.5)}
            >>> locs, scales = bnn.predictive_gaussian(torch.ones(2, 1), posterior_samples=draws)
            >>> locs.shape, scales.flatten().tolist()
            (torch.Size([3, 2, 1]), [0.5, 0.5, 0.5])
        """
        if not self.likelihood.gaussian:
            raise ValueError(
                f"predictive_gaussian needs a Gaussian likelihood, not {self.likelihood!r}"
            )
        if num_samples is not None:
            check_int("num_samples", num_samples)
        chunk_size = kwargs.get("chunk_size")
        chunk_size = None if chunk_size is None else check_int("chunk_size", chunk_size)
        X = self.prepare_inputs(x, "x")
        seed = self._predict_seed(seed, kwargs.get("generator"))
        samples = self._resolve_samples(
            num_samples, posterior_samples, seed, X, "predictive_gaussian"
        )
        f = self._outputs(X, samples, chunk_size)
        return self.likelihood.mean(f), self.likelihood.noise_variance(f, samples).sqrt()

    def log_predictive_density(
        self,
        x: Any,
        y: Any,
        num_samples: int | None = None,
        seed: int | None = None,
        posterior_samples: Mapping[str, torch.Tensor] | None = None,
    ) -> float:
        """Mean over points of ``log (1/S) sum_s p(y_n | x_n, w_s)`` (the test log-likelihood).

        Args:
            x: ``(N, *features)``; y: ``(N,)``/``(N, O)`` targets.
            num_samples: ``S`` draws from the guide (default 100); with ``posterior_samples``,
                leave it out (or give their ``S``).
            seed: reproducible draws without touching the global RNG.
            posterior_samples: ``{site: (S, *site_shape)}`` to use instead of the guide, as
                :meth:`predict` takes them (a learned noise scale must be among them).

        Example:
            >>> import bnn_pyro as bp
            >>> bnn = bp.VariationalBNN(bp.nn.mlp(1, [], 1), bp.Gaussian(1.0))
            >>> draws = {"net.0.weight": torch.zeros(2, 1, 1), "net.0.bias": torch.zeros(2, 1)}
            >>> x, y = torch.zeros(1, 1), torch.zeros(1)
            >>> round(bnn.log_predictive_density(x, y, posterior_samples=draws), 4)  # N(0; 0, 1)
            -0.9189
        """
        if num_samples is not None:
            check_int("num_samples", num_samples)
        X = self.prepare_inputs(x, "x")
        y = self.prepare_targets(y, X)
        if posterior_samples is None and num_samples is None:
            num_samples = 100
        samples = self._resolve_samples(
            num_samples, posterior_samples, seed, X, "log_predictive_density"
        )
        f = self._outputs(X, samples, None)
        log_p = self.likelihood.log_prob(f, y, samples)  # (S, N)
        return float((torch.logsumexp(log_p, 0) - math.log(log_p.shape[0])).mean())

    def forward(self, x: Any) -> torch.Tensor:
        """The predictive mean, ``predict(x)[0]``."""
        return self.predict(x)[0]
