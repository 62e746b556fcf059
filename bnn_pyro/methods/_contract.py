"""What the classic (plain-torch) methods share to answer the one contract of
:class:`~bnn_pyro.BaseBayesianMethod`: the predict options and the checkpoint settings."""

from __future__ import annotations

from typing import Any

import torch

from bnn_pyro._checks import check_seed
from bnn_pyro._rng import seed_from
from bnn_pyro.likelihoods import likelihood_from_config
from bnn_pyro.methods._checks import check_inputs, check_targets

__all__ = ["ClassicContract"]


class ClassicContract:
    """Mixin of the classic methods (``self.task`` is ``"classification"`` or ``"regression"``,
    ``self.likelihood`` the matching :class:`~bnn_pyro.likelihoods.Likelihood`)."""

    task: str

    def _normalize(self, normalize_output: bool | None) -> bool:
        """Softmax the samples? ``None``: for a classifier only (the seed's ``True`` also
        softmaxes a multi-output regression, which is rarely what anyone wants)."""
        if normalize_output is None:
            return self.task == "classification"
        if not isinstance(normalize_output, bool):
            raise TypeError(
                f"normalize_output must be a bool or None, got {type(normalize_output).__name__}"
            )
        return normalize_output

    @staticmethod
    def _predict_seed(seed: int | None, generator: torch.Generator | None) -> int | None:
        """The seed of a ``predict`` call: ``seed``, else one drawn from ``generator``."""
        if seed is not None and generator is not None:
            raise ValueError("pass seed or generator, not both")
        return check_seed("seed", seed) if generator is None else seed_from(generator)

    def _validation(
        self, data: Any, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``validation_data=(x_val, y_val)`` checked and moved to ``device`` (or None)."""
        if data is None:
            return None
        if not (isinstance(data, (tuple, list)) and len(data) == 2):
            raise ValueError("validation_data must be a pair (x_val, y_val)")
        xv = check_inputs(data[0], "x_val")
        yv = check_targets(xv, data[1], self.task)
        return xv.to(device), yv.to(device)

    @staticmethod
    def _likelihood_from(config: dict[str, Any]) -> Any:
        return likelihood_from_config(config["likelihood"])
