"""A calibrator saved with its model: one file holds both, and loads with :func:`bnn_pyro.load`.

A calibrator (a recalibration map or a conformal calibration) is only meaningful for the model
it was fitted on, so it is never saved alone: :meth:`SavedWithMethod.save` writes the
calibrator's settings and fitted numbers beside the method's whole checkpoint
(:func:`bnn_pyro.checkpoint.method_state`), and :meth:`SavedWithMethod.load` (or
:func:`bnn_pyro.load`) rebuilds the method around a fresh ``net`` and the calibrator around it.
The file loads with ``torch.load(weights_only=True)``, like a method's.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Any

import torch.nn as nn

from bnn_pyro.checkpoint import (
    FORMAT_VERSION,
    atomic_save,
    load_method,
    method_state,
    plain_state,
)
from bnn_pyro.checkpoint import register_class as _register

__all__ = ["SavedWithMethod"]


class SavedWithMethod(ABC):
    """What a calibrator provides to be saved with its method: ``method``,
    ``predict_options``, and its own fitted numbers as plain data (:meth:`calibrator_state`,
    :meth:`restore_calibrator_state`). Every subclass registers itself for loading.

    Example:
        >>> import os, tempfile, torch, bnn_pyro as bp, torch.nn as nn
        >>> from bnn_pyro.calibration import ScaleRecalibration
        >>> la = bp.LaplaceApproximation(nn.Linear(1, 1), "regression", noise_scale=0.5)
        >>> _ = la.fit(torch.randn(30, 1), torch.randn(30), epochs=0, progress=False)
        >>> recal = ScaleRecalibration(la, seed=0).fit(torch.randn(20, 1), torch.randn(20))
        >>> path = os.path.join(tempfile.mkdtemp(), "recal.pt"); recal.save(path)
        >>> again = bp.load(path, net=nn.Linear(1, 1))
        >>> type(again).__name__, bool(torch.equal(again.factor, recal.factor))
        ('ScaleRecalibration', True)
    """

    method: Any
    predict_options: dict[str, Any]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _register(cls)

    @abstractmethod
    def calibrator_state(self) -> dict[str, Any]:
        """The calibrator's settings and fitted numbers as plain data (tensors, numbers,
        strings, ``None``)."""

    @abstractmethod
    def restore_calibrator_state(self, state: dict[str, Any]) -> None:
        """Put back what :meth:`calibrator_state` returned."""

    def checkpoint_config(self) -> dict[str, Any]:
        """The calibrator's part of the file: ``predict_options`` and its state."""
        state = plain_state(self.calibrator_state())
        return {"predict_options": dict(self.predict_options), "state": state}

    @classmethod
    def from_checkpoint_config(cls, method: Any, config: dict[str, Any]) -> SavedWithMethod:
        """The calibrator of ``method`` rebuilt from :meth:`checkpoint_config`'s dict."""
        calibrator = cls.__new__(cls)
        calibrator.method = method
        calibrator.predict_options = dict(config.get("predict_options", {}))
        calibrator.restore_calibrator_state(dict(config.get("state", {})))
        return calibrator

    def save(self, path: str | os.PathLike) -> None:
        """Write the calibrator and its method to one file, atomically.

        Args:
            path: the file to write (its folder must exist).
        """
        atomic_save(
            {
                "format_version": FORMAT_VERSION,
                "class": type(self).__name__,
                "config": self.checkpoint_config(),
                "method": method_state(self.method),
            },
            path,
        )

    @classmethod
    def load(
        cls, path: str | os.PathLike, net: nn.Module | None = None, map_location: Any = None
    ) -> Any:
        """Rebuild a saved calibrator and its method around a fresh ``net``.

        Args:
            path: a file written by :meth:`save`.
            net: an instance of the saved method's architecture (``None`` for methods that
                build their own layers).
            map_location: as in ``torch.load``.

        Returns:
            The calibrator, of this class, wrapping the rebuilt method.
        """
        return load_method(path, net=net, map_location=map_location, expected=cls)
