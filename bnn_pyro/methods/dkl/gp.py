"""The Pyro Gaussian process inside ``DKL``: a ``pyro.contrib.gp`` model on ``H`` features with
``O`` outputs (exact or sparse), its noise, and its ELBO per row."""

from __future__ import annotations

from typing import Any

import pyro.contrib.gp as gp
import torch
import torch.nn as nn
from pyro.infer import Trace_ELBO, TraceMeanField_ELBO
from torch.distributions import biject_to, constraints

from bnn_pyro.exceptions import TrainingDivergedError

__all__ = [
    "KERNELS",
    "build_gp",
    "fix_noise",
    "gp_objective",
    "noise_parameter",
    "noise_variance",
]

#: The kernels by name: ``pyro.contrib.gp`` isotropic kernels on the net's features.
KERNELS: dict[str, type[gp.kernels.Isotropy]] = {
    "rbf": gp.kernels.RBF,
    "matern32": gp.kernels.Matern32,
    "matern52": gp.kernels.Matern52,
}


def build_gp(
    width: int,
    outputs: int,
    *,
    kernel: str,
    inducing_points: int | None,
    lengthscale: float,
    variance: float,
    jitter: float,
    **where: Any,
) -> gp.models.GPModel:
    """An unfitted GP on ``width`` features for ``outputs`` targets that share the kernel and
    the noise (variance 1 at the start): ``GPRegression`` for ``inducing_points=None``, else a
    whitened ``VariationalSparseGP`` with that many inducing points (zeros until ``fit``
    places them). Its data is a placeholder row until :func:`gp_objective` sets a batch.

    Example:
        >>> model = build_gp(3, 2, kernel="rbf", inducing_points=None, lengthscale=1.0,
        ...                  variance=1.0, jitter=1e-6)
        >>> type(model).__name__, float(noise_variance(model).detach())
        ('GPRegression', 1.0)
    """
    base = KERNELS[kernel](
        input_dim=width,
        variance=torch.tensor(variance, **where),
        lengthscale=torch.tensor(lengthscale, **where),
    )
    x0, noise = torch.zeros(1, width, **where), torch.tensor(1.0, **where)
    if inducing_points is None:
        return gp.models.GPRegression(x0, None, base, noise=noise, jitter=jitter)
    return gp.models.VariationalSparseGP(  # y's shape fixes q(u)'s: one per output
        x0, torch.zeros(outputs, 1, **where), base,
        Xu=torch.zeros(inducing_points, width, **where),
        likelihood=gp.likelihoods.Gaussian(variance=noise), whiten=True, jitter=jitter,
    )  # fmt: skip


def _exact(model: gp.models.GPModel) -> bool:
    return isinstance(model, gp.models.GPRegression)


def noise_variance(model: gp.models.GPModel) -> torch.Tensor:
    """The GP's noise variance ``σ²`` (a scalar tensor).

    Example:
        >>> model = build_gp(2, 1, kernel="rbf", inducing_points=4, lengthscale=1.0,
        ...                  variance=1.0, jitter=1e-6)
        >>> fix_noise(model, 0.5)
        >>> float(noise_variance(model)), noise_parameter(model).requires_grad
        (0.25, False)
    """
    return model.noise if _exact(model) else model.likelihood.variance


def noise_parameter(model: gp.models.GPModel) -> nn.Parameter:
    """The unconstrained parameter behind :func:`noise_variance` (its log).

    Example:
        >>> model = build_gp(2, 1, kernel="rbf", inducing_points=None, lengthscale=1.0,
        ...                  variance=1.0, jitter=1e-6)
        >>> float(noise_parameter(model))  # log 1
        0.0
    """
    if _exact(model):
        return model.noise_unconstrained
    return model.likelihood.variance_unconstrained


def fix_noise(model: gp.models.GPModel, scale: float | None) -> None:
    """``σ = scale`` and not trained; ``None``: trained from its current value.

    Example:
        >>> model = build_gp(2, 1, kernel="matern52", inducing_points=None, lengthscale=1.0,
        ...                  variance=1.0, jitter=1e-6)
        >>> fix_noise(model, 0.1); round(float(noise_variance(model)), 6)
        0.01
        >>> fix_noise(model, None); noise_parameter(model).requires_grad
        True
    """
    raw = noise_parameter(model)
    raw.requires_grad_(scale is None)
    if scale is not None:
        with torch.no_grad():
            variance = torch.tensor(scale**2, dtype=raw.dtype, device=raw.device)
            raw.copy_(biject_to(constraints.positive).inv(variance))


def gp_objective(
    model: gp.models.GPModel, h: torch.Tensor, y: torch.Tensor, rows: int
) -> torch.Tensor:
    """The loss per row of features ``h (B, H)`` and centred targets ``y (O, B)``: Pyro's ELBO
    of the GP's model and guide (``Trace_ELBO``; the sparse GP's ``TraceMeanField_ELBO``, its
    KL in closed form, scaled to ``rows`` training rows), over the rows it stands for (the
    exact GP's marginal likelihood is of the batch alone). Run it inside a param store of
    the GP's own (:class:`~bnn_pyro.nn.param_scope.ParamScope`).

    Raises:
        TrainingDivergedError: a kernel matrix that is not positive definite on finite
            features (a NaN loss is returned for features that are not finite, for ``fit``
            to name the step).

    Example:
        >>> from bnn_pyro.nn.param_scope import ParamScope
        >>> model = build_gp(1, 1, kernel="rbf", inducing_points=None, lengthscale=1.0,
        ...                  variance=1.0, jitter=0.0)
        >>> with ParamScope():  # one row, y = 0: -log N(0 | 0, 1 + 1) = log(4π) / 2
        ...     loss = gp_objective(model, torch.zeros(1, 1), torch.zeros(1, 1), rows=1)
        >>> round(float(loss), 6)
        1.265512
    """
    model.set_data(h, y)
    if _exact(model):
        elbo, rows = Trace_ELBO(), len(h)
    else:
        elbo, model.num_data = TraceMeanField_ELBO(), rows
    try:
        return elbo.differentiable_loss(model.model, model.guide) / rows
    except torch.linalg.LinAlgError:
        if not bool(torch.isfinite(h).all()):  # a diverged net: fit says where
            return h.sum() * float("nan")
        raise TrainingDivergedError(
            "DKL: the kernel matrix of the net's features is not positive definite "
            "(features that coincide, or a lengthscale grown large): a larger jitter or a "
            "lower lr"
        ) from None
    finally:  # the data kept without the step's graph: the graph freed with the step, and a
        # model copied in a callback (copy.deepcopy copies graph leaves only)
        model.X, model.y = h.detach(), y.detach()
