"""``SVIPredictive``: the posterior predictive of a Pyro-trained BNN, from samples of its guide.

The base of :class:`~bnn_pyro.methods.vi.svi_model.SVIModel`: input checks, posterior draws and
``predict``
(and the Gaussian predictive and test log-likelihood built on them), vectorized over the samples
and streamed over blocks of rows. A subclass defines how to draw posterior samples
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
from bnn_pyro.likelihoods import GaussianLikelihood, Likelihood
from bnn_pyro.nn.inputs import InputSpec

__all__ = ["SVIPredictive"]
_NO_NOISE = "include_noise=True needs a Gaussian likelihood, not {!r}"


class SVIPredictive(BaseBayesianMethod):
    """The predictive side of an SVI-trained BNN (see the module docstring). Subclasses set
    ``self.likelihood`` and ``self.site_names`` and define ``model``,
    :meth:`_draw_posterior`, :meth:`_outputs` and :meth:`_output_dim`; ``dataset_size`` and
    ``input_shape`` are set by ``fit`` (``None`` before)."""

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
        samples = {k: torch.as_tensor(v, device=self.device) for k, v in posterior_samples.items()}
        # the shape of every site from one draw of the guide; an unfitted model (samples from
        # NUTS on its model) has no guide to draw from, and its sites are not checked
        reference = self.sample_posterior(1, seed=0) if self.is_fitted() else None
        counts = set()
        for name in self.site_names:
            got = tuple(samples[name].shape)
            want = None if reference is None else tuple(reference[name].shape[1:])
            if want is not None and got[1:] != want:
                raise ValueError(
                    f"posterior_samples[{name!r}] must have shape (S, *{want}), got {got}"
                )
            counts.add(got[0] if got else None)
        if len(counts) > 1:
            raise ValueError(f"posterior_samples must hold one S for all sites, got {counts}")
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
        X = self.prepare_inputs(x, "x")
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
        X = self.prepare_inputs(x, "x")
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
        X = self.prepare_inputs(x, "x")
        y = self.prepare_targets(y, X)
        samples = self._resolve_samples(
            check_int("num_samples", num_samples), posterior_samples, seed
        )
        f = self._outputs(X, samples, None)
        log_p = self.likelihood.log_prob(f, y, samples)  # (S, N)
        return float((torch.logsumexp(log_p, 0) - math.log(log_p.shape[0])).mean())

    def forward(self, x: Any) -> torch.Tensor:
        """The predictive mean, ``predict(x)[0]``."""
        return self.predict(x)[0]
