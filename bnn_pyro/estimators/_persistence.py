"""Saving a :class:`~bnn_pyro.estimators.TabularBNN`: one dict of tensors, numbers and strings.

The dict is a :mod:`bnn_pyro.checkpoint` of its own kind: the estimator's settings and
standardisation, and under ``"module"`` the method as
:func:`~bnn_pyro.checkpoint.method_state` holds it (what ``method.save`` writes). It carries the
checkpoint ``format_version``, checked by :func:`~bnn_pyro.checkpoint.check_format`. The file
loads with ``torch.load(weights_only=True)`` and is written by
:func:`~bnn_pyro.checkpoint.atomic_save` (a temporary name, then a rename). Pickling goes through
the same dict, so a pickled model never depends on how torch or Pyro pickle their modules.
"""

from __future__ import annotations

import os
from typing import Any, TypeVar

import numpy as np
import torch

from bnn_pyro.checkpoint import (
    FORMAT_VERSION,
    atomic_save,
    check_format,
    load_file,
    method_state,
)
from bnn_pyro.estimators import _methods
from bnn_pyro.exceptions import NotFittedError

FORMAT = "bnn_pyro.TabularBNN"

_T = TypeVar("_T", bound="Persistence")


class Persistence:
    """``state_dict``/``from_state_dict``, ``save``/``load`` and pickling of ``TabularBNN``."""

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to rebuild the fitted model: tensors, numbers, strings, lists.

        Returns:
            A dict that ``torch.save`` writes and ``torch.load(weights_only=True)`` reads; the
            method's checkpoint (:func:`~bnn_pyro.checkpoint.method_state`) is under
            ``"module"``, :attr:`metadata` under ``"metadata"``.

        Example:
            >>> from bnn_pyro.estimators import TabularBNN
            >>> X = np.arange(6.0)[:, None]
            >>> reg = TabularBNN(method="swag", epochs=2, num_samples=3).fit(X, X[:, 0])
            >>> copy = TabularBNN.from_state_dict(reg.state_dict())
            >>> bool((copy.predict(X)[0] == reg.predict(X)[0]).all())
            True
        """
        if self.module is None:
            raise NotFittedError("this TabularBNN is not fitted yet: call fit(X, y) first")

        def tensor(a: Any) -> torch.Tensor | None:
            return None if a is None else torch.as_tensor(np.asarray(a), dtype=torch.float64)

        params = dict(self.params, hidden_sizes=list(self.params["hidden_sizes"]))
        noise = self.noise_std
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "params": params,
            "n_features": self.n_features,
            "n_outputs": self.n_outputs,
            "n_train": self.n_train,
            "seed": int(self.seed),
            "x_mean": tensor(self.x_mean),
            "x_scale": tensor(self.x_scale),
            "y_mean": tensor(self.y_mean),
            "y_scale": tensor(self.y_scale),
            "noise_std": noise.clone() if isinstance(noise, torch.Tensor) else noise,
            "module": method_state(self.module),
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_state_dict(cls: type[_T], state: dict[str, Any]) -> _T:
        """Rebuild a fitted model from :meth:`state_dict` (example there).

        Args:
            state: the dict of :meth:`state_dict`.

        Returns:
            The fitted :class:`TabularBNN`, predicting exactly as the saved one.

        Raises:
            ValueError: ``state`` is not a saved :class:`TabularBNN`, or is of another format
                version.
        """
        return cls._rebuild(state, "the saved TabularBNN")

    @classmethod
    def _rebuild(cls: type[_T], state: Any, source: str) -> _T:
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            raise ValueError("not a saved bnn_pyro TabularBNN (no 'format' entry)")
        check_format(state, source)
        model = cls(**dict(state["params"], hidden_sizes=tuple(state["params"]["hidden_sizes"])))

        def array(t: torch.Tensor | None) -> np.ndarray | None:
            return None if t is None else t.numpy()

        model.x_mean, model.x_scale = array(state["x_mean"]), array(state["x_scale"])
        model.y_mean, model.y_scale = array(state["y_mean"]), array(state["y_scale"])
        model.noise_std = state["noise_std"]
        model.n_features, model.n_outputs = state["n_features"], state["n_outputs"]
        model.n_train, model.seed = state["n_train"], state["seed"]
        model.metadata = dict(state.get("metadata", {}))
        module = _methods.build(
            model.params, model.n_features, model.n_outputs, model.noise_std, model.seed
        )
        module.restore_fitted_state(state["module"]["fitted"])
        module.load_state_dict(state["module"]["state"])
        model.module = module
        return model

    def save(self, path: str | os.PathLike) -> None:
        """Write the fitted model (with :attr:`metadata`) to ``path`` atomically.

        Args:
            path: the file; its folder must exist.

        Example:
            >>> import tempfile
            >>> from bnn_pyro.estimators import TabularBNN
            >>> X = np.arange(20.0)[:, None]; y = np.arange(20) % 2
            >>> model = TabularBNN("classification", method="swag", epochs=2, num_samples=4)
            >>> model = model.fit(X, y, seed=0)
            >>> with tempfile.TemporaryDirectory() as folder:
            ...     model.save(os.path.join(folder, "model.pt"))
            ...     loaded = TabularBNN.load(os.path.join(folder, "model.pt"))
            >>> bool(np.allclose(loaded.predict(X)[0], model.predict(X)[0]))
            True
        """
        atomic_save(self.state_dict(), path)

    @classmethod
    def load(cls: type[_T], path: str | os.PathLike, map_location: Any = "cpu") -> _T:
        """Read a model written by :meth:`save` (``torch.load(weights_only=True)``; example there).

        Args:
            path: the file.
            map_location: passed to ``torch.load``.

        Returns:
            The fitted :class:`TabularBNN`.

        Raises:
            FileNotFoundError: no such file.
            CheckpointError: the file is damaged (a ``ValueError``).
            ValueError: the file is not a saved :class:`TabularBNN`, or is of another format
                version.
        """
        state = load_file(path, map_location)  # integrity checked: CheckpointError if damaged
        return cls._rebuild(state, repr(os.fspath(path)))

    def __getstate__(self) -> dict[str, Any]:
        if self.module is None:
            return {"params": self.params, "metadata": self.metadata}
        return {"state": self.state_dict()}

    def __setstate__(self, data: dict[str, Any]) -> None:
        if "state" in data:
            self.__dict__.update(type(self).from_state_dict(data["state"]).__dict__)
        else:
            self.params, self.metadata, self.module = data["params"], data["metadata"], None
