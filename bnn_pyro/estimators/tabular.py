"""``TabularBNN``: a BNN for a table of numbers, the engine of the estimators and the CLI.

It standardises the inputs (and regression targets), trains one of six methods in float64,
maps predictions back to the units of ``y``, and saves everything to one file that loads with
``torch.load(weights_only=True)``. It needs no scikit-learn.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from bnn_pyro.checkpoint import atomic_save
from bnn_pyro.estimators import _methods
from bnn_pyro.estimators._params import check_hyperparameters
from bnn_pyro.exceptions import NotFittedError

__all__ = ["TabularBNN"]

FORMAT = "bnn_pyro.TabularBNN"
FORMAT_VERSION = 1


def _moments(a: np.ndarray, standardize: bool) -> tuple[np.ndarray, np.ndarray]:
    """Column means and standard deviations (1 where a column is constant), or 0 and 1."""
    if not standardize:
        return np.zeros(a.shape[1]), np.ones(a.shape[1])
    scale = a.std(axis=0)
    return a.mean(axis=0), np.where(scale > 1e-12 * (1 + np.abs(a).max(axis=0)), scale, 1.0)


def _matrix(name: str, value: Any, n_cols: int | None = None) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype == object or not np.issubdtype(array.dtype, np.number):
        raise TypeError(f"{name} must hold numbers, got an array of dtype {array.dtype}")
    if array.ndim != 2 or array.shape[0] < 1:
        raise ValueError(f"{name} must have shape (N, D) with N >= 1, got {array.shape}")
    if n_cols is not None and array.shape[1] != n_cols:
        raise ValueError(f"{name} must have {n_cols} column(s), got shape {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError(f"{name} contains {int((~np.isfinite(array)).sum())} NaN/inf value(s)")
    return array.astype(np.float64)


class TabularBNN:
    """A Bayesian neural network on a ``(N, D)`` table: standardisation, method, save/load.

    Args:
        task: ``"regression"`` or ``"classification"``.
        method: ``"vi"`` (mean-field variational inference, :class:`~bnn_pyro.VariationalBNN`),
            ``"lrt"`` (the same with local reparameterization), ``"dropout"`` (MC dropout),
            ``"ensemble"`` (deep ensemble), ``"swag"`` or ``"laplace"`` (GGN Laplace with the
            linearised predictive).
        hidden_sizes: widths of the hidden layers of the MLP.
        activation: a name from :data:`bnn_pyro.nn.mlp.ACTIVATIONS`.
        epochs: passes over the data.
        batch_size: minibatch size; ``None`` = full batch.
        lr: Adam's learning rate (SGD's for SWAG).
        num_samples: Monte Carlo samples per prediction (ensemble: the members instead).
        prior_scale: std of the Gaussian prior ``N(0, prior_scale²)`` on every weight (VI,
            Laplace), or the matching L2 penalty ``1 / (prior_scale² N)`` on the mean loss
            (the methods trained to a point estimate).
        noise: regression noise std: ``"learned"`` (VI: a latent with a posterior; the others:
            the maximum-likelihood std of the training residuals) or a float in the units of
            ``y``.
        standardize: standardise the columns of ``X`` (and of ``y`` for regression) inside.
        dropout_rate: dropout probability (``method="dropout"``).
        ensemble_size: number of members (``method="ensemble"``).

    Shapes:
        ``fit(X: (N, D), y: (N,) | (N, O) floats, or (N,) labels 0..C-1)``;
        ``predict(X) -> mean (N, O), std (N, O)`` (regression) or ``probs (N, C), std (N, C)``.

    Example:
        >>> X = np.linspace(-1, 1, 40)[:, None]; y = 3 * X[:, 0] + 1
        >>> model = TabularBNN("regression", epochs=20, hidden_sizes=(8,), num_samples=10)
        >>> mean, std = model.fit(X, y, seed=0).predict(X)
        >>> mean.shape, std.shape, bool((std > 0).all())
        ((40, 1), (40, 1), True)
    """

    def __init__(
        self,
        task: str = "regression",
        method: str = "vi",
        *,
        hidden_sizes: tuple[int, ...] = (50,),
        activation: str = "relu",
        epochs: int = 200,
        batch_size: int | None = 128,
        lr: float = 1e-2,
        num_samples: int = 100,
        prior_scale: float = 1.0,
        noise: str | float = "learned",
        standardize: bool = True,
        dropout_rate: float = 0.1,
        ensemble_size: int = 5,
    ) -> None:
        self.params = check_hyperparameters(
            task=task,
            method=method,
            hidden_sizes=hidden_sizes,
            activation=activation,
            epochs=epochs,
            batch_size=batch_size,
            lr=lr,
            num_samples=num_samples,
            prior_scale=prior_scale,
            noise=noise,
            standardize=standardize,
            dropout_rate=dropout_rate,
            ensemble_size=ensemble_size,
        )
        self.module: torch.nn.Module | None = None
        self.metadata: dict[str, Any] = {}

    @property
    def task(self) -> str:
        """``"regression"`` or ``"classification"``."""
        return self.params["task"]

    # ------------------------------------------------------------------ fitting
    def _targets(self, y: Any, n: int, n_classes: int | None) -> np.ndarray:
        y = np.asarray(y)
        if y.shape[:1] != (n,):
            raise ValueError(f"y must have {n} rows (as X), got shape {y.shape}")
        if y.dtype == object or not np.issubdtype(y.dtype, np.number):
            raise TypeError(f"y must hold numbers, got an array of dtype {y.dtype}")
        if not np.isfinite(y).all():
            raise ValueError(f"y contains {int((~np.isfinite(y)).sum())} NaN/inf value(s)")
        if self.task == "regression":
            if y.ndim not in (1, 2):
                raise ValueError(f"y must have shape (N,) or (N, O), got {y.shape}")
            return (y[:, None] if y.ndim == 1 else y).astype(np.float64)
        if y.ndim != 1 or (y != np.round(y)).any() or (y < 0).any():
            raise ValueError(
                "y must hold class labels 0, 1, ..., C-1 of shape (N,) for classification"
            )
        found = int(y.max()) + 1
        classes = found if n_classes is None else n_classes
        if classes < 2 or found > classes:
            raise ValueError(
                f"classification needs labels in 0..C-1 with C >= 2 classes, got {found} class(es)"
                + ("" if n_classes is None else f" for n_classes={n_classes}")
            )
        return y.astype(np.int64)

    def _fixed_noise(self, y_scale: np.ndarray) -> float | torch.Tensor | None:
        noise = self.params["noise"]
        if self.task != "regression" or noise == "learned":
            return None
        scaled = noise / y_scale
        if scaled.size == 1:
            return float(scaled[0])
        if self.params["method"] in ("vi", "lrt"):
            if not np.allclose(scaled, scaled[0]):
                raise ValueError(
                    "noise as a float with several target columns of different scales needs "
                    "standardize=False or noise='learned' for method='vi'/'lrt'"
                )
            return float(scaled[0])
        return torch.as_tensor(scaled, dtype=_methods.DTYPE)

    def fit(
        self,
        X: Any,
        y: Any,
        *,
        n_classes: int | None = None,
        seed: int = 0,
        progress: bool = False,
    ) -> TabularBNN:
        """Standardise, build and train; the same ``seed`` gives the same model.

        Args:
            X: ``(N, D)`` numbers.
            y: ``(N,)``/``(N, O)`` regression targets, or ``(N,)`` class labels ``0..C-1``.
            n_classes: C (default: the largest label + 1).
            seed: seeds the initial weights, the training and the predictions.
            progress: show a progress bar.

        Returns:
            self.
        """
        X = _matrix("X", X)
        y = self._targets(y, X.shape[0], n_classes)
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be an int >= 0, got {seed!r}")
        if not isinstance(progress, bool):
            raise TypeError(f"progress must be a bool, got {type(progress).__name__}")
        standardize = self.params["standardize"]
        self.x_mean, self.x_scale = _moments(X, standardize)
        if self.task == "regression":
            self.y_mean, self.y_scale = _moments(y, standardize)
            targets = torch.as_tensor((y - self.y_mean) / self.y_scale, dtype=_methods.DTYPE)
            n_out = y.shape[1]
        else:
            self.y_mean = self.y_scale = None
            targets = torch.as_tensor(y)
            n_out = int(y.max()) + 1 if n_classes is None else n_classes
        self.noise_std = self._fixed_noise(self.y_scale) if self.task == "regression" else None
        self.n_features, self.n_outputs, self.n_train, self.seed = X.shape[1], n_out, len(X), seed
        inputs = self._inputs(X)
        self.module = _methods.build(self.params, self.n_features, n_out, self.noise_std, seed)
        _methods.fit(self.module, self.params, inputs, targets, seed, progress)
        return self

    # ------------------------------------------------------------------ prediction
    def _inputs(self, X: np.ndarray) -> torch.Tensor:
        return torch.as_tensor((X - self.x_mean) / self.x_scale, dtype=_methods.DTYPE)

    def _fitted(self, X: Any) -> torch.Tensor:
        if self.module is None:
            raise NotFittedError("this TabularBNN is not fitted yet: call fit(X, y) first")
        return self._inputs(_matrix("X", X, self.n_features))

    @torch.no_grad()
    def predictive_gaussian(self, X: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Regression predictive in the units of ``y``: the mixture
        ``1/S sum_s Normal(locs[s], scales[s])`` with ``locs (S, N, O)`` and ``scales``
        broadcastable to it (what :mod:`bnn_pyro.metrics` takes)."""
        inputs = self._fitted(X)
        if self.task != "regression":
            raise ValueError("predictive_gaussian is for task='regression'; use predict_proba")
        locs, scales = _methods.gaussian(self.module, self.params, inputs, self.seed)
        y_scale = torch.as_tensor(self.y_scale, dtype=locs.dtype)
        locs = locs * y_scale + torch.as_tensor(self.y_mean, dtype=locs.dtype)
        return locs, torch.as_tensor(scales, dtype=locs.dtype) * y_scale

    @torch.no_grad()
    def probability_samples(self, X: Any) -> torch.Tensor:
        """Class-probability samples ``(S, N, C)`` (classification)."""
        inputs = self._fitted(X)
        if self.task != "classification":
            raise ValueError("probability_samples is for task='classification'")
        return _methods.probabilities(self.module, self.params, inputs, self.seed)

    def predict(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Predictive mean and std per row, float64 numpy.

        Regression: the mean of ``y`` and its total predictive std (epistemic spread of the
        samples plus the observation noise), both ``(N, O)`` in the units of ``y``.
        Classification: the class probabilities ``(N, C)`` and their epistemic std.
        """
        if self.task == "regression":
            locs, scales = self.predictive_gaussian(X)
            var, mean = torch.var_mean(locs, dim=0, correction=0)
            var = var + (scales**2).expand_as(locs).mean(0)
        else:
            var, mean = torch.var_mean(self.probability_samples(X), dim=0, correction=0)
        return mean.numpy(), var.sqrt().numpy()

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to rebuild the fitted model: tensors, numbers, strings, lists."""
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
            "module": _methods.state(self.module),
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> TabularBNN:
        """Rebuild a fitted model from :meth:`state_dict`."""
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            raise ValueError("not a saved bnn_pyro TabularBNN (no 'format' entry)")
        if state["format_version"] > FORMAT_VERSION:
            raise ValueError(
                f"the model has format version {state['format_version']}; this bnn_pyro reads up "
                f"to {FORMAT_VERSION}: upgrade bnn_pyro"
            )
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
        _methods.restore(module, model.params, state["module"], model.n_train)
        model.module = module
        return model

    def save(self, path: str | os.PathLike) -> None:
        """Write the fitted model (with :attr:`metadata`) to ``path`` atomically.

        Example:
            >>> import tempfile
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
    def load(cls, path: str | os.PathLike, map_location: Any = "cpu") -> TabularBNN:
        """Read a model written by :meth:`save` (``torch.load(weights_only=True)``).

        Raises:
            FileNotFoundError: no such file.
            ValueError: the file is not a saved :class:`TabularBNN`.
        """
        try:
            state = torch.load(path, map_location=map_location, weights_only=True)
        except FileNotFoundError:
            raise
        except (OSError, RuntimeError, EOFError, ValueError) as err:
            raise ValueError(f"{os.fspath(path)!r} is not a bnn_pyro model file ({err})") from None
        except Exception as err:  # unpickling errors of files that are not ours
            raise ValueError(
                f"{os.fspath(path)!r} is not a bnn_pyro model file ({type(err).__name__})"
            ) from None
        return cls.from_state_dict(state)

    def __getstate__(self) -> dict[str, Any]:
        if self.module is None:
            return {"params": self.params, "metadata": self.metadata}
        return {"state": self.state_dict()}

    def __setstate__(self, data: dict[str, Any]) -> None:
        if "state" in data:
            self.__dict__.update(TabularBNN.from_state_dict(data["state"]).__dict__)
        else:
            self.params, self.metadata, self.module = data["params"], data["metadata"], None

    def __repr__(self) -> str:
        fitted = "fitted" if self.module is not None else "not fitted"
        return f"TabularBNN(task={self.task!r}, method={self.params['method']!r}, {fitted})"
