"""The likelihood a method is built with: a :class:`Likelihood` object or one of the names the
classic constructors accept (``"classification"``, ``"regression"``, ...), with the noise std
given beside it; the one place a likelihood name is read."""

from __future__ import annotations

import torch

from bnn_pyro._checks import check_float
from bnn_pyro.likelihoods.base import Likelihood
from bnn_pyro.likelihoods.discrete import Categorical
from bnn_pyro.likelihoods.gaussian import Gaussian, HeteroscedasticGaussian

__all__ = ["LIKELIHOOD_NAMES", "check_noise_scale", "resolve_likelihood"]

#: The names a classic constructor takes for a likelihood: each is a Categorical or a Gaussian.
LIKELIHOOD_NAMES = ("classification", "categorical", "regression", "gaussian")


def check_noise_scale(value: object) -> float | torch.Tensor | None:
    """``None``, a float > 0, or a tensor of positive finite values (one std per output).

    Example:
        >>> check_noise_scale(0.5), check_noise_scale(None)
        (0.5, None)
    """
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        if not bool(torch.isfinite(value).all()) or not bool((value > 0).all()):
            raise ValueError(f"noise_scale must be finite and > 0, got {value}")
        return value
    return check_float("noise_scale", value, minimum=0.0, strict=True)


def resolve_likelihood(
    value: object,
    noise_scale: object,
    owner: str,
    heteroscedastic: bool = False,
    variance_heads: bool = False,
    classifies: bool = True,
) -> tuple[Likelihood, float | torch.Tensor | None]:
    """A method's likelihood as ``(Likelihood object, noise_scale)``.

    Args:
        value: a :class:`Likelihood`, or a name: ``"classification"``/``"categorical"`` →
            ``Categorical()``; ``"regression"``/``"gaussian"`` → ``Gaussian(scale=noise_scale)``
            for a float ``noise_scale``, else ``Gaussian(scale="learned")``.
        noise_scale: the Gaussian noise std given beside the likelihood (``None``, a float or
            an ``(O,)`` tensor); a fixed ``Gaussian(scale=s)`` sets it to ``s`` and refuses
            another value.
        owner: the method's name, for the messages.
        heteroscedastic: ``HeteroscedasticGaussian`` is accepted (ensembles with variance
            heads); otherwise only a Categorical or a Gaussian.
        variance_heads: the members output a mean and a variance per target
            (``gaussian_nll=True``): a Gaussian becomes ``HeteroscedasticGaussian()``, anything
            but a Gaussian is refused.
        classifies: the method also classifies; ``False``: the refusal of another likelihood
            names the Gaussian alone (the method refuses a Categorical itself, saying why).

    Returns:
        The likelihood and the noise std (``None``: not given).

    Example:
        >>> resolve_likelihood("regression", 0.5, "MCDropout")
        (Gaussian(scale=0.5), 0.5)
        >>> resolve_likelihood("regression", None, "DeepEnsemble", True, variance_heads=True)
        (HeteroscedasticGaussian(min_scale=0.001), None)
    """
    noise = check_noise_scale(noise_scale)
    if isinstance(value, str):
        if value not in LIKELIHOOD_NAMES:
            raise ValueError(
                f"likelihood must be a bnn_pyro Likelihood (e.g. bp.Gaussian(), bp.Categorical()) "
                f"or one of {LIKELIHOOD_NAMES}, got {value!r}"
            )
        if value in LIKELIHOOD_NAMES[:2]:
            value = Categorical()
        else:
            value = Gaussian(scale=noise if isinstance(noise, float) else "learned")
    if variance_heads and not isinstance(value, Gaussian | HeteroscedasticGaussian):
        raise ValueError(
            f"gaussian_nll=True (variance heads) needs likelihood='regression', got {value!r}"
        )
    if isinstance(value, Categorical):
        return value, noise
    if isinstance(value, Gaussian):
        if variance_heads:
            return HeteroscedasticGaussian(), noise
        if not value.learned:
            if noise is not None and not (isinstance(noise, float) and noise == value.scale):
                raise ValueError(
                    f"likelihood={value!r} and noise_scale={noise!r} disagree: give the noise once"
                )
            noise = value.scale
        return value, noise
    if isinstance(value, HeteroscedasticGaussian) and heteroscedastic:
        return value, noise
    if isinstance(value, Likelihood):
        known = ("Gaussian or Categorical" if classifies else "Gaussian") + (
            " or HeteroscedasticGaussian" if heteroscedastic else ""
        )
        raise ValueError(f"{owner} supports a {known} likelihood, got {value!r}")
    raise TypeError(
        "likelihood must be a bnn_pyro Likelihood (e.g. bp.Gaussian(), bp.Categorical()) or "
        f"one of {LIKELIHOOD_NAMES}, got {type(value).__name__}"
    )
