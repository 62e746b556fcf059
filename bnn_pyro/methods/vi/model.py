"""``VariationalBNN``: net + prior + likelihood + guide, trained by SVI.

The model is a plain Pyro model: every Bayesian weight is a ``pyro.sample`` site (``PyroSample``
on a ``PyroModule``), the likelihood sits in ``pyro.plate("data", size=N, subsample=...)``, and
the model holds no parameters of its own (point-estimate layers aside), so ``bnn.model`` runs
unchanged under ``SVI``, ``Predictive(parallel=True)`` and ``MCMC(NUTS(bnn.model))``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any

import pyro.poutine as poutine
import torch
import torch.nn as nn
from pyro.infer import autoguide

from bnn_pyro._checks import check_float, check_instance, check_int, check_module
from bnn_pyro.guides import (
    GUIDE_NAMES,
    AutoGuideWrapper,
    KLWeight,
    MeanFieldNormalGuide,
    build_guide,
)
from bnn_pyro.likelihoods import LIKELIHOOD_EXPECTED, Likelihood, likelihood_from_config
from bnn_pyro.methods.vi.fast_loss import DirectLoss, direct_loss_for, why_no_direct_loss
from bnn_pyro.methods.vi.posterior import NetEvaluator, draw_posterior
from bnn_pyro.methods.vi.svi_model import SVIModel
from bnn_pyro.nn.inputs import InputSpec, input_spec
from bnn_pyro.nn.param_scope import refuse_bare_jit
from bnn_pyro.nn.pyro_net import make_bayesian_, prior_latent_sites
from bnn_pyro.nn.support import check_supported_layers
from bnn_pyro.poutine import ESTIMATORS, LocalReparameterization
from bnn_pyro.priors import IIDPrior, Prior, prior_from_config

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


class VariationalBNN(SVIModel):
    """A Bayesian neural network trained by stochastic variational inference (Bayes by Backprop).

    Args:
        net: any ``torch.nn.Module`` mapping ``(N, *features)`` to ``(N, O)`` (e.g.
            :func:`bnn_pyro.nn.mlp`). It is copied; the copy becomes the Pyro model. Batch norm,
            recurrent layers and embeddings are refused here, by name, with what to use instead
            (see :mod:`bnn_pyro.nn.support`).
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
        num_samples: the default ``S`` of :meth:`predict` (a call's ``num_samples`` overrides).
        elbo: the objective :meth:`fit` minimises when its ``elbo`` is not given: ``"trace"``
            (default, the ELBO), ``"meanfield"``, ``"stl"`` or ``"alpha"`` (the black-box alpha
            energy, :mod:`bnn_pyro.elbos.alpha`; what ``make("bb_alpha", ...)`` builds).

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
        num_samples: int = 100,
        elbo: str = "trace",
    ) -> None:
        super().__init__()
        if elbo not in self.elbos:  # a name, so that the model can be saved and loaded
            raise ValueError(f"elbo must be one of {self.elbos}, got {elbo!r}")
        self.default_elbo = elbo
        check_module("net", net)
        check_supported_layers("net", net, type(self).__name__)
        check_instance("likelihood", likelihood, Likelihood, LIKELIHOOD_EXPECTED)
        prior = _default_prior() if prior is None else prior
        if not isinstance(prior, Prior):
            raise TypeError(f"prior must be a bnn_pyro.priors.Prior, got {type(prior).__name__}")
        init_scale = check_float("init_scale", init_scale, minimum=0.0, strict=True)
        self.num_samples = check_int("num_samples", num_samples)
        self.local_reparameterization = _reparameterization(local_reparameterization, guide)
        self.likelihood = likelihood
        self.init_scale = init_scale
        self.guide_spec = guide if isinstance(guide, str) else getattr(guide, "__name__", "custom")
        self.net = copy.deepcopy(net)
        self.prior = prior.bound_to(self.net)  # a learned prior's parameters: a submodule
        plain = copy.deepcopy(net)
        sites = make_bayesian_(self.net, self.prior, name="net")
        self.site_names = [s.name for s in sites]
        #: The prior's own latent sites (a hierarchical prior's scales), which the guide learns
        #: beside the weights and the net never reads; ``[]`` for a prior without.
        self.prior_sites = prior_latent_sites(self.net, sites, self.prior)
        init = {s.name: s.init for s in sites}
        self.guide = build_guide(guide, self.model, init, init_scale, self.param_scope())
        self.evaluator = NetEvaluator(self.net, sites, plain)
        self._init_values = {s.name: s.init for s in sites}
        self._output_dims: dict[tuple, int] = {}  # the net's output width per input layout

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
        refuse_bare_jit(self.param_scope())
        estimator = self.local_reparameterization if self.training else None
        with self.param_scope(), KLWeight(kl_weight) if kl_weight != 1.0 else nullcontext():
            if estimator:
                with LocalReparameterization(estimator):
                    f = self.net(x)
            else:
                f = self.net(x)
            latents = self.likelihood.sample_latents(f)
            self.likelihood.observe(f, y, latents, dataset_size)
        return f

    # ------------------------------------------------------------------ SVIModel hooks
    def _expected_features(self) -> InputSpec | None:
        return input_spec(self.net)

    def is_fitted(self) -> bool:
        return _guide_ready(self.guide)

    @torch.no_grad()
    def _output_dim(self, x: torch.Tensor) -> int:
        # one forward pass on two rows per input layout, remembered: predict asks every call
        key = (tuple(x.shape[1:]), x.dtype, x.device)
        if key not in self._output_dims:
            # the initial values were taken at construction: on the model's device and dtype
            # now (they are plain attributes, which .to() does not move)
            values = {
                k: v.to(device=x.device, dtype=x.dtype).unsqueeze(0)
                for k, v in self._init_values.items()
            }
            self._output_dims[key] = int(self.evaluator(values, x[:2]).shape[-1])
        return self._output_dims[key]

    def setup_guide(self, x: torch.Tensor, y: torch.Tensor, data: Any = None) -> None:
        if not _guide_ready(self.guide):
            if data is not None and isinstance(self.guide, MeanFieldNormalGuide):
                self.guide.init_loc.update(self.likelihood.initial_latents(*data))  # noise
            with torch.no_grad():
                self.guide(x, y)

    @contextmanager
    def _training_context(self) -> Iterator[None]:
        # fit optimizes the module parameters directly: the guide's and a learned prior's
        # param sites are announced only for an ELBO that finds its parameters through them
        owners = [m for m in (self.guide, self.prior) if hasattr(m, "emit_params")]
        emits = [m.emit_params for m in owners]
        for m in owners:
            m.emit_params = m.emit_params and self.param_sites_needed
        try:
            yield
        finally:
            for m, emit in zip(owners, emits, strict=True):
                m.emit_params = emit

    def _draw_posterior(
        self, num_samples: int, generator: torch.Generator | None, x: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        return draw_posterior(self.guide, num_samples, x, generator)

    @torch.no_grad()
    def _outputs(
        self, X: torch.Tensor, samples: Mapping[str, torch.Tensor], chunk_size: int | None
    ) -> torch.Tensor:
        chunk = chunk_size  # None: the evaluator sizes its passes
        was_training = self.net.training
        self.net.eval()
        try:
            return self.evaluator(samples, X, chunk)
        finally:
            self.net.train(was_training)

    def fast_loss(
        self,
        stl: bool = False,
        analytic_kl: bool = False,
        *,
        alpha: float | None = None,
        particles: int = 0,
    ) -> DirectLoss | None:
        """This model's ELBO in plain torch
        (:class:`~bnn_pyro.methods.vi.fast_loss.DirectLoss`; ``analytic_kl``: the
        ``TraceMeanField_ELBO`` form; ``alpha`` with ``particles``: the black-box alpha energy),
        which ``fit`` steps with where :func:`~bnn_pyro.methods.vi.engine.why_not_direct`
        passes the model: ``None`` for a subclass (its model may differ), a Pyro autoguide, a
        net with hooks, or the alpha energy with local reparameterization. It equals
        ``Trace_ELBO``, ``TraceMeanField_ELBO`` and ``AlphaELBO`` under the same draws (the
        parametrised test of ``tests/methods/vi/test_fast_loss.py``)."""
        if type(self) is not VariationalBNN:
            return None
        return direct_loss_for(self, stl, analytic_kl, alpha=alpha, particles=particles)

    def why_no_fast_loss(self) -> str | None:
        """``None`` where :meth:`fast_loss` gives a loss once the guide is set up; else why not
        (a subclass, or :func:`~bnn_pyro.methods.vi.fast_loss.why_no_direct_loss`)."""
        if type(self) is not VariationalBNN:
            return super().why_no_fast_loss()
        return why_no_direct_loss(self)

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
            p = model_trace.nodes[name]["fn"]
            try:
                kl = torch.distributions.kl_divergence(q, p)
            except NotImplementedError:
                raise NotImplementedError(
                    f"no closed-form KL between the guide's {type(q).__name__} and the prior's "
                    f"{type(p).__name__} at {name!r} (a prior with latent scales has none): "
                    "the ELBO's Monte Carlo KL (fit's default elbo='trace') covers it"
                ) from None
            total = total + kl.sum()
        return total

    # ------------------------------------------------------------------ checkpoint hooks
    def checkpoint_config(self) -> dict[str, Any]:
        if not isinstance(self.guide_spec, str) or self.guide_spec not in GUIDE_NAMES:
            raise ValueError("only models built with a named guide (e.g. 'meanfield') can be saved")
        return {
            "likelihood": self.likelihood.config(),
            "prior": self.prior.config(),
            "guide": self.guide_spec,
            "init_scale": self.init_scale,
            "local_reparameterization": self.local_reparameterization or False,
            "num_samples": self.num_samples,
            "elbo": self.default_elbo,
            "dtype": str(self.dtype).removeprefix("torch."),
        }

    @classmethod
    def from_checkpoint_config(
        cls, net: nn.Module | None, config: dict[str, Any]
    ) -> VariationalBNN:
        if net is None:
            raise ValueError(
                f"loading a {cls.__name__} needs net=: a fresh instance of the saved architecture"
            )
        return cls(
            net.to(getattr(torch, config["dtype"])),
            likelihood_from_config(config["likelihood"]),
            prior=prior_from_config(config["prior"]),
            guide=config["guide"],
            init_scale=config["init_scale"],
            local_reparameterization=config["local_reparameterization"],
            num_samples=config["num_samples"],
            elbo=config.get("elbo", "trace"),  # files saved before the option: the ELBO
        )

    def extra_repr(self) -> str:
        fitted = f"fitted on {self.dataset_size} points" if self.dataset_size else "not fitted"
        lrt = self.local_reparameterization
        return (
            f"likelihood={self.likelihood!r}, prior={self.prior!r}, guide={self.guide_spec!r}, "
            f"{len(self.site_names)} Bayesian tensors, {fitted}"
            + (f", local_reparameterization={lrt!r}" if lrt else "")
            + (f", elbo={self.default_elbo!r}" if self.default_elbo != "trace" else "")
        )


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


def _guide_ready(guide: MeanFieldNormalGuide | AutoGuideWrapper) -> bool:
    # build_guide returns the mean-field guide or wraps every other guide in AutoGuideWrapper
    if isinstance(guide, MeanFieldNormalGuide):
        return guide.is_setup
    return guide.ready
