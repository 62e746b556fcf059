"""SWAG (Maddox et al. 2019): a Gaussian over weights fitted to the SGD trajectory."""

from __future__ import annotations

import copy
import math

import torch
import torch.nn as nn
from torch.nn.utils import vector_to_parameters
from torch.optim.swa_utils import update_bn
from torch.utils.data import DataLoader, TensorDataset

from bnn_pyro._checks import check_float, check_int, check_module
from bnn_pyro._rng import seed_from, seeded
from bnn_pyro.exceptions import NotFittedError, warn_user
from bnn_pyro.likelihoods import Likelihood
from bnn_pyro.methods.classic.base import ClassicMethod
from bnn_pyro.methods.classic.params import batched_call, flatten, unflatten
from bnn_pyro.methods.classic.training import (
    TrainSettings,
    modes,
    module_device,
)
from bnn_pyro.training import Callback, History

__all__ = ["SWAG"]


class SWAG(ClassicMethod):
    """SWAG: diagonal plus low-rank Gaussian posterior from SGD iterates.

    :meth:`collect_model` folds one snapshot θ_i of the weights into running moments. The mean
    and the diagonal variance use Welford's update (``δ = θ - μ; μ += δ/n; M2 += δ (θ - μ)``,
    ``Σ_diag = M2 / n``): the textbook ``E[θ²] - E[θ]²`` cancels catastrophically when the
    spread is small next to the weights. The low-rank part keeps the deviations
    ``θ_i - μ_i`` of the last ``K = max_num_models`` snapshots as rows of ``D̂`` (K, P).
    A sample is

        θ = μ + sqrt(scale) · (sqrt(Σ_diag) ⊙ z₁ + D̂ᵀ z₂ / sqrt(k - 1))

    with ``z₁ ~ N(0, I_P)``, ``z₂ ~ N(0, I_k)`` and ``k`` the number of stored deviations
    (the low-rank term needs k >= 2); ``scale = 0.5`` is the paper's full SWAG.
    ``max_num_models=0`` gives diagonal SWAG. Variances are clamped below at
    ``var_clamp``.

    Prediction runs the S sampled weight sets at once with ``torch.func.vmap``. A net with
    BatchNorm needs its statistics recomputed for each sample (Maddox et al.): set ``bn_loader``
    (any iterable of input batches or ``(x, y)`` tuples; :meth:`fit` sets it to its training
    data), and each sample is then run on a copy of the net after
    ``torch.optim.swa_utils.update_bn`` — a loop over samples. Without ``bn_loader`` a
    BatchNorm net uses the net's current statistics and a warning says so.

    ``state_dict()`` holds the net, the moments and the deviations (plain tensors, loadable
    with ``weights_only=True``); ``load_state_dict`` restores them.

    Args:
        model: the net being trained, ``(N, ...) -> (N, O)``.
        num_samples: S, weight samples per :meth:`predict`.
        var_clamp: lower bound of the diagonal variance (>= 0).
        max_num_models: K, rank of the low-rank part (0 = diagonal only).
        scale: multiplies the covariance when sampling (> 0).
        likelihood: ``"classification"`` or ``"regression"`` (used by :meth:`fit`).
        noise_scale: Gaussian noise std for regression; None lets :meth:`fit` estimate it.
        bn_loader: data for the BatchNorm refresh (see above).

    Example:
        >>> net = nn.Linear(2, 1)
        >>> swag = SWAG(net, num_samples=5, max_num_models=3)
        >>> for _ in range(4):
        ...     with torch.no_grad():
        ...         _ = net.weight.add_(0.1 * torch.randn(1, 2))
        ...     swag.collect_model(net)
        >>> swag.predict(torch.randn(6, 2))[1].shape
        torch.Size([6, 1])
    """

    _config_keys = ("num_samples", "var_clamp", "max_num_models", "scale")
    _resume_extendable = False  # the default swa_start is epochs // 2

    def __init__(
        self,
        model: nn.Module,
        num_samples: int = 20,
        var_clamp: float = 1e-6,
        max_num_models: int = 20,
        *,
        scale: float = 0.5,
        likelihood: Likelihood | str = "classification",
        noise_scale: float | torch.Tensor | None = None,
        bn_loader: object | None = None,
    ) -> None:
        super().__init__()
        if not any(True for _ in check_module("model", model).parameters()):
            raise ValueError("model must have parameters for SWAG, got a module without any")
        check_int("num_samples", num_samples)
        check_float("var_clamp", var_clamp, minimum=0.0, strict=False)
        check_int("max_num_models", max_num_models, minimum=0)
        check_float("scale", scale, minimum=0.0, strict=True)
        self._set_likelihood(likelihood, noise_scale)
        self.model = model
        self.num_samples = num_samples
        self.var_clamp = float(var_clamp)
        self.max_num_models = max_num_models
        self.scale = float(scale)
        self.bn_loader = bn_loader
        self._shapes = {n: p.shape for n, p in model.named_parameters()}
        ref = flatten(dict(model.named_parameters())).detach()
        self.register_buffer("swag_mean", torch.zeros_like(ref))
        self.register_buffer("swag_m2", torch.zeros_like(ref))
        self.register_buffer("swag_deviations", ref.new_zeros(max_num_models, ref.numel()))
        self.register_buffer("swag_n_models", torch.zeros((), dtype=torch.long))

    fit_defaults = {"lr": 1e-2, "optimizer": "sgd"}  # constant-lr SGD, as Maddox et al.

    def epoch_callbacks(self, epochs: int) -> list[Callback]:
        """The snapshot collector of a run of ``epochs`` epochs, from ``epochs // 2`` on (the
        stacked fit's; ``fit`` takes ``swa_start``)."""
        return [self._collector(epochs)]

    def _collector(self, epochs: int, swa_start: int | None = None) -> Callback:
        """Clear the snapshots and return the epoch callback that collects one per epoch from
        ``swa_start`` (default ``epochs // 2``) on; checks ``swa_start`` first."""
        if swa_start is None:
            swa_start = epochs // 2
        check_int("swa_start", swa_start, minimum=0)
        if swa_start >= epochs:
            raise ValueError(f"swa_start must be < epochs = {epochs}, got {swa_start}")
        self.reset()

        def collect(method: object, epoch: int, history: History) -> None:
            if epoch >= swa_start:
                self.collect_model()

        return collect

    def after_training(self, x: torch.Tensor, yt: torch.Tensor, settings: TrainSettings) -> None:
        """After the SGD run: the BatchNorm refresh data and the noise (see :meth:`_fit`)."""
        if self.bn_loader is None and any(
            isinstance(m, nn.modules.batchnorm._BatchNorm) for m in self.model.modules()
        ):
            self.bn_loader = DataLoader(TensorDataset(x), batch_size=settings.batch_size)
        self._refit_noise(x, yt, settings.seed)

    @property
    def n_models(self) -> int:
        """Number of collected snapshots."""
        return int(self.swag_n_models)

    def reset(self) -> None:
        """Forget every collected snapshot."""
        for buf in (self.swag_mean, self.swag_m2, self.swag_deviations, self.swag_n_models):
            buf.zero_()

    @torch.no_grad()
    def collect_model(self, model: nn.Module | None = None) -> None:
        """Fold the current weights of ``model`` (default: the wrapped net) into the moments.

        Call it periodically during training, e.g. once per epoch after a warm-up.

        Example:
            >>> net = nn.Linear(2, 1)
            >>> swag = SWAG(net)
            >>> swag.collect_model(net); swag.collect_model(net)
            >>> swag.n_models
            2
        """
        model = self.model if model is None else check_module("model", model)
        shapes = {n: p.shape for n, p in model.named_parameters()}
        if shapes != self._shapes:
            raise ValueError(
                "model must have the parameters (names and shapes) of the wrapped net "
                f"{list(self._shapes.items())}, got {list(shapes.items())}"
            )
        theta = flatten(dict(model.named_parameters())).to(self.swag_mean)
        self.swag_n_models += 1
        n = self.n_models
        delta = theta - self.swag_mean
        self.swag_mean += delta / n
        self.swag_m2 += delta * (theta - self.swag_mean)
        if self.max_num_models > 0:
            self.swag_deviations[(n - 1) % self.max_num_models] = theta - self.swag_mean

    def _flat_variance(self) -> torch.Tensor:
        return (self.swag_m2 / max(self.n_models, 1)).clamp_min(self.var_clamp)

    @property
    def mean(self) -> dict[str, torch.Tensor]:
        """SWA mean ``{name: tensor}`` of the collected snapshots."""
        return unflatten(self.swag_mean, self._shapes)

    @property
    def variance(self) -> dict[str, torch.Tensor]:
        """Diagonal variance ``{name: tensor}`` (population variance, clamped at var_clamp)."""
        return unflatten(self._flat_variance(), self._shapes)

    @property
    def deviations(self) -> torch.Tensor:
        """Deviation matrix ``D̂`` ``(k, P)``, oldest snapshot first, ``k = min(n, K)``."""
        n, k_max = self.n_models, self.max_num_models
        if n <= k_max:
            return self.swag_deviations[:n]
        start = n % k_max
        return torch.cat([self.swag_deviations[start:], self.swag_deviations[:start]])

    def _sample_flat(self, num_samples: int) -> torch.Tensor:
        if self.n_models == 0:
            raise NotFittedError("SWAG has no snapshots: call collect_model() or fit() first")
        p = self.swag_mean.numel()
        noise = self._flat_variance().sqrt() * torch.randn(
            num_samples, p, dtype=self.swag_mean.dtype, device=self.swag_mean.device
        )
        dev = self.deviations
        if len(dev) >= 2:
            z2 = torch.randn(num_samples, len(dev), dtype=dev.dtype, device=dev.device)
            noise = noise + z2 @ dev / math.sqrt(len(dev) - 1)
        return self.swag_mean + math.sqrt(self.scale) * noise

    @torch.no_grad()
    def sample_parameters(
        self, num_samples: int | None = None, *, generator: torch.Generator | None = None
    ) -> dict[str, torch.Tensor]:
        """Draw weights from the SWAG posterior.

        Args:
            num_samples: None for one draw ``{name: (*shape)}`` (seed API), or S for
                ``{name: (S, *shape)}``.
            generator: for reproducible draws (the global RNG is not touched).

        Example:
            >>> net = nn.Linear(2, 1)
            >>> swag = SWAG(net)
            >>> swag.collect_model(net)
            >>> swag.sample_parameters(4)["weight"].shape
            torch.Size([4, 1, 2])
        """
        s = 1 if num_samples is None else check_int("num_samples", num_samples)
        with seeded(seed_from(generator), self.swag_mean.device):
            flat = self._sample_flat(s)
        return unflatten(flat[0] if num_samples is None else flat, self._shapes)

    def _sample_outputs(self, x: torch.Tensor, num_samples: int, seed: int | None) -> torch.Tensor:
        if self.n_models == 0:
            raise NotFittedError("SWAG has no snapshots: call collect_model() or fit() first")
        with seeded(seed, self.swag_mean.device):
            flat = self._sample_flat(num_samples)
        has_bn = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in self.model.modules())
        if has_bn and self.bn_loader is not None:
            net = copy.deepcopy(self.model)
            outs = []
            for theta in flat:
                vector_to_parameters(theta, net.parameters())
                update_bn(self.bn_loader, net, device=module_device(net))
                net.eval()
                outs.append(net(x))
            samples = torch.stack(outs)
        else:
            if has_bn:
                warn_user(
                    "SWAG: the net has BatchNorm but bn_loader is None, so the statistics are "
                    "not refreshed for each weight sample; set swag.bn_loader",
                    RuntimeWarning,
                )
            with modes(self.model, lambda m: False):
                samples = batched_call(self.model, unflatten(flat, self._shapes), x)
        return samples

    def _fit(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        settings: TrainSettings,
        swa_start: int | None = None,
    ) -> History:
        """Train at a constant learning rate and collect one snapshot per epoch from ``swa_start``.

        Clears earlier snapshots first. SGD with momentum 0.9 at a constant ``lr`` is the
        setting of Maddox et al.; ``optimizer="adam"`` is allowed. If the net has BatchNorm and
        ``bn_loader`` is None, it is set to the training inputs. For regression,
        ``noise_scale`` (unless set by the user) becomes the maximum-likelihood std of the
        training residuals of the SWAG predictive mean.

        Args:
            x: ``(N, D)`` inputs.
            y: ``(N,)`` class indices, or ``(N,)`` / ``(N, O)`` regression targets.
            swa_start: first epoch (0-based) whose end is collected; default ``epochs // 2``.

        Returns:
            The :class:`~bnn_pyro.training.History` (``loss`` per epoch).

        Example:
            >>> swag = SWAG(nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 3)))
            >>> x, y = torch.randn(40, 2), torch.randint(0, 3, (40,))
            >>> history = swag.fit(x, y, epochs=4, progress=False, seed=0)
            >>> swag.n_models, len(history["loss"])
            (2, 4)
        """
        x, yt, validation = self.fit_data(x, y, self.model, self.model, settings.validation_data)
        collect = self._collector(settings.epochs, swa_start)
        history = self._train_net((x, yt), settings, validation, "SWAG", before=[collect])
        self.after_training(x, yt, settings)
        return history
