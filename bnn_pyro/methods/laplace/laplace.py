"""The Laplace approximation (MacKay 1992; Daxberger et al. 2021) around a trained net."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.nn as nn
from torch.utils.data import DataLoader

from bnn_pyro._checks import check_choice, check_device, check_int, check_module
from bnn_pyro.exceptions import NotFittedError
from bnn_pyro.likelihoods import Likelihood
from bnn_pyro.methods.classic.base import ClassicMethod
from bnn_pyro.methods.classic.checks import check_batches
from bnn_pyro.methods.classic.params import (
    flatten,
    last_layer_parameters,
    unflatten,
)
from bnn_pyro.methods.classic.training import (
    TrainSettings,
    modes,
    module_device,
    probe,
)
from bnn_pyro.methods.laplace.curvature import curvature, residual_sigma
from bnn_pyro.methods.laplace.evidence import LaplaceEvidence
from bnn_pyro.methods.laplace.predictive import LINK_APPROXIMATIONS, LaplacePredictive
from bnn_pyro.methods.laplace.structures import (
    STRUCTURES,
    HessianStructure,
    map_tensors,
    structure_named,
)
from bnn_pyro.training import History, distributed

__all__ = ["LaplaceApproximation"]

_NOT_FITTED = "LaplaceApproximation is not fitted: call fit() first"


class LaplaceApproximation(LaplaceEvidence, LaplacePredictive, ClassicMethod):
    """Gaussian posterior ``N(θ*, (H + λ I)⁻¹)`` around the trained weights θ*.

    ``H`` is the curvature of the negative log-likelihood summed over the training data:
    ``hessian="fisher"`` is the empirical Fisher ``Σ_n g_n g_nᵀ`` (the
    per-example gradients come from ``torch.func.vmap(grad)``, one pass per batch instead of
    one backward per example), ``hessian="ggn"`` the generalised Gauss-Newton
    ``Σ_n J_nᵀ Λ_n J_n`` (``Λ = I/σ²`` for a Gaussian likelihood with noise std σ, so the noise
    enters the posterior; ``diag(p) - ppᵀ`` for a categorical). ``hessian_structure`` keeps
    its diagonal (``"diag"``, any size), the full matrix (``"full"``, small nets or the last
    layer) or Kronecker factors per linear layer (``"kron"``, KFAC).
    ``subset="last_layer"`` treats only the last ``nn.Linear`` as Bayesian and keeps
    the rest at θ*.

    ``H`` is the *sum* over the data, not its average, as the Laplace approximation of ``p(θ | D)``
    requires. For a linear model with a Gaussian likelihood, the GGN posterior is the exact
    posterior.

    :meth:`optimize_prior_precision` chooses λ by maximising the Laplace log-evidence
    :meth:`log_marginal_likelihood`. For regression, ``noise_scale`` is used in the likelihood;
    if it is None (or was estimated before), :meth:`fit` sets it to the maximum-likelihood std
    of the residuals of θ* on the fit data.

    Args:
        model: the trained net (θ* = its current weights), ``(N, ...) -> (N, O)``.
        likelihood: ``"classification"`` (softmax categorical) or ``"regression"`` (Gaussian).
        prior_precision: λ > 0 of the prior ``N(0, λ⁻¹ I)`` on the Bayesian parameters, or one
            λ per Bayesian parameter tensor (layerwise, in ``named_parameters`` order; kept as
            a tuple), as :meth:`optimize_prior_precision` with ``layerwise=True`` sets it, or
            one per Bayesian coordinate (diagonal, those tensors flattened in that order; not
            for ``"kron"``), as ``diagonal=True`` sets it.
        num_samples: S, weight samples per :meth:`predict` where it samples (the ``"nn"``
            predictive, ``link_approx="mc"``, ``return_samples=True``).
        hessian: ``"ggn"`` (the default) or ``"fisher"``.
        hessian_structure: ``"diag"``, ``"full"`` or ``"kron"`` (KFAC: two Kronecker factors per
            ``nn.Linear`` layer, with the GGN; laplace-torch's ``"kron"``).
        subset: ``"all"`` parameters or the ``"last_layer"``.
        predictive: ``"glm"`` (the default) predicts with the net's linearisation
            ``f(x, θ*) + J(x) (θ - θ*)``, whose outputs are Gaussian: :meth:`predict` returns
            their mean and variance in closed form (through a classifier's softmax, as
            ``link_approx`` says), and its samples are Jacobian-vector products on weight
            draws; ``"nn"`` runs the net itself on each weight sample. The GLM predictive is
            the one the Laplace posterior is consistent with (Immer et al. 2021): the sampled
            ``"nn"`` predictive of a diagonal posterior over every weight is over-dispersed,
            enough to lose most of a classifier's accuracy (the OOD benchmark's ``laplace``
            rows measure it).
        noise_scale: Gaussian noise std (regression).
        link_approx: how :meth:`predict` takes the GLM predictive through a classifier's
            softmax: ``"probit"`` (the default; the probit approximation,
            :func:`~bnn_pyro.methods.laplace.probit.probit_moments`, deterministic) or
            ``"mc"`` (the mean and variance of ``num_samples`` sampled probability vectors).
            laplace-torch's ``link_approx``, by the same names. Regression needs none: its
            GLM predictive is exact.

    Example:
        >>> net = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 3))
        >>> x, y = torch.randn(20, 2), torch.randint(0, 3, (20,))
        >>> la = LaplaceApproximation(net, "classification", hessian="ggn")
        >>> _ = la.fit(x, y, epochs=0, progress=False)
        >>> la.predict(x[:4])[0].shape
        torch.Size([4, 3])
    """

    _config_keys = (
        "prior_precision",
        "num_samples",
        "hessian",
        "hessian_structure",
        "subset",
        "predictive",
        "link_approx",
    )

    def __init__(
        self,
        model: nn.Module,
        likelihood: Likelihood | str = "classification",
        prior_precision: float | Sequence[float] = 1.0,
        num_samples: int = 20,
        *,
        hessian: str = "ggn",
        hessian_structure: str = "diag",
        subset: str = "all",
        predictive: str = "glm",
        noise_scale: float | torch.Tensor | None = None,
        link_approx: str = "probit",
    ) -> None:
        super().__init__()
        self.model = check_module("model", model)
        self._set_likelihood(likelihood, noise_scale)
        prior = prior_precision
        self.num_samples = check_int("num_samples", num_samples)
        self.hessian = check_choice("hessian", hessian, ("fisher", "ggn"))
        self.hessian_structure = check_choice(
            "hessian_structure", hessian_structure, tuple(STRUCTURES)
        )
        self.subset = check_choice("subset", subset, ("all", "last_layer"))
        self.predictive = check_choice("predictive", predictive, ("nn", "glm"))
        self.link_approx = check_choice("link_approx", link_approx, LINK_APPROXIMATIONS)
        params = dict(model.named_parameters())
        if subset == "last_layer":
            params = last_layer_parameters(model)
        if not params:
            raise ValueError("model must have parameters for the Laplace approximation, got none")
        if hessian_structure == "kron":
            _check_kron(model, params, self.hessian)
        self._shapes = {n: p.shape for n, p in params.items()}
        self.prior_precision = self._checked_prior(prior)
        self._mean: torch.Tensor | None = None
        self._hessian: torch.Tensor | None = None
        self._loglik = 0.0
        self._n_data = 0

    # --- posterior ----------------------------------------------------------------------
    @property
    def structure(self) -> HessianStructure:
        """How ``H`` is kept: the :class:`~bnn_pyro.methods.laplace.structures.HessianStructure`
        of ``hessian_structure``."""
        return structure_named(self.hessian_structure)

    @property
    def mean(self) -> dict[str, torch.Tensor] | None:
        """θ* ``{name: tensor}`` of the Bayesian parameters, or None before :meth:`fit`."""
        return None if self._mean is None else unflatten(self._mean, self._shapes)

    def _require_fit(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._mean is None or self._hessian is None:
            raise NotFittedError(_NOT_FITTED)
        return self._mean, self._hessian

    @property
    def posterior_precision(self) -> dict[str, torch.Tensor] | torch.Tensor | None:
        """``H + λ``: ``{name: tensor}`` (diag), a ``(P, P)`` matrix (full), or ``{name: (n, n)}``
        dense blocks of each parameter's ``n`` entries (kron)."""
        if self._hessian is None:
            return None
        prec = self.structure.precision(self._hessian, self._lam())
        if isinstance(prec, dict):  # "kron": a dense block per parameter
            return prec
        return unflatten(prec, self._shapes) if prec.dim() == 1 else prec

    def posterior_covariance(self) -> torch.Tensor:
        """``(H + λ I)⁻¹`` as a ``(P, P)`` matrix (diagonal for ``hessian_structure="diag"``)."""
        _, h = self._require_fit()
        return self.structure.covariance(h, self._lam())

    # --- fitting ------------------------------------------------------------------------
    def _fit_posterior(self, batches: Iterable, device: torch.device, reduce: bool = False) -> None:
        params = {n: p.detach() for n, p in self.model.named_parameters() if n in self._shapes}
        with modes(self.model, lambda m: False):
            if self.likelihood.homoscedastic and not self._noise_from_user:
                self._estimate_noise(residual_sigma(self.model, batches, device, reduce))
            sigma = None
            if self.likelihood.homoscedastic:
                if self.noise_scale is None:
                    raise ValueError("noise_scale is None: set it or fit on regression data")
                ref = next(iter(params.values()))  # in the parameters' dtype from the start:
                sigma = torch.as_tensor(self.noise_scale, dtype=ref.dtype, device=ref.device)
            h, loglik, n = curvature(
                self.model,
                params,
                batches,
                likelihood=self.likelihood,
                kind=self.hessian,
                structure=self.structure,
                sigma=sigma,
                device=device,
                reduce=reduce,
            )
        self._mean = flatten(params).clone()
        self._hessian, self._loglik, self._n_data = h, loglik, n

    _min_epochs = 0  # fit(x, y, epochs=0): the net is taken as trained

    def fit(self, x: Any, y: Any = None, **kwargs: Any) -> History:
        """Fit the posterior: ``fit(loader)`` at the current weights, or train then fit.

        ``fit(data_loader)`` or ``fit(data_loader, device)`` (seed API): the net is taken as
        trained; ``H`` is summed over the loader's ``(x, y)`` batches. ``fit(x, y, epochs=...)``:
        first a MAP phase (the one loop, see :meth:`ClassicMethod.fit
        <bnn_pyro.methods.classic.base.ClassicMethod.fit>`; ``epochs=0``: none) on cross-entropy or
        squared error with an L2 ``weight_decay`` on the mean loss, then the posterior on
        ``(x, y)``. That is the MAP under a prior precision ``λ = N · weight_decay``
        (classification) or ``N · weight_decay / (2σ²)`` (regression); ``prior_precision`` need
        not match it, and :meth:`optimize_prior_precision` tunes it afterwards.

        Args:
            x: a ``DataLoader`` (or any re-iterable sequence) of ``(x, y)`` batches, or
                ``(N, D)`` inputs.
            y: ``(N,)`` class indices or ``(N,)`` / ``(N, O)`` targets (with inputs only); with a
                loader, the earlier positional ``device`` (``fit(loader, device)``).
            **kwargs: the training options of :meth:`ClassicMethod.fit
                <bnn_pyro.methods.classic.base.ClassicMethod.fit>`, and ``device`` (moves the net
                there first; None keeps the net's device).

        Returns:
            The :class:`~bnn_pyro.training.History` of the MAP phase (empty when there is none:
            ``fit(loader)`` or ``epochs=0``).

        Example:
            >>> from torch.utils.data import DataLoader, TensorDataset
            >>> net = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1))
            >>> data = DataLoader(TensorDataset(torch.randn(30, 2), torch.randn(30, 1)), 10)
            >>> la = LaplaceApproximation(net, "regression")
            >>> history = la.fit(data)  # seed API: no training
            >>> la.posterior_covariance().shape
            torch.Size([33, 33])
        """
        seed_device = isinstance(y, (str, torch.device))  # the earlier fit(data_loader, device)
        if seed_device:
            check_device("device", y)
        if "device" in kwargs:
            check_device("device", kwargs["device"])
        if isinstance(x, DataLoader) and y is not None and not seed_device:
            raise TypeError("y must be None when data is a DataLoader (it yields (x, y))")
        if isinstance(x, torch.Tensor) or (y is not None and not seed_device):
            return super().fit(x, y, **kwargs)
        if not isinstance(x, Iterable):
            raise TypeError(f"data must be a DataLoader or a tensor, got {type(x).__name__}")
        device = kwargs.pop("device", None)
        if seed_device:
            y, device = None, y
        if kwargs:
            raise TypeError(f"fit(data_loader) takes only device=, got {sorted(kwargs)}")
        net = lambda v: probe(self.model, self.model, v)  # noqa: E731 - the outputs' width
        check_batches(x, self._check_x, self.likelihood, net)  # every batch, before any work
        self._fit_posterior(x, self._move(device))
        return History()

    def _fit(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        settings: TrainSettings,
        device: str | torch.device | None = None,
    ) -> History:
        self._check_x(x)
        dev = self._move(device)
        x, yt, validation = self.fit_data(x, y, self.model, self.model, settings.validation_data)
        history = History()
        if settings.epochs > 0:
            history = self._train_net((x, yt), settings, validation, "Laplace (MAP)")
        self.after_training(x, yt, settings, dev)
        return history

    def after_training(
        self,
        x: torch.Tensor,
        yt: torch.Tensor,
        settings: TrainSettings,
        device: torch.device | None = None,
    ) -> None:
        """After the MAP phase: the posterior on ``(x, yt)`` (``device``: the net's)."""
        dev = self._move(None) if device is None else device
        step = max(settings.batch_size, 256)  # curvature batches: views, no DataLoader collation
        rows = distributed.partition(len(x))  # under torch.distributed: a part per rank, summed
        x, yt = (x, yt) if len(rows) == len(x) else (x[rows], yt[rows])
        self._fit_posterior(
            [(x[i : i + step], yt[i : i + step]) for i in range(0, len(x), step)], dev, True
        )

    def _move(self, device: str | torch.device | None) -> torch.device:
        if device is not None:
            self.model.to(torch.device(device))
        return module_device(self.model)

    # --- state --------------------------------------------------------------------------
    def get_extra_state(self) -> dict[str, object]:
        """Posterior and settings, saved by ``state_dict`` (loads with ``weights_only=True``)."""
        state = super().get_extra_state()
        state.update(
            {
                "mean": self._mean,
                "hessian_matrix": self._hessian,
                "loglik": self._loglik,
                "n_data": self._n_data,
                "prior_precision": self.prior_precision,
                "likelihood": self._likelihood_kind,
                "hessian": self.hessian,
                "hessian_structure": self.hessian_structure,
                "subset": self.subset,
                "num_samples": self.num_samples,
                "predictive": self.predictive,
                "link_approx": self.link_approx,
            }
        )
        return state

    @property
    def _likelihood_kind(self) -> str:
        """The likelihood's class name, which a saved posterior must share with the model that
        loads it (its settings, such as a Gaussian's noise, load with the posterior)."""
        return type(self.likelihood).__name__

    def set_extra_state(self, state: dict[str, object]) -> None:
        kind = ("likelihood", "_likelihood_kind")
        for key, attr in (("hessian_structure",) * 2, ("subset",) * 2, kind):
            if state[key] != getattr(self, attr):
                raise ValueError(
                    f"the saved posterior has {key}={state[key]!r}; construct the "
                    f"LaplaceApproximation with {key}={state[key]!r} to load it, got "
                    f"{getattr(self, attr)!r}"
                )
        super().set_extra_state(state)
        self._mean, self._hessian = state["mean"], state["hessian_matrix"]
        self._loglik, self._n_data = float(state["loglik"]), int(state["n_data"])
        self.prior_precision = self._checked_prior(state["prior_precision"])
        self.hessian = state["hessian"]
        self.num_samples = int(state["num_samples"])
        self.predictive = str(state["predictive"])
        self.link_approx = str(state.get("link_approx", self.link_approx))  # a file from before

    def _apply(self, fn, *args, **kwargs):  # noqa: ANN001, ANN202 - torch's private signature
        """Move/cast the posterior with the module (``.to()``, ``.double()``, ...)."""
        super()._apply(fn, *args, **kwargs)
        if self._mean is not None:
            self._mean, self._hessian = fn(self._mean), map_tensors(self._hessian, fn)
        return self


def _check_kron(model: nn.Module, params: dict[str, torch.Tensor], hessian: str) -> None:
    """KFAC's reach: the GGN, and only ``nn.Linear`` weights and biases among ``params``."""
    if hessian != "ggn":
        raise ValueError(
            f"hessian_structure='kron' is built from the GGN: use hessian='ggn', got {hessian!r}"
        )
    modules = dict(model.named_modules())
    for name in params:
        owner, _, leaf = name.rpartition(".")
        module = modules.get(owner)
        if not isinstance(module, nn.Linear) or leaf not in ("weight", "bias"):
            raise ValueError(
                f"hessian_structure='kron' covers nn.Linear layers; {name!r} belongs to a "
                f"{type(module).__name__}: use subset='last_layer' or hessian_structure='diag'"
            )
