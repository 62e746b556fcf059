"""Monte Carlo dropout (Gal & Ghahramani 2016): dropout kept on at test time."""

from __future__ import annotations

import warnings

import torch
import torch.nn as nn

from bnn_pyro._checks import check_bool, check_int, check_module
from bnn_pyro._rng import seeded
from bnn_pyro.likelihoods import Likelihood
from bnn_pyro.methods.classic.base import ClassicMethod
from bnn_pyro.methods.classic.training import (
    TrainSettings,
    modes,
    module_device,
)
from bnn_pyro.training import History

__all__ = ["DROPOUT_TYPES", "MCDropout"]

DROPOUT_TYPES = (
    nn.Dropout,
    nn.Dropout1d,
    nn.Dropout2d,
    nn.Dropout3d,
    nn.AlphaDropout,
    nn.FeatureAlphaDropout,
)
_MAX_ROWS = 65536  # rows per batched forward pass: S_chunk * N <= _MAX_ROWS


class MCDropout(ClassicMethod):
    """Monte Carlo dropout: S stochastic forward passes with dropout on at test time.

    During :meth:`predict` only the dropout modules are put in train mode; every other module
    (BatchNorm above all) stays in eval mode, and all modes are restored afterwards.

    Nets that call ``F.dropout(h, p, training=self.training)`` themselves have no dropout
    module to switch on: pass ``functional_dropout=True`` and every module *except* those with
    running statistics (BatchNorm, InstanceNorm) is put in train mode during prediction, so the
    functional dropout fires and normalisation statistics stay frozen. ``dropout_rate`` cannot
    change the rate of functional dropout.

    The S passes are batched: the input is repeated ``k`` times along the batch dimension and
    run in one pass (``k * N <= 65536`` rows per pass), which is the same as k independent
    passes for any net that treats the rows of a batch independently (true for MLPs, CNNs and
    BatchNorm in eval mode). ``samples_per_pass=1`` gives one pass per sample.

    Args:
        model: the net, ``(N, ...) -> (N, O)``.
        num_samples: S, the number of stochastic passes in :meth:`predict`.
        dropout_rate: ``None`` (default) keeps the net's own dropout rates; a float in
            ``[0, 1)`` is set as ``p`` of every dropout module *of the net you pass* (the net is
            wrapped, not copied: ``fit`` trains it in place too). Pass a copy
            (``copy.deepcopy(net)``) to keep yours as it was.
        functional_dropout: the net calls ``F.dropout`` itself (see above).
        likelihood: ``"classification"`` (cross-entropy in :meth:`fit`) or ``"regression"``
            (squared error; Gaussian noise ``noise_scale``).
        noise_scale: Gaussian observation noise std for regression; None lets :meth:`fit`
            estimate it.
        samples_per_pass: samples per batched pass; None chooses automatically.

    Example:
        >>> net = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 3))
        >>> mc = MCDropout(net, num_samples=8, dropout_rate=0.2)
        >>> mean, var, samples = mc.predict(torch.randn(5, 2), return_samples=True)
        >>> mean.shape, samples.shape
        (torch.Size([5, 3]), torch.Size([8, 5, 3]))
    """

    _config_keys = ("num_samples", "dropout_rate", "functional_dropout", "samples_per_pass")
    _row_wise_draws = True  # dropout masks are drawn per row: each block of rows gets its seed

    def __init__(
        self,
        model: nn.Module,
        num_samples: int = 20,
        dropout_rate: float | None = None,
        *,
        functional_dropout: bool = False,
        likelihood: Likelihood | str = "classification",
        noise_scale: float | torch.Tensor | None = None,
        samples_per_pass: int | None = None,
    ) -> None:
        super().__init__()
        check_module("model", model)
        check_int("num_samples", num_samples)
        if dropout_rate is not None:
            if isinstance(dropout_rate, bool) or not isinstance(dropout_rate, (int, float)):
                raise TypeError(
                    f"dropout_rate must be a float or None, got {type(dropout_rate).__name__}"
                )
            if not 0 <= dropout_rate < 1:
                raise ValueError(f"dropout_rate must be in [0, 1), got {dropout_rate}")
        check_bool("functional_dropout", functional_dropout)
        if samples_per_pass is not None:
            check_int("samples_per_pass", samples_per_pass)
        self._set_likelihood(likelihood, noise_scale)
        self.model = model
        self.num_samples = num_samples
        self.dropout_rate = dropout_rate
        self.functional_dropout = functional_dropout
        self.samples_per_pass = samples_per_pass
        dropouts = [m for m in model.modules() if isinstance(m, DROPOUT_TYPES)]
        for m in dropouts:
            if dropout_rate is not None:
                m.p = float(dropout_rate)
        if not dropouts and not functional_dropout:
            warnings.warn(
                "MCDropout: no dropout module (nn.Dropout, ...) found in the model: all samples "
                "will be identical (zero variance). Add nn.Dropout layers, or pass "
                "functional_dropout=True if the net calls F.dropout itself.",
                stacklevel=2,
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """One forward pass of the wrapped net (in its current mode)."""
        return self.model(x)

    def _mc_mode(self, m: nn.Module) -> bool:
        if self.functional_dropout:
            return not isinstance(m, nn.modules.batchnorm._NormBase)
        return isinstance(m, DROPOUT_TYPES)

    def _sample_outputs(self, x: torch.Tensor, num_samples: int, seed: int | None) -> torch.Tensor:
        n = len(x)
        per_pass = self.samples_per_pass or max(1, _MAX_ROWS // n)
        chunks = []
        with seeded(seed, module_device(self.model)), modes(self.model, self._mc_mode):
            for start in range(0, num_samples, per_pass):
                k = min(per_pass, num_samples - start)
                out = self.model(x.repeat(k, *([1] * (x.dim() - 1))))
                chunks.append(out.reshape(k, n, *out.shape[1:]))
        return torch.cat(chunks)

    def predict_entropy(
        self, x: torch.Tensor, *, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Entropy of the mean predictive class probabilities (total uncertainty), in nats.

        Args:
            x: ``(N, ...)`` inputs of a classifier with logits ``(N, C)``, ``C > 1``.
            generator: optional, for reproducible dropout masks.

        Returns:
            ``(N,)`` entropies ``-sum_c p_c log p_c``.

        Example:
            >>> net = nn.Sequential(nn.Linear(2, 8), nn.Dropout(0.3), nn.Linear(8, 4))
            >>> MCDropout(net, num_samples=5, dropout_rate=0.3).predict_entropy(
            ...     torch.randn(3, 2)).shape
            torch.Size([3])
        """
        mean, _, samples = self.predict(x, return_samples=True, generator=generator)
        if samples.dim() != 3 or samples.shape[-1] < 2:
            raise ValueError(
                "predict_entropy needs class logits of shape (N, C) with C > 1, got per-sample "
                f"outputs of shape {tuple(samples.shape[1:])}"
            )
        return -(mean * torch.log(mean.clamp_min(1e-30))).sum(dim=-1)

    def _fit(self, x: torch.Tensor, y: torch.Tensor, settings: TrainSettings) -> History:
        """Train the net with dropout on (cross-entropy or squared error), then set the noise.

        For regression, ``noise_scale`` (unless set by the user) becomes the maximum-likelihood
        homoscedastic std of the training residuals of the MC predictive mean,
        ``sqrt(mean((y - mean_pred)²))`` per output.

        Args:
            x: ``(N, D)`` inputs.
            y: ``(N,)`` class indices, or ``(N,)`` / ``(N, O)`` regression targets.

        Returns:
            The :class:`~bnn_pyro.training.History` (``loss`` per epoch).

        Example:
            >>> net = nn.Sequential(nn.Linear(1, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 1))
            >>> mc = MCDropout(net, num_samples=10, likelihood="regression")
            >>> x = torch.linspace(-1, 1, 32).unsqueeze(-1)
            >>> history = mc.fit(x, x**2, epochs=5, progress=False, seed=0)
            >>> mc.noise_scale > 0
            True
        """
        x, yt, validation = self.fit_data(x, y, self.model, self.model, settings.validation_data)
        history = self._train_net((x, yt), settings, validation, "MCDropout")
        self.after_training(x, yt, settings)
        return history

    def after_training(self, x: torch.Tensor, yt: torch.Tensor, settings: TrainSettings) -> None:
        """After the net's training: the noise from the residuals (see :meth:`_fit`)."""
        self._refit_noise(x, yt, settings.seed)
