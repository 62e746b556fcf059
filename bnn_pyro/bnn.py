"""``VariationalBNN``: net + prior + likelihood + guide, trained by SVI.

The model is a plain Pyro model: every Bayesian weight is a ``pyro.sample`` site (``PyroSample``
on a ``PyroModule``), the likelihood sits in ``pyro.plate("data", size=N, subsample=...)``, and
the model holds no parameters of its own (point-estimate layers aside), so ``bnn.model`` runs
unchanged under ``SVI``, ``Predictive(parallel=True)`` and ``MCMC(NUTS(bnn.model))``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Mapping
from contextlib import nullcontext
from typing import Any

import pyro.poutine as poutine
import torch
import torch.nn as nn
from pyro.infer import autoguide
from torch.utils.data import DataLoader

from bnn_pyro._checks import as_tensor, check_float, check_int
from bnn_pyro.exceptions import NotFittedError
from bnn_pyro.guides import GUIDE_NAMES, KLWeight, MeanFieldNormalGuide, build_guide
from bnn_pyro.likelihoods import GaussianLikelihood, Likelihood
from bnn_pyro.methods.base import BaseBayesianMethod, PredictOutput, summarize_samples
from bnn_pyro.nn.batched import chunk_rows
from bnn_pyro.nn.pyro_net import make_bayesian_
from bnn_pyro.posterior import NetEvaluator, draw_posterior
from bnn_pyro.poutine import ESTIMATORS, LocalReparameterization
from bnn_pyro.priors import IIDPrior, Prior
from bnn_pyro.training import (
    Callback,
    GuardedSVI,
    History,
    KLWeightSpec,
    make_elbo,
    make_optimizer,
    run_svi,
)

__all__ = ["VariationalBNN"]

# Autoguides that do not draw each weight from a Normal site of its own.
_JOINT_GUIDES = (
    autoguide.AutoDiagonalNormal,
    autoguide.AutoLowRankMultivariateNormal,
    autoguide.AutoMultivariateNormal,
    autoguide.AutoDelta,
)


def _default_prior() -> Prior:
    import pyro.distributions as dist

    return IIDPrior(dist.Normal(0.0, 1.0))


class VariationalBNN(BaseBayesianMethod):
    """A Bayesian neural network trained by stochastic variational inference (Bayes by Backprop).

    Args:
        net: any ``torch.nn.Module`` mapping ``(N, *features)`` to ``(N, O)`` (e.g.
            :func:`bnn_pyro.nn.mlp`). It is copied; the copy becomes the Pyro model.
        likelihood: the observation model, e.g. ``Gaussian(scale="learned")``, ``Categorical()``.
        prior: which parameters are Bayesian and their prior; default ``IIDPrior(Normal(0, 1))``
            on every linear/conv parameter.
        guide: ``"meanfield"`` (the exact mean-field :class:`MeanFieldNormalGuide`, default),
            ``"normal"``/``"lowrank"``/``"delta"``/``"diagonal"`` (Pyro autoguides), an
            ``AutoGuide`` class, or a factory ``model -> guide``.
        init_scale: initial posterior standard deviation of every weight. The guide's means
            start at the net's own initial weights.
        local_reparameterization: ``False`` (default: the net runs on the drawn weights),
            ``True``/``"local"`` (linear and conv layers sample their pre-activations, Kingma
            et al. 2015) or ``"flipout"`` (Wen et al. 2018), in training mode only (see
            :class:`bnn_pyro.poutine.LocalReparameterization`). Same posterior family, same
            guide, an ELBO gradient with less variance; ``predict`` still draws weights. Needs
            a guide that draws each weight from its own Normal (``"meanfield"``, ``"normal"``).

    Shapes:
        ``fit(X: (N, *features), y: (N,) | (N, O))``; ``predict(X) -> mean (N, O'), variance
        (N, O')[, samples (S, N, O')]`` where ``O'`` is ``O`` for regression/Bernoulli and the
        number of classes for ``Categorical`` (probabilities).

    Example:
        >>> import bnn_pyro as bp
        >>> X = torch.linspace(-1, 1, 32).unsqueeze(-1); y = 2 * X.squeeze(-1)
        >>> bnn = bp.VariationalBNN(bp.nn.mlp(1, [8], 1), bp.likelihoods.Gaussian(scale=0.1))
        >>> history = bnn.fit(X, y, epochs=5, batch_size=16, progress=False, seed=0)
        >>> mean, var = bnn.predict(X, num_samples=10)
        >>> mean.shape, var.shape
        (torch.Size([32, 1]), torch.Size([32, 1]))
    """

    def __init__(
        self,
        net: nn.Module,
        likelihood: Likelihood,
        prior: Prior | None = None,
        guide: str | type | Callable[..., Any] = "meanfield",
        init_scale: float = 0.01,
        local_reparameterization: bool | str = False,
    ) -> None:
        super().__init__()
        if not isinstance(net, nn.Module):
            raise TypeError(f"net must be a torch.nn.Module, got {type(net).__name__}")
        if not isinstance(likelihood, Likelihood):
            raise TypeError(
                "likelihood must be a bnn_pyro.likelihoods.Likelihood (e.g. Gaussian(), "
                f"Categorical()), got {type(likelihood).__name__}"
            )
        prior = _default_prior() if prior is None else prior
        if not isinstance(prior, Prior):
            raise TypeError(f"prior must be a bnn_pyro.priors.Prior, got {type(prior).__name__}")
        init_scale = check_float("init_scale", init_scale, minimum=0.0, strict=True)
        self.local_reparameterization = _reparameterization(local_reparameterization, guide)
        self.likelihood = likelihood
        self.prior = prior
        self.init_scale = init_scale
        self.guide_spec = guide if isinstance(guide, str) else getattr(guide, "__name__", "custom")
        self.net = copy.deepcopy(net)
        sites = make_bayesian_(self.net, prior, name="net")
        self.site_names = [s.name for s in sites]
        self.guide = build_guide(guide, self.model, {s.name: s.init for s in sites}, init_scale)
        self._evaluator = NetEvaluator(self.net, self.site_names)
        self._init_values = {s.name: s.init for s in sites}
        self.dataset_size: int | None = None
        self.input_shape: tuple[int, ...] | None = None

    # ------------------------------------------------------------------ the Pyro model
    def model(
        self,
        x: torch.Tensor,
        y: torch.Tensor | None = None,
        dataset_size: int | None = None,
        kl_weight: float = 1.0,
    ) -> torch.Tensor:
        """The Pyro model: weights from the prior, then ``y`` given ``net(x)``.

        Args:
            x: ``(B, *features)`` inputs (a minibatch or the whole data set).
            y: ``(B,)``/``(B, O)`` targets, or ``None`` to sample them.
            dataset_size: the number of points ``N`` the ``B`` rows stand for; their
                log-likelihood is scaled by ``N / B``. ``None`` means ``B`` (full batch).
            kl_weight: beta, multiplies the log-density of every latent site (the KL term).

        Returns:
            The net output ``(B, O)`` (``(S, B, O)`` under a plate of S samples).
        """
        estimator = self.local_reparameterization if self.training else None
        with KLWeight(kl_weight) if kl_weight != 1.0 else nullcontext():
            if estimator:
                with LocalReparameterization(estimator):
                    f = self.net(x)
            else:
                f = self.net(x)
            latents = self.likelihood.sample_latents(f)
        self.likelihood.observe(f, y, latents, dataset_size)
        return f

    # ------------------------------------------------------------------ inputs
    @property
    def device(self) -> torch.device:
        """The device of the net and guide."""
        for tensor in self.buffers():
            return tensor.device
        return torch.device("cpu")

    @property
    def dtype(self) -> torch.dtype:
        """The floating dtype of the net."""
        for tensor in self.buffers():
            return tensor.dtype
        return torch.get_default_dtype()

    def _inputs(self, X: Any, name: str = "X") -> torch.Tensor:
        X = as_tensor(name, X, dtype=self.dtype, device=self.device, min_dim=2)
        expected = self.input_shape or _first_layer_features(self.net)
        if expected is not None and tuple(X.shape[1 : 1 + len(expected)]) != expected:
            raise ValueError(
                f"{name} must have {expected[0] if len(expected) == 1 else expected} feature(s) "
                f"per row (shape (N, {', '.join(map(str, expected))})), got shape "
                f"{tuple(X.shape)}"
            )
        return X

    @torch.no_grad()
    def _output_dim(self, x: torch.Tensor) -> int:
        values = {k: v.unsqueeze(0) for k, v in self._init_values.items()}
        return int(self._evaluator(values, x[:2]).shape[-1])

    def _targets(self, y: Any, X: torch.Tensor, name: str = "y") -> torch.Tensor:
        y = as_tensor(name, y, device=self.device)
        if y.shape[0] != X.shape[0]:
            raise ValueError(
                f"X and {name} must have the same number of rows, got {X.shape[0]} and {y.shape[0]}"
            )
        return self.likelihood.check_targets(y, self._output_dim(X))

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
        elbo: str = "trace",
        num_particles: int = 1,
        kl_weight: KLWeightSpec = 1.0,
        callbacks: Iterable[Callback] = (),
        validation_data: tuple[Any, Any] | None = None,
        shuffle: bool = True,
        progress: bool = True,
        seed: int | None = None,
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
            optimizer: see :func:`bnn_pyro.training.make_optimizer`.
            elbo: ``"trace"`` (``Trace_ELBO``: Monte Carlo KL) or ``"meanfield"``
                (``TraceMeanField_ELBO``: closed-form KL where the prior allows), or an ELBO.
            num_particles: samples per step, vectorized (``vectorize_particles=True``).
            kl_weight: beta, a float or ``fn(epoch) -> float`` (e.g.
                :func:`bnn_pyro.training.linear_annealing`); 1 is the ELBO.
            callbacks: ``fn(bnn, epoch, history)``; a ``True`` return stops training.
            validation_data: ``(X_val, y_val)``; adds ``val_nll`` to the history.
            shuffle: reshuffle the rows every epoch.
            progress: show a progress bar.
            seed: makes the run reproducible (given the net's initial weights) without touching
                the global RNG.

        Returns:
            :class:`bnn_pyro.training.History` with ``loss``, ``nll``, ``kl`` per epoch.
        """
        epochs = check_int("epochs", epochs, minimum=0)
        lr = check_float("lr", lr, minimum=0.0, strict=True)
        num_particles = check_int("num_particles", num_particles)
        if not callable(kl_weight):
            check_float("kl_weight", kl_weight, minimum=0.0)
        if seed is not None:
            check_int("seed", seed, minimum=0)
        if isinstance(X, DataLoader):
            if y is not None:
                raise ValueError("pass either a DataLoader or (X, y), not both")
            batches, n, first_x, first_y = self._loader_batches(X)
        else:
            if y is None:
                raise ValueError("y is required when X is not a DataLoader")
            X = self._inputs(X)
            y = self._targets(y, X)
            n = X.shape[0]
            if batch_size is not None:
                batch_size = check_int("batch_size", batch_size)
            batches = self._tensor_batches(X, y, min(batch_size or n, n), shuffle, seed)
            first_x, first_y = X[:2], y[:2]
        validation = self._validation_fn(validation_data) if validation_data is not None else None
        self.input_shape = tuple(first_x.shape[1:])
        with _seeded(seed, self.device):
            if not _guide_ready(self.guide):
                with torch.no_grad():
                    self.guide(first_x, first_y)
            params = list(self.parameters())
            svi = GuardedSVI(
                self.model,
                self.guide,
                make_optimizer(optimizer, params, lr),
                make_elbo(elbo, num_particles, vectorize=True),
                params,
            )
            self.dataset_size = n
            was_training = self.training
            self.train()
            emit = getattr(self.guide, "emit_params", None)
            if emit is not None:
                self.guide.emit_params = False  # fit optimizes the module parameters directly
            try:
                return run_svi(
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
            finally:
                self.train(was_training)
                if emit is not None:
                    self.guide.emit_params = emit

    def _tensor_batches(
        self, X: torch.Tensor, y: torch.Tensor, batch_size: int, shuffle: bool, seed: int | None
    ) -> Callable[[], Iterable[tuple[torch.Tensor, torch.Tensor]]]:
        n = X.shape[0]
        generator = torch.Generator(device="cpu")
        generator.manual_seed(seed if seed is not None else int(torch.randint(2**31, ()).item()))

        def batches() -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
            if batch_size >= n:
                yield X, y
                return
            order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
            order = order.to(X.device)
            for start in range(0, n, batch_size):
                idx = order[start : start + batch_size]
                yield X[idx], y[idx]

        return batches

    def _loader_batches(
        self, loader: DataLoader
    ) -> tuple[Callable, int, torch.Tensor, torch.Tensor]:
        try:
            n = len(loader.dataset)  # type: ignore[arg-type]
        except TypeError:
            raise ValueError("the DataLoader's dataset must have a length (N)") from None
        first = next(iter(loader))
        if not (isinstance(first, (tuple, list)) and len(first) == 2):
            raise ValueError("the DataLoader must yield (x, y) pairs")
        first_x = self._inputs(first[0], "x batch")
        first_y = self._targets(first[1], first_x, "y batch")
        out_dim = self._output_dim(first_x)

        def batches() -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
            for xb, yb in loader:
                xb = self._inputs(xb, "x batch")
                yb = as_tensor("y batch", yb, device=self.device)
                yield xb, self.likelihood.check_targets(yb, out_dim)

        return batches, n, first_x, first_y

    def _validation_fn(self, data: tuple[Any, Any]) -> Callable[[], float]:
        if not (isinstance(data, (tuple, list)) and len(data) == 2):
            raise ValueError("validation_data must be a pair (X_val, y_val)")
        X_val = self._inputs(data[0], "X_val")
        y_val = self._targets(data[1], X_val, "y_val")
        return lambda: -self.log_predictive_density(X_val, y_val, num_samples=20, seed=0)

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
        if not _guide_ready(self.guide):
            raise NotFittedError("this VariationalBNN is not fitted yet: call fit(X, y) first")
        if x is None:
            x = torch.zeros((1, *(self.input_shape or ())), device=self.device, dtype=self.dtype)
        generator = None
        if seed is not None:
            generator = torch.Generator(device=self.device)
            generator.manual_seed(check_int("seed", seed, minimum=0))
        with _seeded(seed, self.device):
            return draw_posterior(self.guide, num_samples, x, generator)

    def _chunk_size(self, num_samples: int) -> int:
        return chunk_rows(self.net, num_samples)

    @torch.no_grad()
    def _outputs(
        self, X: torch.Tensor, samples: Mapping[str, torch.Tensor], chunk_size: int | None
    ) -> torch.Tensor:
        num = next(iter(samples.values())).shape[0]
        chunk = chunk_size or self._chunk_size(num)
        was_training = self.net.training
        self.net.eval()
        try:
            return self._evaluator(samples, X, chunk)
        finally:
            self.net.train(was_training)

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
        num_samples: int = 100,
        include_noise: bool = False,
        posterior_samples: Mapping[str, torch.Tensor] | None = None,
        chunk_size: int | None = None,
        seed: int | None = None,
        normalize_output: bool = True,
    ) -> PredictOutput:
        """Posterior predictive mean and variance, vectorized over the samples.

        The ``S`` weight samples are evaluated in one pass per chunk of rows (no Python loop over
        samples); chunks keep memory bounded.

        Args:
            x: ``(N, *features)`` inputs.
            return_samples: also return the per-sample predictive means ``(S, N, O')``.
            num_samples: ``S``, draws from the guide.
            include_noise: add the aleatoric variance (Gaussian likelihoods: the mean over
                samples of ``scale**2``) to the epistemic one.
            posterior_samples: ``{site: (S, ...)}`` to use instead of the guide, e.g.
                ``mcmc.get_samples()`` from ``MCMC(NUTS(bnn.model))``.
            chunk_size: rows per pass (default: sized from the layer widths).
            seed: reproducible draws without touching the global RNG.
            normalize_output: kept for the shared interface; the likelihood decides the link
                (softmax for Categorical, sigmoid for Bernoulli, identity for Gaussian).

        Returns:
            ``mean (N, O')`` (class probabilities for ``Categorical``), ``variance (N, O')``:
            epistemic (the variance of the per-sample means) unless ``include_noise``, and, with
            ``return_samples``, ``samples (S, N, O')``.
        """
        num_samples = check_int("num_samples", num_samples)
        X = self._inputs(x, "x")
        samples = self._resolve_samples(num_samples, posterior_samples, seed)
        f = self._outputs(X, samples, chunk_size)
        means = self.likelihood.mean(f)
        out = summarize_samples(means, return_samples)
        if include_noise:
            noise = self.likelihood.noise_variance(f, samples)
            if noise is None:
                raise ValueError(
                    f"include_noise=True needs a Gaussian likelihood, not {self.likelihood!r}"
                )
            total = out[1] + noise.expand_as(means).mean(0)
            return (out[0], total, *out[2:])  # type: ignore[return-value]
        return out

    def predictive_gaussian(
        self, x: Any, num_samples: int = 100, seed: int | None = None, **kwargs: Any
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
        samples = self._resolve_samples(num_samples, kwargs.get("posterior_samples"), seed)
        f = self._outputs(X, samples, kwargs.get("chunk_size"))
        return self.likelihood.mean(f), self.likelihood.noise_variance(f, samples).sqrt()

    def log_predictive_density(
        self, x: Any, y: Any, num_samples: int = 100, seed: int | None = None
    ) -> float:
        """Mean over points of ``log (1/S) sum_s p(y_n | x_n, w_s)`` (the test log-likelihood).

        Args:
            x: ``(N, *features)``; y: ``(N,)``/``(N, O)`` targets.
            num_samples: ``S``.
        """
        X = self._inputs(x, "x")
        y = self._targets(y, X)
        samples = self._resolve_samples(check_int("num_samples", num_samples), None, seed)
        f = self._outputs(X, samples, None)
        log_p = self.likelihood.log_prob(f, y, samples)  # (S, N)
        return float((torch.logsumexp(log_p, 0) - math.log(log_p.shape[0])).mean())

    def forward(self, x: Any) -> torch.Tensor:
        """The predictive mean, ``predict(x)[0]``."""
        return self.predict(x)[0]

    # ------------------------------------------------------------------ KL and checkpoints
    def kl_divergence(self) -> torch.Tensor:
        """``KL(q || p)`` summed over all latent sites, in closed form (mean-field guide, priors
        with a registered KL such as Normal). Raises ``NotImplementedError`` otherwise."""
        if not isinstance(self.guide, MeanFieldNormalGuide) or not self.guide.is_setup:
            raise NotImplementedError("kl_divergence needs a fitted mean-field guide")
        x = torch.zeros((1, *(self.input_shape or ())), device=self.device, dtype=self.dtype)
        model_trace = poutine.trace(poutine.block(self.model, hide=["obs"])).get_trace(x)
        total = torch.zeros((), device=self.device)
        for name, q in self.guide.distributions().items():
            total = (
                total + torch.distributions.kl_divergence(q, model_trace.nodes[name]["fn"]).sum()
            )
        return total

    def save(self, path: str) -> None:
        """Write net, guide, prior and likelihood settings to one file, atomically.

        Load it with :meth:`load` (``torch.load(weights_only=True)`` under the hood).
        """
        from bnn_pyro.checkpoint import save_bnn

        save_bnn(self, path)

    @classmethod
    def load(cls, path: str, net: nn.Module, map_location: Any = None) -> VariationalBNN:
        """Rebuild a saved :class:`VariationalBNN` around a fresh ``net`` of the saved
        architecture (its weights are overwritten)."""
        from bnn_pyro.checkpoint import load_bnn

        return load_bnn(cls, path, net, map_location)

    def _checkpoint_extra(self) -> dict[str, Any]:
        """Constructor settings beyond the shared ones (subclasses extend this dict)."""
        return {"local_reparameterization": self.local_reparameterization or False}

    @classmethod
    def _from_checkpoint(cls, net: nn.Module, state: dict[str, Any]) -> VariationalBNN:
        from bnn_pyro.checkpoint import rebuild_kwargs

        return cls(net, **rebuild_kwargs(state), **state.get("extra", {}))

    def extra_repr(self) -> str:
        fitted = f"fitted on {self.dataset_size} points" if self.dataset_size else "not fitted"
        lrt = self.local_reparameterization
        return (
            f"likelihood={self.likelihood!r}, prior={self.prior!r}, guide={self.guide_spec!r}, "
            f"{len(self.site_names)} Bayesian tensors, {fitted}"
            + (f", local_reparameterization={lrt!r}" if lrt else "")
        )


class _seeded:
    """Run a block with a fixed torch seed and put the global RNG state back afterwards."""

    def __init__(self, seed: int | None, device: torch.device) -> None:
        self.seed, self.device = seed, device

    def __enter__(self) -> None:
        if self.seed is None:
            return
        devices = [self.device] if self.device.type == "cuda" else []
        self._fork = torch.random.fork_rng(devices=devices)
        self._fork.__enter__()
        torch.manual_seed(self.seed)

    def __exit__(self, *exc: object) -> None:
        if self.seed is not None:
            self._fork.__exit__(*exc)


def _reparameterization(value: Any, guide: Any) -> str | None:
    """The estimator name for ``local_reparameterization=value`` (``None`` when off)."""
    if value is False:
        return None
    if value is True:
        value = "local"
    if not isinstance(value, str):
        raise TypeError(
            f"local_reparameterization must be a bool or one of {ESTIMATORS}, got "
            f"{type(value).__name__} ({value!r})"
        )
    if value not in ESTIMATORS:
        raise ValueError(
            f"local_reparameterization must be a bool or one of {ESTIMATORS}, got {value!r}"
        )
    spec = GUIDE_NAMES.get(guide, guide) if isinstance(guide, str) else guide
    if isinstance(spec, type) and issubclass(spec, _JOINT_GUIDES):
        raise ValueError(
            "local_reparameterization needs a guide that draws each weight from its own Normal "
            f"('meanfield' or 'normal'), got guide={guide!r}"
        )
    return value


def _guide_ready(guide: nn.Module) -> bool:
    if isinstance(guide, MeanFieldNormalGuide):
        return guide.is_setup
    inner = getattr(guide, "autoguide", guide)
    return getattr(inner, "prototype_trace", None) is not None


def _first_layer_features(net: nn.Module) -> tuple[int, ...] | None:
    """The input width of a net whose first step is known: a (nested) Sequential starting with a
    linear or conv layer. ``None`` for other nets (their input shape is learned by ``fit``)."""
    module = net
    while isinstance(module, nn.Sequential) and len(module) > 0:
        module = module[0]
    if isinstance(module, nn.Linear):
        return (module.in_features,)
    if isinstance(module, nn.modules.conv._ConvNd):
        return (module.in_channels,)
    return None
