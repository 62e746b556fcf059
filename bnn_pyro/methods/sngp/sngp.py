"""``SNGP``: spectral-normalised neural Gaussian process (Liu et al. 2020): hidden layers with a
bounded spectral norm and a random-feature Gaussian process in place of the last layer, whose
output weights get the exact Laplace covariance after the fit; one pass to predict."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn as nn

from bnn_pyro._checks import check_float, check_int, check_module
from bnn_pyro._rng import seeded
from bnn_pyro.likelihoods import Likelihood
from bnn_pyro.likelihoods.gaussian import NOISE_SITE
from bnn_pyro.methods.classic.base import ClassicMethod, StackedParts
from bnn_pyro.methods.classic.closed_form import ClosedFormPredictive
from bnn_pyro.methods.classic.last_layer import LastLayerReader, same_values
from bnn_pyro.methods.classic.params import last_linear
from bnn_pyro.methods.classic.training import TrainSettings
from bnn_pyro.methods.laplace.probit import probit_moments
from bnn_pyro.methods.sngp.head import RandomFeatureGP
from bnn_pyro.methods.sngp.spectral import bound_spectral_norms
from bnn_pyro.nn.modes import modes
from bnn_pyro.training import History

__all__ = ["SNGP"]

#: Rows per block when the curvature is summed and when ``predict`` works in closed form.
_ROWS = 1024
#: The layers whose weights get the spectral bound: every one of these but the last linear.
_BOUNDED = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


class SNGP(LastLayerReader, ClosedFormPredictive, ClassicMethod):
    """Spectral-normalised neural Gaussian process: every hidden ``nn.Linear`` / ``nn.ConvNd``
    of the net keeps its spectral norm at most ``spectral_bound`` (so the features keep input
    distances within a factor of it), and the net's last ``nn.Linear`` is replaced by a
    random-feature GP (:class:`~bnn_pyro.methods.sngp.head.RandomFeatureGP`) on what that layer
    reads; the output weights' posterior is the Laplace approximation, computed once after the
    fit from every training row (the exact covariance, not the paper's moving average).

    ``fit`` trains the net and the output weights on the negative log joint per row: the
    likelihood's ``-log p(y | f)`` plus the weights' ``|β|² / (2 s² N)``, a regression's noise
    learned with them (or fixed: ``Gaussian(scale=s)``). Then the features are frozen and, for
    a Gaussian likelihood, the weights are set to their exact posterior mean: ``predict`` is
    then the exact GP with kernel ``s² φ(h)ᵀ φ(h')`` on the net's features. For a classifier the
    weights stay at the fit's MAP and the probabilities are the mean-field (probit)
    approximation, ``softmax(f / sqrt(1 + π/8 · var))``, in one pass.

    The bound is put on the net's layers as a ``torch.nn.utils.parametrize`` parametrization
    (:class:`~bnn_pyro.methods.sngp.spectral.SpectralBound`); the net's own last layer is kept but
    no longer read (``SNGP.forward`` is the model's mean output).

    Args:
        model: the net, ``(N, ...) -> (N, O)``, ending in an ``nn.Linear`` that reads ``H``
            features.
        likelihood: a ``Gaussian`` (fixed or learned scale), ``Categorical`` or ``Bernoulli``,
            or ``"regression"`` / ``"classification"``.
        num_features: ``D`` random Fourier features.
        lengthscale: the RBF kernel's lengthscale ``ℓ`` on the features.
        prior_scale: ``s``, the prior std of each output weight (the kernel's amplitude).
        spectral_bound: ``c``, the bound on each hidden layer's spectral norm (``None``: no
            bound, a random-feature GP on an ordinary net).
        power_iterations: power-method steps per training step for each bound.
        num_samples: ``S`` drawn by ``predict(return_samples=True)``.
        noise_scale: a fixed regression noise std, as ``Gaussian(scale=...)`` gives it.

    Example:
        >>> import bnn_pyro as bp
        >>> _ = torch.manual_seed(0)
        >>> m = SNGP(bp.nn.mlp(1, [32], 1), bp.Gaussian(scale="learned"), num_features=128)
        >>> x = torch.linspace(-2, 2, 64).unsqueeze(-1)
        >>> _ = m.fit(x, torch.sin(x), epochs=5, progress=False, seed=0)
        >>> mean, var = m.predict(torch.tensor([[0.0], [50.0]]))  # closed form, no draws
        >>> bool(var[1] > 10 * var[0])  # far from the data: back to the prior
        True
    """

    _config_keys = (
        "num_features", "lengthscale", "prior_scale", "spectral_bound", "power_iterations",
        "num_samples",
    )  # fmt: skip

    def __init__(
        self,
        model: nn.Module,
        likelihood: Likelihood | str,
        *,
        num_features: int = 1024,
        lengthscale: float = 1.0,
        prior_scale: float = 1.0,
        spectral_bound: float | None = 0.95,
        power_iterations: int = 1,
        num_samples: int = 100,
        noise_scale: float | torch.Tensor | None = None,
    ) -> None:
        super().__init__()
        check_module("model", model)
        check_int("num_features", num_features)
        check_float("lengthscale", lengthscale, minimum=0.0, strict=True)
        check_float("prior_scale", prior_scale, minimum=0.0, strict=True)
        if spectral_bound is not None:
            check_float("spectral_bound", spectral_bound, minimum=0.0, strict=True)
        check_int("power_iterations", power_iterations)
        check_int("num_samples", num_samples)
        self._set_likelihood(likelihood, noise_scale)
        self._last_name, last = last_linear(model, "SNGP")
        _check_curvature(self.likelihood, last.out_features)
        self.model = model
        self.num_features, self.num_samples = num_features, num_samples
        self.lengthscale, self.prior_scale = float(lengthscale), float(prior_scale)
        self.spectral_bound = None if spectral_bound is None else float(spectral_bound)
        self.power_iterations = power_iterations
        if self.spectral_bound is not None:
            hidden = [
                m for name, m in model.named_modules()
                if isinstance(m, _BOUNDED) and name != self._last_name
            ]  # fmt: skip
            bound_spectral_norms(hidden, self.spectral_bound, power_iterations)
        where = {"device": last.weight.device, "dtype": last.weight.dtype}
        self.head = RandomFeatureGP(
            last.in_features, last.out_features, num_features=num_features,
            lengthscale=lengthscale, prior_scale=prior_scale, bias=last.bias is not None, **where,
        )  # fmt: skip
        if last.bias is not None:
            with torch.no_grad():
                self.head.bias.copy_(last.bias)
        # a regression's noise std, per output: learned by fit unless the user fixed it
        self.noise_log_scale = nn.Parameter(torch.zeros(last.out_features, **where))

    # ------------------------------------------------------------------ the features
    @contextmanager
    def _head_outputs(self) -> Iterator[list[torch.Tensor]]:
        """Inside the block the net's last layer returns the head's outputs; the list gets the
        features ``(N, D)`` of each call."""
        seen: list[torch.Tensor] = []

        def replace(module: nn.Module, inputs: tuple[torch.Tensor, ...], _: Any) -> torch.Tensor:
            phi = self.head.features(inputs[0])
            seen.append(phi)
            return self.head.outputs(phi)

        with self._on_last(replace):
            yield seen

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """``φ(x) (N, D)``: the random features of what the net's last ``nn.Linear`` reads (in
        the net's current train/eval mode).

        Example:
            >>> import bnn_pyro as bp
            >>> m = SNGP(bp.nn.mlp(3, [8], 2), "classification", num_features=16)
            >>> m.features(torch.randn(5, 3)).shape
            torch.Size([5, 16])
        """
        return self._run(x)[0]

    def _run(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The net on ``x`` with the head in place: ``(φ (N, D), outputs (N, O))``."""
        with self._head_outputs() as seen:
            out = self.model(x)
        phi = seen[-1]
        if phi.dim() != 2 or out.shape != (len(phi), self.head.weight.shape[0]):
            raise ValueError(self._not_last())
        return phi, out

    def fit_probe(self, x: torch.Tensor) -> torch.Tensor:
        """``fit``'s look at the net on a few rows: its output must be the last layer's."""
        with self._head_outputs() as seen:
            out = self.model(x)
        if not same_values(out, self.head.outputs(seen[-1])):
            raise ValueError(self._not_last())
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, O)``: the outputs at the output weights' mean."""
        return self._run(x)[1]

    # ------------------------------------------------------------------ fit
    def _latents(self) -> dict[str, torch.Tensor]:
        """The likelihood's noise for a regression (``σ (O,)``); none for a classifier."""
        return {} if self.likelihood.classifies else {NOISE_SITE: self.noise_log_scale.exp()}

    def _fix_noise(self) -> None:
        """A noise the user set is fixed at it; otherwise ``fit`` learns it."""
        learned = not self.likelihood.classifies and not self._noise_from_user
        self.noise_log_scale.requires_grad_(learned)
        if self._noise_from_user:
            with torch.no_grad():
                log = torch.as_tensor(self.noise_scale, dtype=self.dtype, device=self.device).log()
                self.noise_log_scale.copy_(log.expand_as(self.noise_log_scale))

    def _fit(self, x: Any, y: Any, settings: TrainSettings) -> History:
        """Train the net and the output weights on the negative log joint per row; then the
        Laplace posterior of the weights (:meth:`after_training`)."""
        validation_data = settings.validation_data
        x, yt, validation = self.fit_data(x, y, self.fit_probe, self.model, validation_data)
        self._fix_noise()
        n, head, likelihood = len(x), self.head, self.likelihood
        params = self._param_groups([*head.parameters(), self.noise_log_scale])  # β: its prior

        def loss(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
            nll = -likelihood.log_prob(self._run(xb)[1], yb, self._latents()).mean()
            return nll + head.log_prior_penalty() / n

        history = self._train(
            params, loss, (x, yt), settings, module=self, desc="SNGP",
            validation=validation,
        )  # fmt: skip
        self.after_training(x, yt, settings)
        return history

    def stacked_parts(self, x: torch.Tensor) -> StackedParts:
        """For a stacked fit on ``x`` ``(N, ...)``: the net without its last layer (its spectral
        bounds included, each member's power iteration its own), the random-feature head with
        the regression noise, and one member's negative log joint per row, as :meth:`fit`
        trains them (see :meth:`ClassicMethod.stacked_parts`)."""
        self._fix_noise()
        n, likelihood, classifies = len(x), self.likelihood, self.likelihood.classifies

        def loss(part: nn.Module, h: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
            head, noise = part.head, part.noise  # the member's slices, under functional_call
            latents = {} if classifies else {NOISE_SITE: noise.exp()}
            nll = -likelihood.log_prob(head(h), yb, latents).mean()
            return nll + head.log_prior_penalty() / n

        part = nn.Module()  # the head and the noise, both the model's own (not copies)
        part.head = self.head
        part.noise = self.noise_log_scale
        return self.without_last(x), part, loss

    @torch.no_grad()
    def after_training(self, x: torch.Tensor, yt: torch.Tensor, settings: TrainSettings) -> None:
        """The output weights' Laplace posterior from the features of every training row (the
        net in eval mode): ``A_o = I / s² + Σ_n λ_no φ_n φ_nᵀ``; for a Gaussian likelihood the
        weights' exact posterior mean too, and a learned noise into ``noise_scale``."""
        head, likelihood, latents = self.head, self.likelihood, self._latents()
        out_features, d = head.weight.shape
        gram = x.new_zeros(out_features, d, d, dtype=self.dtype)
        moment = x.new_zeros(out_features, d, dtype=self.dtype)
        with modes(self.model, lambda m: False):
            for start in range(0, len(x), _ROWS):
                phi, f = self._run(x[start : start + _ROWS])
                weights, coupled = likelihood.output_hessian(f, latents)
                lam = weights - weights.square() if coupled else weights  # Λ's diagonal
                gram += torch.einsum("no,nd,ne->ode", lam, phi, phi)
                if not likelihood.classifies:  # Σ_n φ_n (y_no - b_o) / σ_o²
                    target = yt[start : start + _ROWS] - (f - phi @ head.weight.t())
                    moment += (target * lam).t() @ phi
        head.set_posterior(gram)
        if not likelihood.classifies:
            head.solve_mean(moment)
            noise = self.noise_log_scale.detach().exp()
            self._estimate_noise(float(noise) if noise.numel() == 1 else noise.clone())

    # ------------------------------------------------------------------ predict
    def _moments(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`output_moments` of checked inputs."""
        with torch.no_grad(), modes(self.model, lambda m: False):
            return self.head.output_moments(self.features(x))

    def _sample_outputs(self, x: torch.Tensor, num_samples: int, seed: int | None) -> torch.Tensor:
        with seeded(seed, self.device), modes(self.model, lambda m: False):
            return self.head.sample_outputs(self.features(x), num_samples)

    _closed_rows = _ROWS
    _closed_softmax = True  # the mean-field (probit) approximation, in one pass

    def _softmax_moments(
        self, mean: torch.Tensor, var: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return probit_moments(mean, var)

    def _noise_std(self) -> float | torch.Tensor:
        """A regression's ``σ``: the one the user fixed, else the learned one."""
        noise = self.noise_scale
        return noise if noise is not None else self.noise_log_scale.detach().exp()


def _check_curvature(likelihood: Likelihood, outputs: int) -> None:
    """Refuse, before any work, a likelihood without the output Hessian the Laplace step needs
    (or a heteroscedastic one)."""
    try:
        likelihood.output_hessian(torch.zeros(1, outputs), {NOISE_SITE: torch.ones(outputs)})
    except TypeError:
        raise ValueError(
            f"SNGP's Laplace step needs the Hessian of the log-likelihood in the output, and "
            f"{type(likelihood).__name__} gives none: use a Gaussian or Categorical likelihood"
        ) from None
