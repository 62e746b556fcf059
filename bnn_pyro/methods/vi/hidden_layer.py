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

import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

import pyro
import pyro.poutine as poutine
import torch
import torch.nn as nn
import torch.nn.functional as F
from pyro.poutine.util import site_is_subsample

from bnn_pyro._checks import check_float, check_instance, check_int
from bnn_pyro._rows import fill_rows
from bnn_pyro.distributions import HiddenLayer
from bnn_pyro.guides import KLWeight, MeanFieldNormalGuide, inverse_softplus
from bnn_pyro.likelihoods import LIKELIHOOD_EXPECTED, Likelihood, likelihood_from_config
from bnn_pyro.methods.vi.svi_model import SVIModel
from bnn_pyro.nn.batched import ACTIVATION_BUDGET
from bnn_pyro.nn.inputs import InputSpec
from bnn_pyro.nn.mlp import ACTIVATIONS, mlp_architecture
from bnn_pyro.nn.pyro_net import param_statement

__all__ = ["HiddenLayerBNN"]

#: The plate of the HiddenLayer sites (the likelihood opens its own "data" plate over the rows).
ROWS_PLATE = "hidden_rows"
# The model's HiddenLayer sites have no guide site by design; Pyro's check warns about it.
_NO_GUIDE_SITE = "Found vars in model but not guide"


def _identity(a: torch.Tensor) -> torch.Tensor:
    return a


class HiddenLayerBNN(SVIModel):
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
        num_samples: the default ``S`` of :meth:`predict` (a call's ``num_samples`` overrides).

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
        num_samples: int = 100,
    ) -> None:
        super().__init__()
        in_features = check_int("in_features", in_features)
        out_features = check_int("out_features", out_features)
        if isinstance(hidden_sizes, (str, bytes)) or not isinstance(hidden_sizes, Sequence):
            raise TypeError(f"hidden_sizes must be a sequence of ints, got {hidden_sizes!r}")
        hidden = [check_int(f"hidden_sizes[{i}]", h) for i, h in enumerate(hidden_sizes)]
        check_instance("likelihood", likelihood, Likelihood, LIKELIHOOD_EXPECTED)
        self.activation_name = activation if isinstance(activation, str) else None
        if isinstance(activation, str):
            if activation not in ACTIVATIONS:
                raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}: {activation!r}")
            activation = ACTIVATIONS[activation]()
        elif not callable(activation):
            raise TypeError(f"activation must be a name or a callable, got {activation!r}")
        self.prior_scale = check_float("prior_scale", prior_scale, minimum=0.0, strict=True)
        self.init_scale = check_float("init_scale", init_scale, minimum=0.0, strict=True)
        self.num_samples = check_int("num_samples", num_samples)
        self.likelihood, self.activation = likelihood, activation
        self.in_features, self.out_features = in_features, out_features
        self.locs, self.rhos = nn.ParameterList(), nn.ParameterList()
        widths = [in_features, *hidden, out_features]
        for d_in, d_out in zip(widths[:-1], widths[1:], strict=True):
            init = nn.Linear(d_in, d_out)  # (D + 1, H): the last row is the bias
            loc = torch.cat([init.weight.detach().t(), init.bias.detach().unsqueeze(0)])
            self.locs.append(nn.Parameter(loc))
            self.rhos.append(nn.Parameter(inverse_softplus(torch.full_like(loc, init_scale))))
        self.hidden_sizes = hidden
        self.site_names = [f"layer{i}" for i in range(len(self.locs))]
        self.guide = self._make_guide()

    def _make_guide(self) -> nn.Module:
        """A mean-field guide for the likelihood's own latents, or an empty guide."""
        x = self.locs[0].new_zeros(2, self.in_features)
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

    # ------------------------------------------------------------------ SVIModel hooks
    elbos = ("trace",)  # TraceMeanField_ELBO rejects model-only latent sites

    def _expected_features(self) -> InputSpec:
        return InputSpec((self.in_features,), 2)

    def _output_dim(self, x: torch.Tensor) -> int:
        return self.out_features

    posterior_samples_note = (
        ": the sites 'layer<i>' of a HiddenLayerBNN are weight matrices (D_i + 1, H_i), the "
        "bias in the last row, as its sample_posterior draws them (MCMC on its model samples "
        "activations, not weights)"
    )

    def _posterior_site_shapes(self, x: torch.Tensor) -> dict[str, tuple[int, ...]]:
        shapes = super()._posterior_site_shapes(x)  # the layers' sites hold activations there
        for name, loc in zip(self.site_names, self.locs, strict=True):
            shapes[name] = tuple(loc.shape)
        return shapes

    def setup_guide(self, x: torch.Tensor, y: torch.Tensor, data: Any = None) -> None:
        if isinstance(self.guide, MeanFieldNormalGuide) and not self.guide.is_setup:
            with torch.no_grad():  # creates the guide's parameters before listing them
                self.guide(x, y)

    @contextmanager
    def _training_context(self) -> Iterator[None]:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_NO_GUIDE_SITE)
            yield

    def _draw_posterior(
        self, num_samples: int, generator: torch.Generator | None, x: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """Whole weight matrices ``{"layer<i>": (S, D_i + 1, H_i)}`` (the last row of each is
        the bias) and the likelihood's latents."""
        out = {}
        for name, loc, rho in zip(self.site_names, self.locs, self.rhos, strict=True):
            eps = torch.randn((num_samples, *loc.shape), generator=generator, device=self.device)
            out[name] = loc + F.softplus(rho) * eps
        if isinstance(self.guide, MeanFieldNormalGuide):
            out.update(self.guide.sample_posterior(num_samples, generator=generator))
        return out

    @torch.no_grad()
    def _outputs(
        self, X: torch.Tensor, samples: Mapping[str, torch.Tensor], chunk_size: int | None
    ) -> torch.Tensor:
        width = max(loc.shape[-1] for loc in self.locs)
        num = samples[self.site_names[0]].shape[0]
        chunk = chunk_size or max(8, ACTIVATION_BUDGET // (num * width))

        def rows(start: int, stop: int) -> torch.Tensor:
            h = F.pad(X[start:stop], (0, 1), value=1.0)
            for i, name in enumerate(self.site_names):
                h = torch.matmul(h, samples[name])
                if i < len(self.site_names) - 1:
                    h = F.pad(self.activation(h), (0, 1), value=1.0)
            return h

        return fill_rows(rows, X.shape[0], chunk)

    def kl_divergence(self) -> torch.Tensor:
        """The exact ``KL(q || p)`` of the weights, summed over the layers."""
        x = torch.zeros(1, 1, dtype=self.locs[0].dtype, device=self.device)
        return sum(
            HiddenLayer(
                x.expand(1, loc.shape[0]), loc, F.softplus(rho), A_prior_scale=self.prior_scale
            ).KL
            for loc, rho in zip(self.locs, self.rhos, strict=True)
        )

    # ------------------------------------------------------------------ checkpoint hooks
    def checkpoint_config(self) -> dict[str, Any]:
        if self.activation_name is None:
            raise ValueError(
                "only a model built with a named activation (e.g. 'relu') can be saved"
            )
        return {
            "in_features": self.in_features,
            "hidden_sizes": list(self.hidden_sizes),
            "out_features": self.out_features,
            "likelihood": self.likelihood.config(),
            "activation": self.activation_name,
            "prior_scale": self.prior_scale,
            "init_scale": self.init_scale,
            "num_samples": self.num_samples,
            "dtype": str(self.dtype).removeprefix("torch."),
        }

    @classmethod
    def from_checkpoint_config(
        cls, net: nn.Module | None, config: dict[str, Any]
    ) -> HiddenLayerBNN:
        config = dict(config)
        dtype = getattr(torch, config.pop("dtype"))
        likelihood = likelihood_from_config(config.pop("likelihood"))
        return cls(**config, likelihood=likelihood).to(dtype)

    @classmethod
    def from_net(cls, net: nn.Module, likelihood: Likelihood, **options: Any) -> HiddenLayerBNN:
        """A ``HiddenLayerBNN`` with the widths and activation of an MLP of ``nn.Linear`` layers
        (see :func:`bnn_pyro.nn.mlp_architecture`); ``net``'s weights are not used.

        Example:
            >>> import bnn_pyro as bp
            >>> HiddenLayerBNN.from_net(bp.nn.mlp(3, [16], 1, "tanh"), bp.Gaussian(0.1)).hidden_sizes
            [16]
        """  # noqa: E501
        d_in, hidden, d_out, activation = mlp_architecture(net)
        options.setdefault("activation", activation)
        return cls(d_in, hidden, d_out, likelihood, **options)


class _EmptyGuide(nn.Module):
    """The guide of a model whose only latents are its HiddenLayer sites."""

    def forward(self, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
        return {}
