"""``SamplePredictive``: the predictive of a method that holds ``K`` posterior samples of a
:class:`~bnn_pyro.VariationalBNN`'s latent sites (the SG-MCMC methods): ``S`` of them chosen
under a seed and evaluated by the inner model's vectorized ``predict``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from bnn_pyro.base import BaseBayesianMethod, PredictOutput
from bnn_pyro.exceptions import NotFittedError
from bnn_pyro.methods.sgmcmc.potential import PyroPotential
from bnn_pyro.methods.vi.model import VariationalBNN
from bnn_pyro.training.in_sample import check_predictive_in_sample

__all__ = ["OFF_THE_DATA", "SamplePredictive"]

#: The in-sample warning's reading for a chain (:meth:`SamplePredictive.check_in_sample`).
OFF_THE_DATA = (
    "A chain does this when its step is too large for the posterior it reached (a noise "
    "learned small makes the potential's curvature grow as 1/sigma^2) or has not burned in "
    "yet: a smaller lr, or the scale-adapted sampler 'sghmc', usually help."
)


class SamplePredictive(BaseBayesianMethod):
    """The predictive side of :class:`~bnn_pyro.methods.sgmcmc.method.SGMCMC`: a subclass sets
    ``bnn`` (the :class:`~bnn_pyro.VariationalBNN` whose model the samples are of),
    ``potential`` (the layout of the flat samples; ``None`` before a fit) and the buffer
    ``kept_samples`` ``(K, P)``.

    Example:
        >>> import bnn_pyro as bp
        >>> m = bp.make("sghmc", bp.nn.mlp(2, [4], 1), bp.Gaussian(0.5))
        >>> isinstance(m, SamplePredictive)
        True
    """

    hooks = (*BaseBayesianMethod.hooks, "check_in_sample", "validation_score")
    bnn: VariationalBNN
    potential: PyroPotential | None
    kept_samples: torch.Tensor
    _step: Any  # the run's ChainStep while ``fit`` runs, else None

    def validation_score(
        self, xv: torch.Tensor, yv: torch.Tensor, run: Any = None
    ) -> Callable[[], dict[str, float]]:
        """The score ``fit`` reads after each epoch with ``validation_data``: ``val_nll``, the
        negative log predictive density of ``(xv, yv)`` under the run's last 20 kept samples
        (its position alone before it keeps one). ``run``: the chain's step (``start_run``'s),
        where it is not the one ``fit`` is running (a chain of the stacked fit)."""

        def score() -> dict[str, float]:
            step = self._step if run is None else run
            if step is not None and step.collector.kept:
                flat = step.collector.samples[-20:]
            else:
                flat = step.potential.constrain(step.theta).unsqueeze(0)
            samples = step.potential.unflatten(flat)
            lpd = self.bnn.log_predictive_density(xv, yv, posterior_samples=samples)
            return {"val_nll": -lpd}

        return score

    # ------------------------------------------------------------------ the samples
    def samples(self) -> dict[str, torch.Tensor]:
        """Every kept sample, ``{site: (K, *shape)}`` (weights, and a learned noise scale).

        Example:
            >>> import bnn_pyro as bp
            >>> m = bp.make("sgld", bp.nn.mlp(1, [], 1), bp.Gaussian(0.5), max_samples=5)
            >>> X = torch.linspace(-1, 1, 8)[:, None]
            >>> _ = m.fit(X, 2 * X[:, 0], epochs=40, progress=False, seed=0)
            >>> m.samples()["net.0.weight"].shape
            torch.Size([5, 1, 1])
        """
        if self.potential is None or not len(self.kept_samples):
            raise NotFittedError(f"this {type(self).__name__} has no samples yet: call fit(X, y)")
        return self.potential.unflatten(self.kept_samples)

    def _chosen(
        self, num_samples: int | None, seed: int | None, generator: torch.Generator | None
    ) -> dict[str, torch.Tensor]:
        """``S`` of the ``K`` kept samples for one prediction, chosen under ``seed``: distinct
        ones if ``S <= K`` (all of them if ``S = K``), else ``S`` draws with replacement."""
        s = self._samples_to_draw(num_samples)
        seed = self._predict_seed(seed, generator)
        kept = self.samples()
        k = len(self.kept_samples)
        g = torch.Generator()
        g.manual_seed(int(torch.randint(0, 2**62, (1,))) if seed is None else seed)
        index = (
            torch.randperm(k, generator=g)[:s] if s <= k else torch.randint(0, k, (s,), generator=g)
        )
        index = index.to(self.kept_samples.device)
        return {name: value[index] for name, value in kept.items()}

    # ------------------------------------------------------------------ predict
    def predict(
        self,
        x: Any,
        return_samples: bool = False,
        *,
        num_samples: int | None = None,
        include_noise: bool = False,
        chunk_size: int | None = None,
        seed: int | None = None,
        generator: torch.Generator | None = None,
    ) -> PredictOutput:
        """The predictive over ``S`` of the kept samples, in one vectorized pass per block of
        rows (:meth:`bnn_pyro.VariationalBNN.predict` on them).

        Args:
            x: ``(N, *features)`` inputs.
            return_samples: also return the per-sample predictive means ``(S, N, O')``.
            num_samples: ``S`` (default the constructor's): ``S`` distinct kept samples at
                random if ``S <= K``, else ``S`` random draws from them.
            include_noise: add the Gaussian likelihood's noise variance.
            chunk_size: rows per pass.
            seed, generator: the choice of samples (one or the other).

        Returns:
            ``mean (N, O')``, ``variance (N, O')`` and, if asked, ``samples (S, N, O')``.
        """
        chosen = self._chosen(num_samples, seed, generator)
        return self.bnn.predict(
            x,
            return_samples,
            include_noise=include_noise,
            posterior_samples=chosen,
            chunk_size=chunk_size,
        )

    def predictive_gaussian(
        self, x: Any, num_samples: int | None = None, seed: int | None = None, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The Gaussian predictive as a mixture over ``S`` kept samples: ``locs (S, N, O)``
        and the noise ``scales`` of each (a Gaussian likelihood only)."""
        chosen = self._chosen(num_samples, seed, kwargs.pop("generator", None))
        return self.bnn.predictive_gaussian(x, posterior_samples=chosen, **kwargs)

    def forward(self, x: Any) -> torch.Tensor:
        """The predictive mean, ``predict(x)[0]``."""
        return self.predict(x)[0]

    def check_in_sample(
        self, X: torch.Tensor, y: torch.Tensor, what: str = "the chain"
    ) -> torch.Tensor | None:
        """After a regression run: warn (``TrainingInstabilityWarning``) when the kept samples'
        predictive mean is worse on the training rows than their mean is
        (:func:`bnn_pyro.training.in_sample.check_predictive_in_sample`); ``SGMCMC.fit`` and the
        stacked fit call it. Other likelihoods, or a run that kept no sample, are not checked.

        Args:
            X: ``(N, ...)`` and y: ``(N, O)``: the run's rows, prepared as ``fit`` prepares them.
            what: how the warning names the chain.

        Returns:
            ``(O,)`` in-sample ``R²``, or ``None`` where nothing was checked.

        Example:
            >>> import bnn_pyro as bp
            >>> X = torch.linspace(-1, 1, 64)[:, None]; y = 2 * X
            >>> m = bp.make("sghmc", bp.nn.mlp(1, [8], 1), bp.Gaussian(scale=0.1))
            >>> _ = m.fit(X, y, epochs=200, batch_size=None, progress=False, seed=0)
            >>> bool(m.check_in_sample(X, y) > 0.9)  # fit has run it, and warned nothing
            True
        """
        if not self.bnn.likelihood.gaussian:
            return None
        if self.potential is None or not len(self.kept_samples):
            return None
        return check_predictive_in_sample(self, X, y, what, OFF_THE_DATA)
