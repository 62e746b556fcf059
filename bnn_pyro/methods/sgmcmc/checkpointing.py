"""What a saved :class:`~bnn_pyro.methods.sgmcmc.method.SGMCMC` keeps: its settings (the
checkpoint config) and its fitted state (the data's size and input shape, the kept samples'
shape, the potential's size), and how a model is made again from them (``bnn_pyro.checkpoint``
calls these hooks)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from bnn_pyro.likelihoods import likelihood_from_config
from bnn_pyro.methods.sgmcmc.stacked import chain_potential
from bnn_pyro.priors import prior_from_config

__all__ = ["SGMCMCCheckpoint"]


class SGMCMCCheckpoint:
    """The checkpoint hooks of :class:`~bnn_pyro.methods.sgmcmc.method.SGMCMC`, which it
    inherits: ``checkpoint_config``, ``from_checkpoint_config``, ``fitted_state`` and
    ``restore_fitted_state``.

    Example:
        >>> import bnn_pyro as bp
        >>> m = bp.make("sgld", bp.nn.mlp(2, [], 1), bp.Gaussian(scale=0.1))
        >>> isinstance(m, SGMCMCCheckpoint), m.checkpoint_config()["sampler"]
        (True, 'sgld')
    """

    likelihood: Any
    prior: Any
    sampler: str
    temperature: float
    mdecay: float | None
    schedule: str
    cycles: int
    explore: float
    preconditioner: str
    burn_in: int | None
    thinning: int | None
    max_samples: int
    num_samples: int
    dtype: torch.dtype
    device: torch.device
    bnn: Any
    potential: Any
    position: torch.Tensor
    kept_samples: torch.Tensor
    dataset_size: int | None
    input_shape: tuple[int, ...] | None

    def checkpoint_config(self) -> dict[str, Any]:
        return {
            "likelihood": self.likelihood.config(),
            "prior": self.prior.config(),
            "sampler": self.sampler,
            "temperature": self.temperature,
            "mdecay": self.mdecay,
            "schedule": self.schedule,
            "cycles": self.cycles,
            "explore": self.explore,
            "preconditioner": self.preconditioner,
            "burn_in": self.burn_in,
            "thinning": self.thinning,
            "max_samples": self.max_samples,
            "num_samples": self.num_samples,
            "dtype": str(self.dtype).removeprefix("torch."),
        }

    @classmethod
    def from_checkpoint_config(cls, net: nn.Module | None, config: dict[str, Any]) -> Any:
        if net is None:
            raise ValueError(
                f"loading a {cls.__name__} needs net=: a fresh instance of the saved architecture"
            )
        options = {k: v for k, v in config.items() if k not in ("likelihood", "prior", "dtype")}
        return cls(
            net.to(getattr(torch, config["dtype"])),
            likelihood_from_config(config["likelihood"]),
            prior=prior_from_config(config["prior"]),
            **options,
        )

    def fitted_state(self) -> dict[str, Any]:
        if self.potential is None:
            raise ValueError("fit the model before saving it: it has no samples yet")
        return {
            "dataset_size": self.dataset_size,
            "input_shape": list(self.input_shape or ()),
            "kept": list(self.kept_samples.shape),
            "size": self.potential.size,
        }

    def restore_fitted_state(self, fitted: dict[str, Any]) -> None:
        self.dataset_size = fitted["dataset_size"]
        self.input_shape = tuple(fitted["input_shape"])
        self.bnn.input_shape = self.input_shape
        x = torch.zeros((1, *self.input_shape), dtype=self.dtype, device=self.device)
        self.potential = chain_potential(self, x, None)
        self.position = self.position.new_zeros(fitted["size"])
        self.kept_samples = self.kept_samples.new_zeros(fitted["kept"])
