"""``HiddenLayer``: one Bayesian hidden layer sampled in pre-activation space, its KL folded in.

It starts from Pyro's ``pyro.contrib.bnn.HiddenLayer``; the maths is the same (Kingma, Salimans &
Welling 2015): for weights ``A ~ Normal(A_mean, A_scale)`` of shape ``(D, H)`` and inputs ``X: (B,
D)``, the pre-activation ``X @ A`` of each example is Gaussian with mean ``X @ A_mean`` and standard
deviation ``sqrt(X² @ A_scale²)``, so it is sampled directly, with fresh noise per example and unit,
and the weights are never drawn. The differences from Pyro's:

* ``batch_shape`` is the rows of ``X`` (and any leading sample dimensions), ``event_shape`` the
  ``H`` (+1) units, so the layer works inside ``pyro.plate``, under ``Predictive`` and under
  ``pyro.enable_validation(True)``;
* the standard deviation is a matmul, ``sqrt(X² @ A_scale²)``: no ``B × D × H`` intermediate;
* bad arguments raise ``TypeError``/``ValueError`` naming them instead of failing ``assert``s;
* sampling the layer in a *guide* raises (see "Where the layer goes").

Where the layer goes:
    ``log_prob`` is ``-KL_factor * KL(q(A) || p(A))``: the KL term of the ELBO, not the density
    of a guide. Sample the learnable layer in the **model**, inside the data plate, and give it
    no guide site. ``Trace_ELBO`` then adds ``log p = -KL_factor * KL`` to the ELBO, the right
    sign. Putting the learnable layer in the guide (and a prior layer in the model, the usage
    copied around the web) would subtract ``log q = -KL`` and so *add* the KL to the ELBO, and the
    weight scales collapse to zero; that usage raises ``ValueError`` at the first ELBO step.
    Pyro warns ``Found vars in model but not guide`` for such a model: expected, as the model
    here holds the whole variational objective.

KL_factor:
    Each of the ``B`` rows carries ``-KL_factor * KL / B``, so ``log_prob(value).sum(-1)`` is
    exactly ``-KL_factor * KL``. Inside ``pyro.plate("data", N, subsample=...)`` the plate
    multiplies by ``N / B``; ``KL_factor = B / N`` (the usual value) then counts the
    KL once per step and the loss is the negative ELBO. With the whole data set in the plate
    (``B == N``) use ``KL_factor = 1``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from numbers import Real
from typing import Any

import torch
import torch.nn.functional as F
from pyro.distributions import constraints
from pyro.distributions.torch_distribution import TorchDistribution

from bnn_pyro.poutine.estimators import preactivation_std

__all__ = ["HiddenLayer"]

_NO_SHAPE = torch.Size()

_IN_GUIDE = (
    "HiddenLayer is sampled in the guide, where the ELBO would subtract its log_prob "
    "(-KL_factor * KL) and so add the KL: the weight scales would collapse to zero. Sample the "
    "learnable HiddenLayer in the model (inside the data plate) and give it no guide site; see "
    "the bnn_pyro.distributions docstring."
)


def _check_tensor(name: str, value: Any, min_dim: int, what: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor {what}, got {type(value).__name__}")
    if not value.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {value.dtype}")
    if value.dim() < min_dim:
        raise ValueError(f"{name} must have shape {what}, got {tuple(value.shape)}")
    return value


def _check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} ({value!r})")
    return value


class HiddenLayer(TorchDistribution):
    """A hidden layer ``non_linearity(X @ A)``, ``A ~ Normal(A_mean, A_scale)``, sampled by local
    reparameterization; ``log_prob`` is ``-KL_factor * KL`` (see the module docstring for where
    the layer goes in SVI and how to set ``KL_factor``).

    Args:
        X: ``(*S, B, D)`` inputs (append a ones column to learn a bias: the last row of ``A``).
        A_mean: ``(*S, D, H)`` weight means.
        A_scale: ``(*S, D, H)`` weight standard deviations (positive; checked when validation
            is on).
        non_linearity: applied to the pre-activations; default ReLU.
        KL_factor: the weight of the KL in ``log_prob``, a float ``>= 0``.
        A_prior_scale: standard deviation of the ``Normal(0, A_prior_scale)`` prior on every
            weight: a positive float or a tensor broadcastable to ``(D, H)``.
        include_hidden_bias: append a column of ones to the output (the next layer's bias).
        weight_space_sampling: sample ``A`` itself (one matrix per leading index, shared by
            the ``B`` rows) instead of the pre-activations; for tests and comparisons.
        validate_args: as in ``torch.distributions``.

    Shapes:
        ``batch_shape = broadcast(X.shape[:-1], A_mean.shape[:-2] + (1,))`` = ``(*S, B)``;
        ``event_shape = (H + include_hidden_bias,)``; ``rsample(sample_shape)`` returns
        ``(*sample_shape, *S, B, H')``; ``log_prob`` ``(*sample_shape, *S, B)``; ``KL`` ``S``.

    Example:
        >>> import warnings
        >>> import pyro, pyro.distributions as dist
        >>> from pyro.infer import SVI, Trace_ELBO
        >>> pyro.clear_param_store()
        >>> X, y = torch.randn(32, 3), torch.randn(32)
        >>> def model(X, y):  # the learnable layer is in the model...
        ...     a_mean = pyro.param("a_mean", torch.zeros(4, 1))  # 3 inputs + the ones column
        ...     a_scale = pyro.param(
        ...         "a_scale", torch.full((4, 1), 0.1), constraint=dist.constraints.positive
        ...     )
        ...     X1 = torch.cat([X, torch.ones(len(X), 1)], -1)
        ...     with pyro.plate("data", len(X)):
        ...         layer = HiddenLayer(
        ...             X1, a_mean, a_scale, non_linearity=lambda a: a, include_hidden_bias=False
        ...         )
        ...         f = pyro.sample("f", layer).squeeze(-1)
        ...         pyro.sample("y", dist.Normal(f, 1.0), obs=y)
        >>> def guide(X, y):  # ...and the guide does not sample it
        ...     pass
        >>> svi = SVI(model, guide, pyro.optim.Adam({"lr": 0.01}), Trace_ELBO())
        >>> with warnings.catch_warnings():  # "Found vars in model but not guide": by design
        ...     warnings.simplefilter("ignore")
        ...     loss = svi.step(X, y)
        >>> HiddenLayer(X, torch.zeros(3, 5), torch.ones(3, 5)).rsample().shape
        torch.Size([32, 6])
    """

    # A_mean is real: a NaN check per construction would cost more than the layer at small sizes
    arg_constraints = {"A_scale": constraints.positive}
    support = constraints.independent(constraints.real, 1)
    has_rsample = True

    def __init__(
        self,
        X: torch.Tensor,
        A_mean: torch.Tensor,
        A_scale: torch.Tensor,
        non_linearity: Callable[[torch.Tensor], torch.Tensor] = F.relu,
        KL_factor: float = 1.0,
        A_prior_scale: float | torch.Tensor = 1.0,
        include_hidden_bias: bool = True,
        weight_space_sampling: bool = False,
        validate_args: bool | None = None,
    ) -> None:
        X = _check_tensor("X", X, 2, "(*S, B, D)")
        A_mean = _check_tensor("A_mean", A_mean, 2, "(*S, D, H)")
        A_scale = _check_tensor("A_scale", A_scale, 2, "(*S, D, H)")
        if A_mean.shape[-2] != X.shape[-1]:
            raise ValueError(
                f"A_mean must have one row per input feature: X has D={X.shape[-1]} columns, "
                f"A_mean has shape {tuple(A_mean.shape)} (expected (*S, {X.shape[-1]}, H))"
            )
        if A_scale.shape[-2:] != A_mean.shape[-2:]:
            raise ValueError(
                f"A_scale must have the shape of A_mean in its last two dims, got "
                f"{tuple(A_scale.shape)} and {tuple(A_mean.shape)}"
            )
        if not (X.dtype == A_mean.dtype == A_scale.dtype):
            raise TypeError(
                f"X, A_mean and A_scale must share a dtype, got {X.dtype}, {A_mean.dtype}, "
                f"{A_scale.dtype}"
            )
        if A_mean.dim() == A_scale.dim() == 2:  # the common case, without broadcast_shapes
            batch_shape = X.shape[:-1]
        else:
            try:
                batch_shape = torch.broadcast_shapes(
                    X.shape[:-1], A_mean.shape[:-2] + (1,), A_scale.shape[:-2] + (1,)
                )
            except RuntimeError:
                raise ValueError(
                    "the leading (sample) dims of X, A_mean and A_scale must broadcast, got X "
                    f"{tuple(X.shape)}, A_mean {tuple(A_mean.shape)}, A_scale "
                    f"{tuple(A_scale.shape)}"
                ) from None
        if not callable(non_linearity):
            raise TypeError(f"non_linearity must be callable, got {type(non_linearity).__name__}")
        if isinstance(KL_factor, bool) or not isinstance(KL_factor, Real):
            raise TypeError(f"KL_factor must be a float, got {type(KL_factor).__name__}")
        if not (KL_factor >= 0 and math.isfinite(KL_factor)):
            raise ValueError(f"KL_factor must be a finite float >= 0, got {KL_factor}")
        if isinstance(A_prior_scale, torch.Tensor):
            try:
                torch.broadcast_shapes(A_prior_scale.shape, A_mean.shape[-2:])
            except RuntimeError:
                raise ValueError(
                    f"A_prior_scale must broadcast to (D, H) = {tuple(A_mean.shape[-2:])}, got "
                    f"shape {tuple(A_prior_scale.shape)}"
                ) from None
            if A_prior_scale.dim() > 2:
                raise ValueError("A_prior_scale must be a float or a (D, H)-broadcastable tensor")
        elif isinstance(A_prior_scale, bool) or not isinstance(A_prior_scale, Real):
            raise TypeError(
                f"A_prior_scale must be a positive float or a tensor, got "
                f"{type(A_prior_scale).__name__}"
            )
        elif not (A_prior_scale > 0 and math.isfinite(A_prior_scale)):
            raise ValueError(f"A_prior_scale must be positive and finite, got {A_prior_scale}")
        self.X, self.A_mean, self.A_scale = X, A_mean, A_scale
        self.non_linearity = non_linearity
        self.KL_factor = float(KL_factor)
        self.A_prior_scale = A_prior_scale
        self.include_hidden_bias = _check_bool("include_hidden_bias", include_hidden_bias)
        self.weight_space_sampling = _check_bool("weight_space_sampling", weight_space_sampling)
        self.dim_X, self.dim_H = X.shape[-1], A_mean.shape[-1]
        self._rows = batch_shape[-1]
        self._kl: torch.Tensor | None = None
        event_shape = torch.Size([self.dim_H + int(include_hidden_bias)])
        super().__init__(batch_shape, event_shape, validate_args=validate_args)
        if self._validate_args and isinstance(A_prior_scale, torch.Tensor):
            if not bool((A_prior_scale > 0).all()):
                raise ValueError("A_prior_scale must be positive everywhere")

    def expand(self, batch_shape: torch.Size, _instance: Any = None) -> HiddenLayer:
        """iid copies over a larger batch (what ``pyro.plate`` asks for); the weights' KL per row
        is unchanged."""
        batch_shape = torch.Size(batch_shape)
        try:
            ok = torch.broadcast_shapes(batch_shape, self.batch_shape) == batch_shape
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(
                f"cannot expand a HiddenLayer of batch_shape {tuple(self.batch_shape)} to "
                f"{tuple(batch_shape)}"
            )
        new = self._get_checked_instance(HiddenLayer, _instance)
        new.__dict__.update({k: v for k, v in self.__dict__.items() if k != "_batch_shape"})
        TorchDistribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def KL(self) -> torch.Tensor:
        """``KL(Normal(A_mean, A_scale) || Normal(0, A_prior_scale))`` summed over ``(D, H)``,
        exact; shape: the leading dims of ``A_mean``/``A_scale``."""
        if self._kl is None:
            m, s, p = self.A_mean, self.A_scale, self.A_prior_scale
            if isinstance(p, torch.Tensor):
                ratio = s / p
                terms = (m / p).square() + ratio.square() - 1.0 - 2.0 * ratio.log()
                self._kl = 0.5 * terms.sum((-2, -1))
            else:
                n = self.dim_X * self.dim_H
                quad = (m.square().sum((-2, -1)) + s.square().sum((-2, -1))) / p**2
                self._kl = 0.5 * quad - s.log().sum((-2, -1)) + n * (math.log(p) - 0.5)
        return self._kl

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """``-KL_factor * KL / B`` for each of the ``B`` rows, shape ``value.shape[:-1]``; the
        rows sum to ``-KL_factor * KL``. The value itself does not enter."""
        if self._validate_args:
            self._validate_sample(value)
        share = (self.KL * (-self.KL_factor / self._rows)).unsqueeze(-1)
        return share.expand(torch.broadcast_shapes(value.shape[:-1], self.batch_shape))

    def score_parts(self, value: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        # An ELBO asks a distribution for its score parts only at *guide* sites.
        raise ValueError(_IN_GUIDE)

    def rsample(self, sample_shape: torch.Size = _NO_SHAPE) -> torch.Tensor:
        """Post-activations ``(*sample_shape, *batch_shape, H')``, differentiable in ``X``,
        ``A_mean`` and ``A_scale``."""
        sample_shape = torch.Size(sample_shape)
        X, m, s = self.X, self.A_mean, self.A_scale
        shape = sample_shape + self.batch_shape + (self.dim_H,)
        if self.weight_space_sampling:
            weight_shape = sample_shape + self.batch_shape[:-1] + (self.dim_X, self.dim_H)
            eps = torch.randn(weight_shape, dtype=m.dtype, device=m.device)
            activation = torch.matmul(X, m + eps * s)
            activation = activation.expand(shape)
        else:
            mean = torch.matmul(X, m)
            std = preactivation_std(X, s)  # sqrt(X² @ s²): two matmuls, no (B, D, H) tensor
            eps = torch.randn(shape, dtype=mean.dtype, device=mean.device)
            activation = mean + eps * std
        activation = self.non_linearity(activation)
        if self.include_hidden_bias:
            activation = F.pad(activation, (0, 1), value=1.0)
        return activation

    def __repr__(self) -> str:
        return (
            f"HiddenLayer(X: {tuple(self.X.shape)}, A_mean: {tuple(self.A_mean.shape)}, "
            f"KL_factor={self.KL_factor:g}, batch_shape={tuple(self.batch_shape)}, "
            f"event_shape={tuple(self.event_shape)})"
        )
