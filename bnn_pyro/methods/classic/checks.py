"""The classic methods' data checks (inputs, targets, outputs, noise, likelihood), raised before
any work starts; the generic checks are in :mod:`bnn_pyro._checks`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import torch

from bnn_pyro._checks import check_finite, check_float, check_tensor

if TYPE_CHECKING:
    from bnn_pyro.likelihoods import Likelihood

_LIKELIHOODS = {
    "classification": "classification",
    "categorical": "classification",
    "regression": "regression",
    "gaussian": "regression",
}


def resolve_likelihood(
    value: object,
    noise_scale: object,
    owner: str,
    heteroscedastic: bool = False,
) -> tuple[Likelihood, str, float | torch.Tensor | None]:
    """A classic method's likelihood as ``(Likelihood object, task, noise_scale)``.

    ``value`` is a :class:`~bnn_pyro.likelihoods.Likelihood` or one of the names
    (``"classification"``/``"categorical"`` → ``Categorical()``; ``"regression"``/``"gaussian"``
    → ``Gaussian(scale=noise_scale)`` if ``noise_scale`` is a float, else
    ``Gaussian(scale="learned")``). ``Gaussian(scale=s)`` fixes the noise std at ``s``;
    ``Gaussian(scale="learned")`` lets ``fit`` estimate it. ``HeteroscedasticGaussian`` is
    accepted only where ``heteroscedastic`` (ensembles with variance heads); ``task`` is
    ``"heteroscedastic"`` then.

    Example:
        >>> lik, task, noise = resolve_likelihood("regression", 0.5, "MCDropout")
        >>> lik, task, noise
        (Gaussian(scale=0.5), 'regression', 0.5)
    """
    from bnn_pyro.likelihoods import Categorical, Gaussian, HeteroscedasticGaussian, Likelihood

    noise = check_noise_scale(noise_scale)
    if isinstance(value, str):
        if value not in _LIKELIHOODS:
            raise ValueError(
                f"likelihood must be a bnn_pyro Likelihood (e.g. bp.Gaussian(), bp.Categorical()) "
                f"or one of {tuple(_LIKELIHOODS)}, got {value!r}"
            )
        if _LIKELIHOODS[value] == "classification":
            value = Categorical()
        else:
            value = Gaussian(scale=noise if isinstance(noise, float) else "learned")
    if isinstance(value, Categorical):
        return value, "classification", noise
    if isinstance(value, Gaussian):
        if not value.learned:
            if noise is not None and not (isinstance(noise, float) and noise == value.scale):
                raise ValueError(
                    f"likelihood={value!r} and noise_scale={noise!r} disagree: give the noise once"
                )
            noise = value.scale
        return value, "regression", noise
    if isinstance(value, HeteroscedasticGaussian) and heteroscedastic:
        return value, "heteroscedastic", noise
    if isinstance(value, Likelihood):
        known = "Gaussian or Categorical" + (
            " or HeteroscedasticGaussian" if heteroscedastic else ""
        )
        raise ValueError(f"{owner} supports a {known} likelihood, got {value!r}")
    raise TypeError(
        "likelihood must be a bnn_pyro Likelihood (e.g. bp.Gaussian(), bp.Categorical()) or "
        f"one of {tuple(_LIKELIHOODS)}, got {type(value).__name__}"
    )


def check_noise_scale(value: object) -> float | torch.Tensor | None:
    """``None``, a float > 0, or a tensor of positive finite values."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        if not bool(torch.isfinite(value).all()) or not bool((value > 0).all()):
            raise ValueError(f"noise_scale must be finite and > 0, got {value}")
        return value
    return check_float("noise_scale", value, minimum=0.0, strict=True)


def check_inputs(x: object, name: str = "x", indices: bool = False) -> torch.Tensor:
    """``x`` must be a floating tensor ``(N, D, ...)`` with N >= 1 and finite values; with
    ``indices`` (a net that starts from an ``nn.Embedding``) an integer tensor is accepted too.

    Example:
        >>> check_inputs(torch.tensor([[1, 2]]), indices=True).dtype
        torch.int64
    """
    check_tensor(name, x, floating=False)
    integer = not x.is_floating_point() and not x.is_complex() and x.dtype != torch.bool
    if not x.is_floating_point() and not (indices and integer):
        raise TypeError(
            f"{name} must have a floating dtype, got {x.dtype}"
            + ("" if indices else " (integer indices only for a net with an nn.Embedding)")
        )
    if x.dim() < 2 or len(x) == 0:
        raise ValueError(
            f"{name} must have shape (N, D, ...) with N >= 1, got {tuple(x.shape)}"
            + ("; for 1-D features use x.unsqueeze(-1)" if x.dim() == 1 else "")
        )
    return check_finite(name, x)


def check_targets(x: torch.Tensor, y: object, likelihood: str) -> torch.Tensor:
    """Check ``y`` against ``x`` and the likelihood; return regression targets as ``(N, O)``.

    Classification: integer class indices ``(N,)``. Regression: floating ``(N,)`` or ``(N, O)``.
    """
    check_tensor("y", y, floating=False)
    if y.dim() == 0 or len(y) != len(x):
        raise ValueError(f"y must have {len(x)} rows (len(x)), got shape {tuple(y.shape)}")
    if likelihood == "classification":
        if y.dim() != 1 or y.is_floating_point() or y.dtype == torch.bool:
            raise TypeError(
                f"y must be integer class indices of shape ({len(x)},) for classification, "
                f"got dtype {y.dtype} and shape {tuple(y.shape)}"
            )
        if bool((y < 0).any()):
            raise ValueError(f"y must hold class indices >= 0, got min {int(y.min())}")
        return y
    if not y.is_floating_point():
        raise TypeError(f"y must have a floating dtype for regression, got {y.dtype}")
    if y.dim() not in (1, 2):
        raise ValueError(f"y must have shape (N,) or (N, O) for regression, got {tuple(y.shape)}")
    check_finite("y", y)
    return y if y.dim() == 2 else y.unsqueeze(-1)


def check_outputs(out: torch.Tensor, y: torch.Tensor, likelihood: str, what: str = "model") -> None:
    """Check one probe output ``(B, ...)`` against the (prepared) targets."""
    if likelihood == "classification":
        if out.dim() != 2 or out.shape[1] < 2:
            raise ValueError(
                f"{what} output must be logits of shape (N, C) with C >= 2 for classification, "
                f"got {tuple(out.shape)}"
            )
        if int(y.max()) >= out.shape[1]:
            raise ValueError(
                f"y must hold class indices < C = {out.shape[1]} (the {what} output width), "
                f"got max {int(y.max())}"
            )
    elif out.dim() != 2 or out.shape[1] != y.shape[1]:
        raise ValueError(
            f"{what} output must have shape (N, {y.shape[1]}) to match y, got {tuple(out.shape)}"
        )


def check_batches(
    batches: Iterable[Any], check_x: Callable[[Any, str], torch.Tensor], likelihood: str
) -> None:
    """One pass over ``batches`` (a ``DataLoader`` or sequence of ``(x, y)`` pairs) checking
    every batch, before any work: ``x`` by ``check_x(x, name)``, ``y`` by
    :func:`check_targets` (finite, the right rows and dtype). A bad batch raises the check's
    ``ValueError``/``TypeError`` with the batch's index in front.

    Example:
        >>> good = [(torch.zeros(2, 1), torch.zeros(2)), (torch.zeros(2, 1), torch.zeros(2))]
        >>> check_batches(good, lambda x, name: x, "regression")
        >>> bad = good + [(torch.zeros(2, 1), torch.tensor([0.0, float("nan")]))]
        >>> check_batches(bad, lambda x, name: x, "regression")
        Traceback (most recent call last):
          ...
        ValueError: batch 2 of the data: y must be finite, got 1 NaN or infinite value(s)
    """
    count = 0
    for i, batch in enumerate(batches):
        if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
            raise ValueError(
                f"batch {i} of the data must be an (x, y) pair, got {type(batch).__name__}"
            )
        try:
            check_targets(check_x(batch[0], "x"), batch[1], likelihood)
        except (TypeError, ValueError) as err:
            raise type(err)(f"batch {i} of the data: {err}") from None
        count += 1
    if count == 0:
        raise ValueError("the data yielded no batch")
