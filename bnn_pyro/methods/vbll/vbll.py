"""``VBLL``: a net whose last linear layer is a variational Bayesian last layer (Harrison et al.
2024), trained with the net by a deterministic ELBO and predicting in closed form."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from bnn_pyro._checks import check_choice, check_float, check_int, check_module
from bnn_pyro._rng import seeded
from bnn_pyro.base import PredictOutput
from bnn_pyro.likelihoods import Likelihood
from bnn_pyro.methods.classic.base import ClassicMethod
from bnn_pyro.methods.classic.last_layer import LastLayerReader
from bnn_pyro.methods.classic.params import last_linear
from bnn_pyro.methods.classic.training import TrainSettings, modes
from bnn_pyro.methods.vbll.head import COVARIANCES, VBLLHead
from bnn_pyro.training import History

__all__ = ["VBLL"]

#: Rows per block of the closed-form ``predict``.
_ROWS = 4096


class VBLL(LastLayerReader, ClassicMethod):
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
        x, yt, validation = self.fit_data(x, y, self._probe, self.model, settings.validation_data)
        head, n, kl_weight = self.head, len(x), self.kl_weight
        self._fix_noise()
        last = {id(p) for p in self._last().parameters()}  # q's mean stands in for them
        body = [p for p in self.model.parameters() if id(p) not in last]
        own = [p for p in head.parameters() if p.requires_grad]
        # weight decay (a point fit's Gaussian prior) is the body's alone: q has its KL
        params = [{"params": body}, {"params": own, "weight_decay": 0.0}]

        def loss(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
            return head.loss(self.features(xb), yb, n, kl_weight)

        history = self._train(
            params, loss, (x, yt), settings, module=self.model, desc="VBLL",
            validation=validation,
        )  # fmt: skip
        self.after_training(x, yt, settings)
        return history

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
    def output_moments(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The closed-form mean and variance ``(N, O)`` of the net's outputs under ``q`` (the
        net in eval mode); for a classifier, of its logits, the logit noise included.

        Example:
            >>> import bnn_pyro as bp
            >>> m = VBLL(bp.nn.mlp(2, [4], 1), "regression")
            >>> [t.shape for t in m.output_moments(torch.randn(3, 2))]
            [torch.Size([3, 1]), torch.Size([3, 1])]
        """
        return self._moments(self._check_x(x))

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

    @torch.no_grad()
    def predict(
        self,
        x: torch.Tensor,
        return_samples: bool = False,
        normalize_output: bool | None = None,
        *,
        num_samples: int | None = None,
        seed: int | None = None,
        generator: torch.Generator | None = None,
        **options: Any,
    ) -> PredictOutput:
        """The predictive of ``q`` at ``x``: in closed form where the outputs are returned as
        they are (a regression, or a classifier's logits with ``normalize_output=False``), the
        mean and variance of ``S`` sampled probability vectors through a softmax.

        Args:
            x: ``(N, ...)`` inputs.
            return_samples: also return ``S`` samples (the outputs for ``S`` draws of the last
                layer's weights, softmaxed where the outputs are); the closed-form mean and
                variance are returned beside them, not the samples' own.
            normalize_output: softmax multi-column outputs; ``None``: for a classifier only.
            num_samples: ``S`` (default: the constructor's ``num_samples``).
            seed: makes the draws reproducible without touching the global RNG.
            generator: the same through a ``torch.Generator`` (instead of ``seed``).
            **options: none (an unknown one is refused).

        Returns:
            ``mean (N, O)``, ``variance (N, O)`` (epistemic: add ``noise_scale²`` for a
            regression's ``y``) and, if asked, ``samples (S, N, O)``.

        Example:
            >>> import bnn_pyro as bp
            >>> m = VBLL(bp.nn.mlp(2, [4], 3), bp.Categorical())
            >>> mean, var, samples = m.predict(torch.randn(5, 2), return_samples=True,
            ...                                num_samples=8, seed=0)
            >>> samples.shape, torch.allclose(mean.sum(-1), torch.ones(5))
            (torch.Size([8, 5, 3]), True)
        """
        if options:
            raise TypeError(f"VBLL.predict got unknown options {sorted(options)}")
        draws = {"num_samples": num_samples, "seed": seed, "generator": generator}
        x = self._check_x(x)
        softmaxed = self._normalize(normalize_output) and self.head.mean.shape[0] > 1
        if softmaxed:
            return super().predict(x, return_samples, normalize_output, **draws)
        self._check_draws(num_samples, seed, generator)
        return self._closed_form(x, self._moments, _ROWS, return_samples, normalize_output, draws)

    def predictive_gaussian(
        self, x: torch.Tensor, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The exact Gaussian predictive of a regression's ``y``,
        ``N(M φ(x), φ(x)ᵀ Σ φ(x) + σ²)``, as a mixture of one component.

        Args:
            x: ``(N, ...)`` inputs.
            **kwargs: passed to :meth:`predict` (checked; the closed form draws nothing).

        Returns:
            ``locs (1, N, O)`` and ``scales (1, N, O)``.

        Raises:
            NotImplementedError: for a classifier.

        Example:
            >>> import bnn_pyro as bp
            >>> m = VBLL(bp.nn.mlp(2, [4], 1), bp.Gaussian(scale=0.5))
            >>> locs, scales = m.predictive_gaussian(torch.randn(3, 2))
            >>> locs.shape, bool((scales > 0.5).all())
            (torch.Size([1, 3, 1]), True)
        """
        if self.head.classifies:
            raise NotImplementedError(
                "predictive_gaussian is a regression's predictive of y, and this VBLL classifies: "
                "use predict"
            )
        mean, var = self.predict(x, **kwargs)
        noise = torch.as_tensor(self.noise_scale, dtype=mean.dtype, device=mean.device)
        return mean.unsqueeze(0), (var + noise**2).sqrt().unsqueeze(0)


def _weight_and_bias(last: nn.Linear) -> torch.Tensor:
    """``(O, F)``: the layer's weight, its bias as one more column."""
    if last.bias is None:
        return last.weight.detach()
    return torch.cat([last.weight.detach(), last.bias.detach().unsqueeze(-1)], dim=-1)
