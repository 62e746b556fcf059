"""The homoscedastic noise of a classic method's regression model: set by the user and kept,
or estimated by ``fit`` from the training residuals and re-estimated by the next ``fit``."""

from __future__ import annotations

import torch

from bnn_pyro.likelihoods import Likelihood
from bnn_pyro.likelihoods.resolve import check_noise_scale
from bnn_pyro.methods.classic.training import residual_noise_scale

__all__ = ["HomoscedasticNoise"]


class HomoscedasticNoise:
    """The ``noise_scale`` of :class:`~bnn_pyro.methods.classic.ClassicMethod`.

    A value the user sets (in the constructor, through ``Gaussian(scale=s)``, or by assignment)
    is kept by ``fit``; a value that ``fit`` estimated is re-estimated by the next ``fit``;
    ``None`` means "not known yet". The host provides ``likelihood`` and ``predict``; the noise is
    saved with the host's ``state_dict`` (its extra state).

    Example:
        >>> import torch.nn as nn
        >>> from bnn_pyro import MCDropout
        >>> m = MCDropout(nn.Sequential(nn.Linear(2, 8), nn.Dropout(0.1), nn.Linear(8, 1)))
        >>> m.noise_scale is None
        True
        >>> m.noise_scale = 0.5
        >>> m.noise_scale, m.state_dict()["_extra_state"]["noise_from_user"]
        (0.5, True)
    """

    likelihood: Likelihood
    _noise_scale: float | torch.Tensor | None = None
    _noise_from_user: bool = False

    @property
    def noise_scale(self) -> float | torch.Tensor | None:
        """Observation noise standard deviation (float, or ``(O,)`` tensor), or ``None``."""
        return self._noise_scale

    @noise_scale.setter
    def noise_scale(self, value: float | torch.Tensor | None) -> None:
        self._noise_scale = check_noise_scale(value)
        self._noise_from_user = value is not None

    def _estimate_noise(self, value: float | torch.Tensor) -> None:
        if not self._noise_from_user:
            self._noise_scale = value

    def get_extra_state(self) -> dict[str, object]:
        """Saved by ``state_dict`` under ``_extra_state`` (loads with ``weights_only=True``)."""
        return {"noise_scale": self._noise_scale, "noise_from_user": self._noise_from_user}

    def set_extra_state(self, state: dict[str, object]) -> None:
        self._noise_scale = state["noise_scale"]  # type: ignore[assignment]
        self._noise_from_user = bool(state["noise_from_user"])

    def _refit_noise(self, x: torch.Tensor, yt: torch.Tensor, seed: int | None) -> None:
        """After a regression fit: unless the user set it, ``noise_scale`` becomes the
        maximum-likelihood std of the training residuals of the predictive mean."""
        if self.likelihood.homoscedastic and not self._noise_from_user:
            gen = None if seed is None else torch.Generator(device="cpu").manual_seed(seed)
            mean, _ = self.predict(x, normalize_output=False, generator=gen)
            self._estimate_noise(residual_noise_scale(mean, yt.to(mean.device)))
