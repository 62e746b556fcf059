"""``VariationalBayesNN``: Bayes by Backprop (Blundell et al. 2015) on GaussianLinear layers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn as nn

from bnn_pyro._checks import check_float, check_int
from bnn_pyro._rng import seeded
from bnn_pyro.likelihoods import Likelihood, noise_latents
from bnn_pyro.likelihoods.resolve import check_noise_scale, resolve_likelihood
from bnn_pyro.methods.classic import checks
from bnn_pyro.methods.classic.base import ClassicMethod
from bnn_pyro.methods.classic.training import (
    TrainSettings,
    module_device,
)
from bnn_pyro.nn.bayesian_mlp import BayesianMLP
from bnn_pyro.nn.inputs import InputSpec
from bnn_pyro.nn.mlp import mlp_architecture
from bnn_pyro.training import History

__all__ = ["VariationalBayesNN"]


class VariationalBayesNN(ClassicMethod):
    """A mean-field Gaussian BNN trained by maximising the ELBO (Bayes by Backprop).

    The net is a :class:`~bnn_pyro.nn.bayesian_mlp.BayesianMLP` of
    :class:`~bnn_pyro.nn.gaussian_linear.GaussianLinear` layers, with the fan-in-scaled
    initialisation explained there (``mu ~ N(0, prior_std²)`` would give pre-activations of
    size ``sqrt(width)``). Monte Carlo draws are vectorized: S weight sets
    run in one batched pass, ``(S, N, O)``.

    The loss per datum is ``mean NLL + kl_weight · KL / N`` with N the *data set* size (not the
    batch), so minibatch training is unbiased for the ELBO / N. Likelihoods: softmax
    categorical, or Gaussian with homoscedastic noise std ``noise_scale``.

    Args:
        in_features: input size D.
        hidden_sizes: hidden layer sizes.
        out_features: output size O.
        prior_std: std of the zero-mean Gaussian prior on every weight and bias.
        num_samples: S, weight draws per :meth:`predict`.
        likelihood: ``"classification"``/``"categorical"`` or ``"regression"``/``"gaussian"``.
        activation: activation between layers (name or callable).
        noise_scale: Gaussian noise std; None lets :meth:`fit` learn it.
        dataset_size: N for :meth:`variational_loss` when not passed there (fit sets it).

    Example:
        >>> vb = VariationalBayesNN(4, [16], 3, num_samples=5)
        >>> x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
        >>> loss = vb.variational_loss(x, y, num_samples=2, dataset_size=100)
        >>> loss.backward()
        >>> vb.predict(x)[0].shape
        torch.Size([8, 3])
    """

    def __init__(
        self,
        in_features: int,
        hidden_sizes: Sequence[int],
        out_features: int,
        prior_std: float = 1.0,
        num_samples: int = 20,
        *,
        likelihood: Likelihood | str = "classification",
        activation: str | Callable[[torch.Tensor], torch.Tensor] = "relu",
        noise_scale: float | torch.Tensor | None = None,
        dataset_size: int | None = None,
    ) -> None:
        super().__init__()
        check_int("num_samples", num_samples)
        check_float("prior_std", prior_std, minimum=0.0, strict=True)
        self._set_likelihood(likelihood, noise_scale)
        if dataset_size is not None:
            check_int("dataset_size", dataset_size)
        self.net = BayesianMLP(in_features, hidden_sizes, out_features, activation, prior_std)
        self._architecture = (in_features, list(hidden_sizes), out_features, activation)
        self.prior_std = float(prior_std)
        self.num_samples = num_samples
        self.dataset_size = dataset_size

    def _input_spec(self) -> InputSpec:
        return InputSpec((self._architecture[0],), 2)

    @property
    def layers(self) -> nn.ModuleList:
        """The :class:`GaussianLinear` layers (seed attribute)."""
        return self.net.layers

    def forward(
        self, x: torch.Tensor, sample: bool = True, num_samples: int | None = None
    ) -> torch.Tensor:
        """Outputs with sampled weights ``(N, O)``, or ``(S, N, O)`` for ``num_samples=S``."""
        return self.net(x, sample=sample, num_samples=num_samples)

    def kl_divergence(self) -> torch.Tensor:
        """KL(q(w) || p(w)) summed over all layers (scalar)."""
        return self.net.kl_cost()

    @staticmethod
    def _nll(
        out: torch.Tensor, y: torch.Tensor, likelihood: Likelihood, sigma: torch.Tensor | None
    ) -> torch.Tensor:
        """Mean over samples and data of the per-datum NLL (the likelihood's
        :meth:`~bnn_pyro.likelihoods.Likelihood.log_prob`, with ``sigma`` as a Gaussian's
        noise); ``out: (S, N, O)``."""
        return -likelihood.log_prob(out, y, noise_latents(sigma)).mean()

    def variational_loss(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        num_samples: int = 10,
        kl_weight: float = 1.0,
        likelihood: str | None = None,
        dataset_size: int | None = None,
        noise_scale: float | torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Negative ELBO per datum: ``mean NLL + kl_weight · KL / dataset_size``.

        Args:
            x: ``(B, D)`` a minibatch.
            y: ``(B,)`` class indices, or ``(B,)`` / ``(B, O)`` regression targets.
            num_samples: Monte Carlo weight draws (vectorized).
            kl_weight: β for KL annealing/tempering (1 = the ELBO).
            likelihood: ``"categorical"``/``"classification"`` or ``"gaussian"``/
                ``"regression"``; default the model's.
            dataset_size: N of the full data set; default ``self.dataset_size`` (set by
                :meth:`fit`), else ``len(x)``, which is right only for full-batch training.
            noise_scale: Gaussian noise std (a tensor may require grad); default
                ``self.noise_scale``.

        Returns:
            Scalar loss.
        """
        x = self._check_x(x)
        observed = self.likelihood
        if likelihood is not None:
            observed, _ = resolve_likelihood(likelihood, None, "VariationalBayesNN")
        yt = checks.check_targets(x, y, observed, self._architecture[2])
        check_int("num_samples", num_samples)
        check_float("kl_weight", kl_weight, minimum=0.0, strict=False)
        n = dataset_size if dataset_size is not None else self.dataset_size or len(x)
        check_int("dataset_size", n)
        sigma = None
        if observed.homoscedastic:
            sigma = self.noise_scale if noise_scale is None else noise_scale
            if sigma is None:
                raise ValueError(
                    "noise_scale is None: pass noise_scale, set model.noise_scale, or use fit()"
                )
            if not (isinstance(sigma, torch.Tensor) and sigma.requires_grad):
                check_noise_scale(sigma)
            sigma = torch.as_tensor(sigma, dtype=x.dtype, device=x.device)
        out = self.net(x, num_samples=num_samples)
        return self._nll(out, yt, observed, sigma) + kl_weight * self.kl_divergence() / n

    def _sample_outputs(self, x: torch.Tensor, num_samples: int, seed: int | None) -> torch.Tensor:
        with seeded(seed, module_device(self)):
            return self.net(x, num_samples=num_samples)

    def _fit(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        settings: TrainSettings,
        train_samples: int = 1,
        kl_weight: float = 1.0,
    ) -> History:
        """Minimise :meth:`variational_loss` over minibatches with ``dataset_size = len(x)``.

        For regression without a user-set ``noise_scale``, ``log σ`` is a free parameter
        optimised jointly with the ELBO (its maximum-likelihood / type-II estimate), started
        at ``log std(y)``; ``noise_scale`` is then set to the learned σ (a float for one
        output, a ``(O,)`` tensor otherwise).

        Args:
            x: ``(N, D)`` inputs.
            y: ``(N,)`` class indices, or ``(N,)`` / ``(N, O)`` regression targets.
            train_samples: Monte Carlo weight draws per step.
            kl_weight: β on the KL term.

        Returns:
            The :class:`~bnn_pyro.training.History` (``loss`` per epoch).

        Example:
            >>> vb = VariationalBayesNN(1, [16], 1, likelihood="regression")
            >>> x = torch.linspace(-1, 1, 32).unsqueeze(-1)
            >>> history = vb.fit(x, 2 * x, epochs=3, progress=False, seed=0)
            >>> vb.dataset_size, vb.noise_scale > 0
            (32, True)
        """
        check_int("train_samples", train_samples)
        check_float("kl_weight", kl_weight, minimum=0.0, strict=False)
        net = lambda v: self.net(v, sample=False)  # noqa: E731 - the mean net, for the shapes
        x, yt, validation = self.fit_data(x, y, net, self, settings.validation_data)
        device = x.device
        params = list(self.parameters())
        log_sigma = None
        if self.likelihood.homoscedastic and not self._noise_from_user:
            init = yt.std(dim=0).clamp_min(1e-3) if len(yt) > 1 else yt.new_ones(yt.shape[1])
            log_sigma = init.log().to(device).requires_grad_(True)
            params.append(log_sigma)
            if settings.resume is not None:  # trained besides the state: saved for resuming
                settings.resume.extra["log_sigma"] = log_sigma
        self.dataset_size = len(x)

        def loss(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
            sigma = None if log_sigma is None else log_sigma.exp()
            return self.variational_loss(
                xb, yb, train_samples, kl_weight, dataset_size=len(x), noise_scale=sigma
            )

        history = self._train(
            params,
            loss,
            (x, yt),
            settings,
            module=self,
            desc="VariationalBayesNN",
            validation=validation,
        )
        if log_sigma is not None:
            sigma = log_sigma.detach().exp()
            self._estimate_noise(float(sigma) if sigma.numel() == 1 else sigma)
        return history

    def checkpoint_config(self) -> dict[str, Any]:
        d_in, hidden, d_out, activation = self._architecture
        if not isinstance(activation, str):
            raise ValueError(
                "only a model built with a named activation (e.g. 'relu') can be saved"
            )
        return {
            "in_features": d_in,
            "hidden_sizes": hidden,
            "out_features": d_out,
            "prior_std": self.prior_std,
            "num_samples": self.num_samples,
            "likelihood": self.likelihood.config(),
            "activation": activation,
        }

    @classmethod
    def from_checkpoint_config(
        cls, net: nn.Module | None, config: dict[str, Any]
    ) -> VariationalBayesNN:
        return cls(**{**config, "likelihood": cls._likelihood_from(config)})

    def fitted_state(self) -> dict[str, Any]:
        return {"dataset_size": self.dataset_size}

    def restore_fitted_state(self, fitted: dict[str, Any]) -> None:
        self.dataset_size = fitted["dataset_size"]

    @classmethod
    def from_net(cls, net: nn.Module, likelihood: Any, **options: Any) -> VariationalBayesNN:
        """A ``VariationalBayesNN`` with the widths and activation of an MLP of ``nn.Linear``
        layers (see :func:`bnn_pyro.nn.mlp_architecture`); ``net``'s weights are not used.

        Example:
            >>> import bnn_pyro as bp
            >>> m = VariationalBayesNN.from_net(bp.nn.mlp(3, [16], 2), bp.Categorical())
            >>> m.predict(torch.randn(4, 3))[0].shape
            torch.Size([4, 2])
        """
        d_in, hidden, d_out, activation = mlp_architecture(net)
        options.setdefault("activation", activation)
        return cls(d_in, hidden, d_out, likelihood=likelihood, **options)
