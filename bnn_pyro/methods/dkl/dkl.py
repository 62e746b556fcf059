"""``DKL``: deep kernel learning on Pyro (Wilson et al. 2016): what a net's last ``nn.Linear``
reads goes into a ``pyro.contrib.gp`` kernel, and a Gaussian process (exact, or sparse with
inducing points) takes that layer's place; the net and the GP are trained together by SVI and
the prediction is the GP's closed form."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn as nn

from bnn_pyro._checks import check_float, check_int, check_module
from bnn_pyro._rng import seeded
from bnn_pyro.likelihoods import Likelihood
from bnn_pyro.methods.classic.base import ClassicMethod
from bnn_pyro.methods.classic.checks import check_targets
from bnn_pyro.methods.classic.closed_form import ClosedFormPredictive
from bnn_pyro.methods.classic.last_layer import LastLayerReader
from bnn_pyro.methods.classic.params import last_linear
from bnn_pyro.methods.classic.training import TrainSettings, modes
from bnn_pyro.methods.dkl.gp import (
    KERNELS,
    build_gp,
    fix_noise,
    gp_objective,
    noise_variance,
)
from bnn_pyro.nn.param_scope import ParamScope
from bnn_pyro.training import History

__all__ = ["DKL"]

#: Rows per block of the closed-form ``predict`` and of the features of the training rows.
_ROWS = 2048


class DKL(LastLayerReader, ClosedFormPredictive, ClassicMethod):
    """Deep kernel learning: a Gaussian process with kernel ``k(h(x), h(x'))`` on the features
    ``h(x) (N, H)`` that the net's last ``nn.Linear`` reads, in place of that layer, built from
    Pyro's own GP modules (``pyro.contrib.gp``).

    - ``inducing_points=None``: the exact GP (``gp.models.GPRegression``). ``fit`` maximises
      the log marginal likelihood of all ``N`` rows at every step (``batch_size`` is not used:
      the marginal likelihood does not split into minibatches), ``O(N³)`` a step.
    - ``inducing_points=M``: the sparse variational GP (``gp.models.VariationalSparseGP``,
      whitened), ``M`` inducing points in the feature space, learned, started at the features
      of ``M`` evenly spaced training rows; ``fit`` runs on minibatches, ``O(B M² + M³)`` a
      step. Its objective is Pyro's: the log predictive density of each row under ``q(f)``
      minus ``KL(q(u) || p(u))`` (the KL in closed form).

    The objective, per row, is Pyro's ``Trace_ELBO`` (``TraceMeanField_ELBO`` for the sparse
    GP) of the GP's ``model`` and ``guide``, so a prior the user puts on a kernel parameter
    (``m.gp.kernel.lengthscale = pyro.nn.PyroSample(...)``) is part of it. The net, the kernel's
    variance and lengthscale, the GP's constant mean per output, the noise (unless fixed) and
    the inducing points are trained together.

    ``m.gp`` is Pyro's module: a user may call it, or train it in an own SVI loop, as Pyro's
    GP examples do. Like every ``PyroModule``, it then names its parameters in Pyro's global
    param store, the same names for every GP; run such calls inside
    ``with bnn_pyro.nn.param_scope.ParamScope():``, a param store of their own (``fit``,
    ``predict`` and ``objective`` do so themselves).

    ``predict`` is the GP's closed form (before a fit, its prior); its samples, where asked
    for, are drawn from each row's marginal, independent across rows.

    The ``O`` outputs of a regression are ``O`` GPs sharing the kernel and the noise (one
    noise std); a classifier is refused (use ``"sngp"`` or ``"vbll"``).

    Args:
        model: the net, ``(N, ...) -> (N, O)``, ending in an ``nn.Linear`` that reads ``H``
            features (its weight is not used; its bias starts the GP's mean).
        likelihood: a ``Gaussian`` (fixed or learned scale), or ``"regression"``.
        kernel: ``"rbf"``, ``"matern32"`` or ``"matern52"``.
        inducing_points: ``M`` for the sparse GP; ``None``: the exact GP.
        lengthscale: the kernel's lengthscale on the features, at the start of ``fit``.
        variance: the kernel's variance (its amplitude squared), at the start of ``fit``.
        jitter: added to the kernel matrices' diagonals for their Cholesky factors.
        num_samples: ``S`` drawn by ``predict(return_samples=True)``.
        noise_scale: a fixed noise std, as ``Gaussian(scale=...)`` gives it.

    Example:
        >>> import bnn_pyro as bp
        >>> _ = torch.manual_seed(0)
        >>> m = DKL(bp.nn.mlp(1, [16], 1), bp.Gaussian(scale="learned"))
        >>> x = torch.linspace(-2, 2, 64).unsqueeze(-1)
        >>> _ = m.fit(x, torch.sin(x), epochs=20, lr=1e-2, progress=False, seed=0)
        >>> mean, var = m.predict(torch.tensor([[0.0], [50.0]]))  # the GP's closed form
        >>> mean.shape, bool(var[1] > 10 * var[0])  # far from the data: back to the prior
        (torch.Size([2, 1]), True)
    """

    _config_keys = ("kernel", "inducing_points", "lengthscale", "variance", "jitter", "num_samples")

    def __init__(
        self,
        model: nn.Module,
        likelihood: Likelihood | str,
        *,
        kernel: str = "rbf",
        inducing_points: int | None = None,
        lengthscale: float = 1.0,
        variance: float = 1.0,
        jitter: float = 1e-6,
        num_samples: int = 100,
        noise_scale: float | torch.Tensor | None = None,
    ) -> None:
        super().__init__()
        check_module("model", model)
        if not isinstance(kernel, str) or kernel not in KERNELS:
            raise ValueError(f"DKL has no kernel {kernel!r}: use one of {tuple(KERNELS)}")
        if inducing_points is not None:
            check_int("inducing_points", inducing_points)
        check_float("lengthscale", lengthscale, minimum=0.0, strict=True)
        check_float("variance", variance, minimum=0.0, strict=True)
        check_float("jitter", jitter, minimum=0.0)
        check_int("num_samples", num_samples)
        self._set_likelihood(likelihood, noise_scale, classifies=False)
        if not self.likelihood.gaussian:
            raise ValueError(
                f"DKL is a Gaussian process regression and takes a Gaussian likelihood, got "
                f"{type(self.likelihood).__name__}: for a classifier use 'sngp' or 'vbll'"
            )
        self._last_name, last = last_linear(model, "DKL")
        self.model = model
        self.kernel, self.inducing_points = kernel, inducing_points
        self.lengthscale, self.variance = float(lengthscale), float(variance)
        self.jitter, self.num_samples = float(jitter), num_samples
        where = {"device": last.weight.device, "dtype": last.weight.dtype}
        width, outputs = last.in_features, last.out_features
        self.gp = build_gp(
            width, outputs, kernel=kernel, inducing_points=inducing_points,
            lengthscale=self.lengthscale, variance=self.variance, jitter=self.jitter, **where,
        )  # fmt: skip
        # the GP's constant mean per output, started at the net's own last bias
        bias = (
            last.bias.detach().clone() if last.bias is not None else torch.zeros(outputs, **where)
        )
        self.mean = nn.Parameter(bias.to(**where))
        # the exact GP's training features (N, H) and targets (O, N), set by fit
        self.register_buffer("train_features", torch.zeros(0, width, **where))
        self.register_buffer("train_targets", torch.zeros(outputs, 0, **where))
        fix_noise(self.gp, self._fixed_noise())  # a non-scalar one refused before any work

    # ------------------------------------------------------------------ the parts
    @property
    def exact(self) -> bool:
        """The exact GP (no inducing points)?"""
        return self.inducing_points is None

    def _fixed_noise(self) -> float | None:
        """The noise std the user fixed (one for every output), or ``None``."""
        if not self._noise_from_user:
            return None
        # a host-side check of the user's value (one float per output), wherever the model is
        scale = torch.as_tensor(self.noise_scale, dtype=torch.float64, device="cpu").flatten()
        if not torch.all(scale == scale[0]):
            raise ValueError(
                f"DKL's {len(scale)} outputs share one GP noise, and the noise scale given has "
                f"{len(scale)} different values: give one noise scale"
            )
        return float(scale[0])

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """``h(x) (N, H)``: what the net's last ``nn.Linear`` reads (in the net's current
        train/eval mode), the GP's inputs.

        Example:
            >>> import bnn_pyro as bp
            >>> DKL(bp.nn.mlp(3, [8], 1), "regression").features(torch.randn(5, 3)).shape
            torch.Size([5, 8])
        """
        return self._read(x)[0]

    # ------------------------------------------------------------------ fit
    def _fit(self, x: Any, y: Any, settings: TrainSettings) -> History:
        """Train the net and the GP on Pyro's ELBO per row; then the exact GP's training
        features (:meth:`after_training`)."""
        if settings.compile:
            raise ValueError(
                "DKL trains on Pyro's ELBO, which torch.compile cannot capture in one graph (it "
                "breaks at each of Pyro's host reads): fit without compile=True"
            )
        validation_data = settings.validation_data
        x, yt, validation = self.fit_data(x, y, self.fit_probe, self.model, validation_data)
        n = len(x)
        if not self.exact and self.inducing_points > n:
            raise ValueError(
                f"DKL's {self.inducing_points} inducing points need as many training rows, and "
                f"fit got {n}: use inducing_points <= {n} (or None, the exact GP)"
            )
        fix_noise(self.gp, self._fixed_noise())
        with torch.no_grad():
            if not self.exact:  # inducing points at evenly spaced rows' features
                rows = torch.linspace(0, n - 1, self.inducing_points, device=x.device)
                with modes(self.model, lambda m: False):
                    self.gp.Xu.copy_(self.features(x[rows.round().long()]))
        params = self._param_groups([self.mean, *self.gp.parameters()])
        if self.exact:  # the marginal likelihood reads every row
            settings = dataclasses.replace(settings, batch_size=n)

        def loss(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
            return self._objective(self.features(xb), yb, n)

        with ParamScope():  # the GP's own (see _moments)
            history = self._train(
                params, loss, (x, yt), settings, module=self, desc="DKL",
                validation=validation,
            )  # fmt: skip
        self.after_training(x, yt, settings)
        return history

    def objective(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """What ``fit`` minimises, per row, on ``(x, y)`` at the current parameters (the net in
        its current train/eval mode): the exact GP's negative log marginal likelihood over
        ``N``, or the sparse GP's negative ELBO over ``N``; with any prior the user put on a
        kernel parameter (``PyroSample``), its negative log density over ``N`` too.

        Args:
            x: ``(N, ...)`` inputs.
            y: ``(N,)`` or ``(N, O)`` targets.

        Returns:
            A scalar tensor (differentiable in the net's and the GP's parameters).

        Example:
            >>> import bnn_pyro as bp
            >>> m = DKL(bp.nn.mlp(2, [4], 1), bp.Gaussian(scale=0.5))
            >>> float(m.objective(torch.randn(6, 2), torch.randn(6)).detach()) > 0
            True
        """
        x = self._check_x(x)
        y = torch.as_tensor(y, device=self.device)
        y = self._placed(check_targets(x, y, self.likelihood, len(self.mean)))
        with ParamScope():
            return self._objective(self.features(x), y, len(x))

    def _objective(self, h: torch.Tensor, y: torch.Tensor, rows: int) -> torch.Tensor:
        """:func:`~bnn_pyro.methods.dkl.gp.gp_objective` of features ``h (B, H)`` and targets
        ``y (B, O)`` (less the GP's mean) out of ``rows`` training rows."""
        return gp_objective(self.gp, h, (y - self.mean).t(), rows)

    @torch.no_grad()
    def after_training(self, x: torch.Tensor, yt: torch.Tensor, settings: TrainSettings) -> None:
        """The exact GP's data: the features of every training row (the net in eval mode) and
        the targets; a learned noise into ``noise_scale``."""
        if self.exact:
            with modes(self.model, lambda m: False):
                blocks = [self.features(x[s : s + _ROWS]) for s in range(0, len(x), _ROWS)]
            self.train_features = torch.cat(blocks).to(self.dtype)
            self.train_targets = yt.t().to(self.dtype).contiguous()
        self._estimate_noise(float(noise_variance(self.gp).sqrt()))

    def fitted_state(self) -> dict[str, Any]:
        """The exact GP's number of training rows (its buffers' length)."""
        return {"rows": len(self.train_features)}

    def restore_fitted_state(self, fitted: dict[str, Any]) -> None:
        """Buffers of the saved length, for ``load_state_dict``."""
        rows = int(fitted["rows"])
        self.train_features = self.train_features.new_zeros(rows, self.train_features.shape[1])
        self.train_targets = self.train_targets.new_zeros(len(self.train_targets), rows)

    # ------------------------------------------------------------------ predict
    def _moments(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`output_moments` of checked inputs."""
        # a fresh param store of its own for each call: Pyro would otherwise share the GP's
        # parameters by name ("kernel.lengthscale", ...) with every other GP's through the
        # global store, and keep stale references in it
        with torch.no_grad(), modes(self.model, lambda m: False), ParamScope():
            h = self.features(x)
            outputs = len(self.mean)
            if self.exact and len(self.train_features) == 0:  # unfitted: the prior
                var = self.gp.kernel(h, diag=True)
                return self.mean.expand(len(h), outputs).clone(), var[:, None].expand(-1, outputs)
            if self.exact:
                self.gp.set_data(self.train_features, self.train_targets - self.mean[:, None])
                loc, var = self.gp(h, full_cov=False, noiseless=True)
            else:
                loc, var = self.gp(h, full_cov=False)
        loc, var = loc.expand(outputs, len(h)), var.expand(outputs, len(h))
        return loc.t() + self.mean, var.t().contiguous()

    _row_wise_draws = True  # independent draws per row: a seed per block of rows

    def _sample_outputs(self, x: torch.Tensor, num_samples: int, seed: int | None) -> torch.Tensor:
        """``(S, N, O)`` draws of ``f(x)`` from each row's marginal (independent across rows)."""
        mean, var = self._moments(x)
        with seeded(seed, self.device):
            eps = torch.randn(num_samples, *mean.shape, dtype=mean.dtype, device=mean.device)
        return mean + var.sqrt() * eps

    _closed_rows = _ROWS

    def _noise_std(self) -> torch.Tensor:
        """The GP's noise std ``σ``."""
        return noise_variance(self.gp).detach().sqrt()
