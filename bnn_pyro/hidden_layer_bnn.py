"""``HiddenLayerBNN``: an MLP of :class:`~bnn_pyro.distributions.HiddenLayer` sites, by SVI.

Every layer is a ``HiddenLayer`` sampled in the *model* inside the rows' plate, with
``KL_factor = kl_weight * B / N``: the plate scales each row's share of ``-KL_factor * KL`` by
``N / B``, so each step counts the KL once and ``Trace_ELBO``'s loss is the negative ELBO of the
whole data set. The learnable means and scales live in the model; the guide holds only the
likelihood's own latents (the noise scale of ``Gaussian(scale="learned")``), or nothing.

Training samples pre-activations (local reparameterization); :meth:`HiddenLayerBNN.predict`
draws whole weight matrices, so each predictive sample is one function of ``x``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from typing import Any

import pyro
import pyro.poutine as poutine
import torch
import torch.nn as nn
import torch.nn.functional as F
from pyro.poutine.util import site_is_subsample

from bnn_pyro._checks import as_tensor, check_float, check_int
from bnn_pyro.distributions import HiddenLayer
from bnn_pyro.exceptions import NotFittedError
from bnn_pyro.guides import KLWeight, MeanFieldNormalGuide
from bnn_pyro.likelihoods import Likelihood
from bnn_pyro.methods.base import BaseBayesianMethod, PredictOutput, summarize_samples
from bnn_pyro.nn.mlp import ACTIVATIONS
from bnn_pyro.nn.pyro_net import param_statement
from bnn_pyro.training import Callback, GuardedSVI, History, KLWeightSpec, make_elbo, make_optimizer
from bnn_pyro.training import run_svi as _run_svi

__all__ = ["HiddenLayerBNN"]

#: The plate of the HiddenLayer sites (the likelihood opens its own "data" plate over the rows).
ROWS_PLATE = "hidden_rows"
# The model's HiddenLayer sites have no guide site by design; Pyro's check warns about it.
_NO_GUIDE_SITE = "Found vars in model but not guide"


def _identity(a: torch.Tensor) -> torch.Tensor:
    return a


def _inverse_softplus(x: torch.Tensor) -> torch.Tensor:
    return x + torch.log(-torch.expm1(-x))


class HiddenLayerBNN(BaseBayesianMethod):
    """A fully connected BNN whose layers are ``HiddenLayer`` distributions.

    Args:
        in_features: input width ``D``.
        hidden_sizes: widths of the hidden layers (``[]``: a Bayesian linear model).
        out_features: net output width ``O`` (e.g. the number of classes).
        likelihood: the observation model (:mod:`bnn_pyro.likelihoods`).
        activation: a name from :data:`bnn_pyro.nn.mlp.ACTIVATIONS` or a callable.
        prior_scale: standard deviation of the ``Normal(0, prior_scale)`` prior on every weight
            and bias.
        init_scale: initial posterior standard deviation of every weight; the means start at
            ``nn.Linear``'s initialisation.

    Shapes:
        ``fit(X: (N, D), y: (N,) | (N, O))``; ``predict(X) -> mean (N, O'), variance (N, O')[,
        samples (S, N, O')]`` as :meth:`bnn_pyro.VariationalBNN.predict`.

    Example:
        >>> import bnn_pyro as bp
        >>> X = torch.linspace(-1, 1, 32).unsqueeze(-1); y = 2 * X.squeeze(-1)
        >>> bnn = bp.HiddenLayerBNN(1, [8], 1, bp.Gaussian(scale=0.1))
        >>> history = bnn.fit(X, y, epochs=5, batch_size=16, progress=False, seed=0)
        >>> mean, var = bnn.predict(X, num_samples=10)
        >>> mean.shape, var.shape
        (torch.Size([32, 1]), torch.Size([32, 1]))
    """

    def __init__(
        self,
        in_features: int,
        hidden_sizes: Sequence[int],
        out_features: int,
        likelihood: Likelihood,
        *,
        activation: str | Callable[[torch.Tensor], torch.Tensor] = "relu",
        prior_scale: float = 1.0,
        init_scale: float = 0.01,
    ) -> None:
        super().__init__()
        in_features = check_int("in_features", in_features)
        out_features = check_int("out_features", out_features)
        if isinstance(hidden_sizes, (str, bytes)) or not isinstance(hidden_sizes, Sequence):
            raise TypeError(f"hidden_sizes must be a sequence of ints, got {hidden_sizes!r}")
        hidden = [check_int(f"hidden_sizes[{i}]", h) for i, h in enumerate(hidden_sizes)]
        if not isinstance(likelihood, Likelihood):
            raise TypeError(
                f"likelihood must be a bnn_pyro.likelihoods.Likelihood, got "
                f"{type(likelihood).__name__}"
            )
        if isinstance(activation, str):
            if activation not in ACTIVATIONS:
                raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}: {activation!r}")
            activation = ACTIVATIONS[activation]()
        elif not callable(activation):
            raise TypeError(f"activation must be a name or a callable, got {activation!r}")
        self.prior_scale = check_float("prior_scale", prior_scale, minimum=0.0, strict=True)
        self.init_scale = check_float("init_scale", init_scale, minimum=0.0, strict=True)
        self.likelihood, self.activation = likelihood, activation
        self.in_features, self.out_features = in_features, out_features
        self.locs, self.rhos = nn.ParameterList(), nn.ParameterList()
        widths = [in_features, *hidden, out_features]
        for d_in, d_out in zip(widths[:-1], widths[1:], strict=True):
            init = nn.Linear(d_in, d_out)  # (D + 1, H): the last row is the bias
            loc = torch.cat([init.weight.detach().t(), init.bias.detach().unsqueeze(0)])
            self.locs.append(nn.Parameter(loc))
            self.rhos.append(nn.Parameter(_inverse_softplus(torch.full_like(loc, init_scale))))
        self.site_names = [f"layer{i}" for i in range(len(self.locs))]
        self.guide = self._make_guide()
        self.dataset_size: int | None = None

    def _make_guide(self) -> nn.Module:
        """A mean-field guide for the likelihood's own latents, or an empty guide."""
        x = torch.zeros(2, self.in_features)
        with torch.no_grad(), poutine.block():
            trace = poutine.trace(self.model).get_trace(x)
        latents = [
            name
            for name, site in trace.iter_stochastic_nodes()
            if not isinstance(site["fn"], HiddenLayer)
            and name != self.likelihood.name
            and not site_is_subsample(site)
        ]
        if not latents:
            return _EmptyGuide()
        hide = poutine.block(self.model, hide_fn=lambda msg: isinstance(msg["fn"], HiddenLayer))
        return MeanFieldNormalGuide(hide, init_scale=self.init_scale, name="likelihood_guide")

    # ------------------------------------------------------------------ the Pyro model
    def model(
        self,
        x: torch.Tensor,
        y: torch.Tensor | None = None,
        dataset_size: int | None = None,
        kl_weight: float = 1.0,
    ) -> torch.Tensor:
        """The HiddenLayer sites over the ``B`` rows of ``x``, then the observation site.

        Args:
            x: ``(B, D)``; y: ``(B,)``/``(B, O)`` or ``None``.
            dataset_size: ``N``, the rows ``x`` stands for (``None``: ``B``).
            kl_weight: beta, multiplies the KL (``KL_factor = kl_weight * B / N``).

        Returns:
            The net output ``(B, O)`` (``(S, B, O)`` under a plate of S samples).
        """
        b = x.shape[-2]
        n = b if dataset_size is None else dataset_size
        if n < b:
            raise ValueError(f"dataset_size must be >= the number of rows, got {n} < {b}")
        h = F.pad(x, (0, 1), value=1.0)  # the ones column: the first layer's bias
        last = len(self.locs) - 1
        subsample = None if n == b else torch.arange(b, device=x.device)
        with pyro.plate(ROWS_PLATE, n, subsample=subsample, dim=-1):
            for i, name in enumerate(self.site_names):
                loc = param_statement(f"{name}.A_mean", self.locs[i])
                rho = param_statement(f"{name}.A_rho", self.rhos[i])
                layer = HiddenLayer(
                    h,
                    loc,
                    F.softplus(rho),
                    non_linearity=self.activation if i < last else _identity,
                    KL_factor=kl_weight * b / n,
                    A_prior_scale=self.prior_scale,
                    include_hidden_bias=i < last,
                )
                h = pyro.sample(name, layer)
        with KLWeight(kl_weight) if kl_weight != 1.0 else nullcontext():
            latents = self.likelihood.sample_latents(h)
        self.likelihood.observe(h, y, latents, dataset_size)
        return h

    # ------------------------------------------------------------------ inputs
    @property
    def device(self) -> torch.device:
        """The device of the parameters."""
        return self.locs[0].device

    def _inputs(self, X: Any, name: str = "X") -> torch.Tensor:
        X = as_tensor(name, X, dtype=self.locs[0].dtype, device=self.device, min_dim=2)
        if X.dim() != 2 or X.shape[1] != self.in_features:
            raise ValueError(
                f"{name} must have shape (N, {self.in_features}), got {tuple(X.shape)}"
            )
        return X

    def _targets(self, y: Any, X: torch.Tensor, name: str = "y") -> torch.Tensor:
        y = as_tensor(name, y, device=self.device)
        if y.shape[0] != X.shape[0]:
            raise ValueError(
                f"X and {name} must have the same number of rows, got {X.shape[0]} and {y.shape[0]}"
            )
        return self.likelihood.check_targets(y, self.out_features)

    # ------------------------------------------------------------------ training
    def fit(
        self,
        X: Any,
        y: Any,
        *,
        epochs: int = 100,
        batch_size: int | None = 128,
        lr: float = 1e-2,
        optimizer: Any = None,
        num_particles: int = 1,
        kl_weight: KLWeightSpec = 1.0,
        callbacks: Iterable[Callback] = (),
        validation_data: tuple[Any, Any] | None = None,
        shuffle: bool = True,
        progress: bool = True,
        seed: int | None = None,
    ) -> History:
        """Train by SVI with ``Trace_ELBO`` on ``(X, y)``; arguments as
        :meth:`bnn_pyro.VariationalBNN.fit`. Calling ``fit`` again continues training.

        Args:
            X: ``(N, D)`` inputs; y: ``(N,)``/``(N, O)`` targets.

        Returns:
            :class:`bnn_pyro.training.History` (``loss`` is the negative ELBO).
        """
        epochs = check_int("epochs", epochs, minimum=0)
        lr = check_float("lr", lr, minimum=0.0, strict=True)
        num_particles = check_int("num_particles", num_particles)
        if not callable(kl_weight):
            check_float("kl_weight", kl_weight, minimum=0.0)
        if seed is not None:
            check_int("seed", seed, minimum=0)
        X = self._inputs(X)
        y = self._targets(y, X)
        n = X.shape[0]
        batch = n if batch_size is None else min(check_int("batch_size", batch_size), n)
        validation = None
        if validation_data is not None:
            if not (isinstance(validation_data, (tuple, list)) and len(validation_data) == 2):
                raise ValueError("validation_data must be a pair (X_val, y_val)")
            X_val = self._inputs(validation_data[0], "X_val")
            y_val = self._targets(validation_data[1], X_val, "y_val")
            validation = lambda: -self.log_predictive_density(X_val, y_val, 20, seed=0)  # noqa: E731
        generator = torch.Generator().manual_seed(
            seed if seed is not None else int(torch.randint(2**31, ()).item())
        )

        def batches() -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
            order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
            for start in range(0, n, batch):
                idx = order[start : start + batch].to(X.device)
                yield X[idx], y[idx]

        fork = torch.random.fork_rng(devices=[]) if seed is not None else nullcontext()
        with fork, warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_NO_GUIDE_SITE)
            if seed is not None:
                torch.manual_seed(seed)
            if isinstance(self.guide, MeanFieldNormalGuide) and not self.guide.is_setup:
                with torch.no_grad():  # creates the guide's parameters before listing them
                    self.guide(X[:2], y[:2])
            params = list(self.parameters())
            svi = GuardedSVI(
                self.model,
                self.guide,
                make_optimizer(optimizer, params, lr),
                make_elbo("trace", num_particles, vectorize=True),
                params,
            )
            self.dataset_size = n
            return _run_svi(
                self,
                svi,
                batches,
                epochs=epochs,
                dataset_size=n,
                kl_weight=kl_weight,
                callbacks=list(callbacks),
                validation=validation,
                progress=progress,
            )

    # ------------------------------------------------------------------ prediction
    def _check_fitted(self) -> None:
        if self.dataset_size is None:
            raise NotFittedError("this HiddenLayerBNN is not fitted yet: call fit(X, y) first")

    @torch.no_grad()
    def sample_posterior(
        self, num_samples: int, seed: int | None = None
    ) -> dict[str, torch.Tensor]:
        """``num_samples`` draws of every weight matrix (and of the likelihood's latents).

        Returns:
            ``{"layer<i>": (S, D_i + 1, H_i), ...}`` (the last row of each is the bias).
        """
        num_samples = check_int("num_samples", num_samples)
        self._check_fitted()
        generator = None  # the global RNG, as VariationalBNN.sample_posterior
        if seed is not None:
            generator = torch.Generator(device=self.device)
            generator.manual_seed(check_int("seed", seed, minimum=0))
        out = {}
        for name, loc, rho in zip(self.site_names, self.locs, self.rhos, strict=True):
            eps = torch.randn((num_samples, *loc.shape), generator=generator, device=self.device)
            out[name] = loc + F.softplus(rho) * eps
        if isinstance(self.guide, MeanFieldNormalGuide):
            out.update(self.guide.sample_posterior(num_samples, generator=generator))
        return out

    def _outputs(self, X: torch.Tensor, samples: dict[str, torch.Tensor]) -> torch.Tensor:
        widths = max(self.locs[i].shape[-1] for i in range(len(self.locs)))
        num = samples[self.site_names[0]].shape[0]
        chunk = max(16, (1 << 18) // (num * widths))
        outs = []
        for start in range(0, X.shape[0], chunk):
            h = F.pad(X[start : start + chunk], (0, 1), value=1.0)
            for i, name in enumerate(self.site_names):
                h = torch.matmul(h, samples[name])
                if i < len(self.site_names) - 1:
                    h = F.pad(self.activation(h), (0, 1), value=1.0)
            outs.append(h)
        return torch.cat(outs, dim=1)

    @torch.no_grad()
    def predict(
        self,
        x: Any,
        return_samples: bool = False,
        *,
        num_samples: int = 100,
        include_noise: bool = False,
        seed: int | None = None,
        normalize_output: bool = True,
    ) -> PredictOutput:
        """Posterior predictive mean and variance from ``num_samples`` weight draws.

        Args:
            x: ``(N, D)`` inputs.
            return_samples: also return the per-sample predictive means ``(S, N, O')``.
            num_samples: ``S``.
            include_noise: add the aleatoric variance (Gaussian likelihoods).
            seed: reproducible draws without touching the global RNG.
            normalize_output: kept for the shared interface; the likelihood decides the link.

        Returns:
            ``mean (N, O')``, ``variance (N, O')`` and, with ``return_samples``, ``(S, N, O')``.
        """
        X = self._inputs(x, "x")
        samples = self.sample_posterior(num_samples, seed)
        f = self._outputs(X, samples)
        means = self.likelihood.mean(f)
        out = summarize_samples(means, return_samples)
        if include_noise:
            noise = self.likelihood.noise_variance(f, samples)
            if noise is None:
                raise ValueError(
                    f"include_noise=True needs a Gaussian likelihood, not {self.likelihood!r}"
                )
            return (out[0], out[1] + noise.expand_as(means).mean(0), *out[2:])  # type: ignore[return-value]
        return out

    @torch.no_grad()
    def log_predictive_density(
        self, x: Any, y: Any, num_samples: int = 100, seed: int | None = None
    ) -> float:
        """Mean over points of ``log (1/S) sum_s p(y_n | x_n, w_s)``.

        Args:
            x: ``(N, D)``; y: ``(N,)``/``(N, O)``; num_samples: ``S``; seed: for the draws.
        """
        X = self._inputs(x, "x")
        y = self._targets(y, X)
        samples = self.sample_posterior(num_samples, seed)
        log_p = self.likelihood.log_prob(self._outputs(X, samples), y, samples)
        return float((torch.logsumexp(log_p, 0) - math.log(log_p.shape[0])).mean())

    def kl_divergence(self) -> torch.Tensor:
        """The exact ``KL(q || p)`` of the weights, summed over the layers."""
        x = torch.zeros(1, 1, dtype=self.locs[0].dtype, device=self.device)
        return sum(
            HiddenLayer(
                x.expand(1, loc.shape[0]), loc, F.softplus(rho), A_prior_scale=self.prior_scale
            ).KL
            for loc, rho in zip(self.locs, self.rhos, strict=True)
        )

    def forward(self, x: Any) -> torch.Tensor:
        """The predictive mean, ``predict(x)[0]``."""
        return self.predict(x)[0]


class _EmptyGuide(nn.Module):
    """The guide of a model whose only latents are its HiddenLayer sites."""

    def forward(self, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
        return {}
