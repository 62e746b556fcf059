"""``VBLL``: a net whose last linear layer is a variational Bayesian last layer (Harrison et al.
2024), trained with the net by a deterministic ELBO and predicting in closed form."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from bnn_pyro._checks import check_choice, check_float, check_int, check_module
from bnn_pyro._rng import seeded
from bnn_pyro.likelihoods import Likelihood
from bnn_pyro.methods.classic.base import ClassicMethod, StackedParts
from bnn_pyro.methods.classic.closed_form import ClosedFormPredictive
from bnn_pyro.methods.classic.last_layer import LastLayerReader
from bnn_pyro.methods.classic.params import last_linear
from bnn_pyro.methods.classic.training import TrainSettings, modes
from bnn_pyro.methods.vbll.head import COVARIANCES, VBLLHead
from bnn_pyro.training import History

__all__ = ["VBLL"]

#: Rows per block of the closed-form ``predict``.
_ROWS = 4096


class VBLL(LastLayerReader, ClosedFormPredictive, ClassicMethod):
    """Variational Bayesian last layers: the net's last ``nn.Linear`` becomes a Gaussian
    ``q(W)`` (dense or diagonal covariance per output) trained jointly with the rest of the net
    by a deterministic ELBO (:class:`~bnn_pyro.methods.vbll.head.VBLLHead`); ``predict`` is in
    closed form for a regression (the mean ``M φ(x)`` and variance ``φ(x)ᵀ Σ φ(x)``) and for a
    classifier's logits, sampled through the softmax.

    ``φ(x)`` is what the net's last ``nn.Linear`` reads (its bias a constant feature), so the
    net's output must be that layer's output: ``fit`` refuses a net that does anything after
    it. After a fit, that layer holds ``q``'s mean, so the net itself predicts the mean.

    The ELBO is per row of the training set, its KL divided by the ``N`` that ``fit`` sees:
    what the ``vbll`` package's ``regularization_weight = 1 / N`` does by hand. A regression's
    noise is learned (``Gaussian(scale="learned")``, under the paper's Wishart term) or fixed
    (``Gaussian(scale=s)``); a classifier learns a noise on its logits, as in the paper.

    Args:
        model: the net, ``(N, ...) -> (N, O)``, ending in an ``nn.Linear``.
        likelihood: a ``Gaussian`` (fixed or learned scale) or ``Categorical``, or
            ``"regression"`` / ``"classification"``.
        covariance: ``"dense"`` (a Cholesky factor per output, ``O·F²`` parameters) or
            ``"diagonal"``.
        prior_scale: the prior variance of each last-layer weight is ``prior_scale / F`` for a
            regression and ``2 · prior_scale / F`` for a classifier (``F`` features with the
            bias), as in the ``vbll`` package.
        wishart_scale: the Wishart term's scale (default ``1e-2`` for a regression, ``1`` for a
            classifier, the ``vbll`` package's).
        dof: the Wishart term's degrees of freedom.
        kl_weight: multiplies the KL and Wishart terms (``1``: the ELBO).
        num_samples: ``S`` drawn by ``predict(return_samples=True)`` and through a softmax.
        noise_scale: a fixed regression noise std, as ``Gaussian(scale=...)`` gives it.

    Example:
        >>> import bnn_pyro as bp
        >>> _ = torch.manual_seed(0)
        >>> net = bp.nn.mlp(1, [16], 1)
        >>> m = VBLL(net, bp.Gaussian(scale="learned"))
        >>> x = torch.linspace(-2, 2, 64).unsqueeze(-1)
        >>> _ = m.fit(x, torch.sin(x), epochs=5, progress=False, seed=0)
        >>> mean, var = m.predict(x)  # closed form, no draws
        >>> # the net's last layer holds q's mean (to float32 round-off: two summation orders)
        >>> mean.shape, var.shape, torch.allclose(m.model(x), mean, atol=1e-6)
        (torch.Size([64, 1]), torch.Size([64, 1]), True)
    """

    _config_keys = ("covariance", "prior_scale", "wishart_scale", "dof", "kl_weight", "num_samples")

    def __init__(
        self,
        model: nn.Module,
        likelihood: Likelihood | str,
        *,
        covariance: str = "dense",
        prior_scale: float = 1.0,
        wishart_scale: float | None = None,
        dof: float = 1.0,
        kl_weight: float = 1.0,
        num_samples: int = 100,
        noise_scale: float | torch.Tensor | None = None,
    ) -> None:
        super().__init__()
        check_module("model", model)
        check_choice("covariance", covariance, COVARIANCES)
        check_float("prior_scale", prior_scale, minimum=0.0, strict=True)
        if wishart_scale is not None:
            check_float("wishart_scale", wishart_scale, minimum=0.0, strict=True)
        check_float("dof", dof, minimum=0.0)
        check_float("kl_weight", kl_weight, minimum=0.0)
        check_int("num_samples", num_samples)
        self._set_likelihood(likelihood, noise_scale)
        self._last_name, last = last_linear(model, "VBLL")
        classifies = self.likelihood.classifies
        self.model = model
        self.covariance = covariance
        self.prior_scale = float(prior_scale)
        self.wishart_scale = float(
            wishart_scale if wishart_scale is not None else (1.0 if classifies else 1e-2)
        )
        self.dof = float(dof)
        self.kl_weight = float(kl_weight)
        self.num_samples = num_samples
        features = last.in_features + (last.bias is not None)
        self.head = VBLLHead(
            features,
            last.out_features,
            classifies=classifies,
            covariance=covariance,
            prior_variance=(2.0 if classifies else 1.0) * self.prior_scale / features,
            wishart_scale=self.wishart_scale,
            dof=self.dof,
            device=last.weight.device,
            dtype=last.weight.dtype,
        )
        with torch.no_grad():  # q's mean starts at the net's own last layer
            self.head.mean.copy_(_weight_and_bias(last))
        self._fix_noise()

    # ------------------------------------------------------------------ the features
    def features(self, x: torch.Tensor) -> torch.Tensor:
        """``φ(x) (N, F)``: what the net's last ``nn.Linear`` reads, a column of ones appended
        where it has a bias (in the net's current train/eval mode).

        Example:
            >>> import bnn_pyro as bp
            >>> m = VBLL(bp.nn.mlp(3, [8], 2), "classification")
            >>> m.features(torch.randn(5, 3)).shape  # 8 hidden units and the bias
            torch.Size([5, 9])
        """
        phi = self._read(x)[0]
        if self._last().bias is None:
            return phi
        return torch.cat([phi, phi.new_ones(len(phi), 1)], dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, O)``: the mean of the last layer's output, ``M φ(x)``."""
        return self.head.output_moments(self.features(x))[0]

    # ------------------------------------------------------------------ fit
    def _fit(self, x: Any, y: Any, settings: TrainSettings) -> History:
        """Train the net's body and ``q`` on the negative ELBO per row; then put ``q``'s mean
        in the net's last layer and a learned noise in ``noise_scale``."""
        validation_data = settings.validation_data
        x, yt, validation = self.fit_data(x, y, self.fit_probe, self.model, validation_data)
        head, n, kl_weight = self.head, len(x), self.kl_weight
        self._fix_noise()
        params = self._param_groups(head.parameters())  # q: its KL

        def loss(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
            return head.loss(self.features(xb), yb, n, kl_weight)

        history = self._train(
            params, loss, (x, yt), settings, module=self, desc="VBLL",
            validation=validation,
        )  # fmt: skip
        self.after_training(x, yt, settings)
        return history

    def stacked_parts(self, x: torch.Tensor) -> StackedParts:
        """For a stacked fit on ``x`` ``(N, ...)``: the net without its last layer (it returns
        the features), ``q``, and the negative ELBO per row of one member, as :meth:`fit`
        trains them (see :meth:`ClassicMethod.stacked_parts`)."""
        self._fix_noise()
        n, kl_weight, bias = len(x), self.kl_weight, self._last().bias is not None

        def loss(head: nn.Module, h: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
            phi = torch.cat([h, h.new_ones(len(h), 1)], dim=-1) if bias else h
            return head.loss(phi, yb, n, kl_weight)

        return self.without_last(x), self.head, loss

    def _fix_noise(self) -> None:
        """A regression noise the user set (constructor, likelihood or assignment) is the
        head's fixed noise; otherwise the head learns it."""
        if not self.head.classifies:
            self.head.set_noise(self.noise_scale if self._noise_from_user else None)

    def after_training(self, x: torch.Tensor, yt: torch.Tensor, settings: TrainSettings) -> None:
        """``q``'s mean into the net's last layer; a learned regression noise into
        ``noise_scale`` (a float for one output, else ``(O,)``)."""
        last, head = self._last(), self.head
        with torch.no_grad():
            mean = head.mean.detach()
            last.weight.copy_(mean[:, : last.in_features])
            if last.bias is not None:
                last.bias.copy_(mean[:, -1])
        if not head.classifies:
            noise = head.noise_log_scale.detach().exp()
            self._estimate_noise(float(noise) if noise.numel() == 1 else noise.clone())

    # ------------------------------------------------------------------ predict
    def _moments(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`output_moments` of checked inputs."""
        with torch.no_grad(), modes(self.model, lambda m: False):
            mean, var = self.head.output_moments(self.features(x))
        if self.head.classifies:
            var = var + self.head.noise_variance()
        return mean, var

    def _sample_outputs(self, x: torch.Tensor, num_samples: int, seed: int | None) -> torch.Tensor:
        with seeded(seed, self.device), modes(self.model, lambda m: False):
            return self.head.sample_outputs(self.features(x), num_samples)

    _closed_rows = _ROWS

    def _noise_std(self) -> float | torch.Tensor:
        """A regression's ``σ`` (fixed by the user, or learned by ``fit``)."""
        return self.noise_scale


def _weight_and_bias(last: nn.Linear) -> torch.Tensor:
    """``(O, F)``: the layer's weight, its bias as one more column."""
    if last.bias is None:
        return last.weight.detach()
    return torch.cat([last.weight.detach(), last.bias.detach().unsqueeze(-1)], dim=-1)
