"""``TabularBNN``: a BNN for a table of numbers, the engine of the estimators and the CLI.

It standardises the inputs (and regression targets), trains one of the registry's methods
(:data:`bnn_pyro.METHODS`) in float64 on the CPU or a GPU (``device=``), maps predictions back
to the units of ``y`` as NumPy arrays, and saves everything to one file that loads with
``torch.load(weights_only=True)``. It needs no scikit-learn.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from bnn_pyro._checks import check_device
from bnn_pyro.base import BaseBayesianMethod
from bnn_pyro.estimators import _methods
from bnn_pyro.estimators._params import check_hyperparameters
from bnn_pyro.estimators._persistence import Persistence
from bnn_pyro.exceptions import NotFittedError
from bnn_pyro.likelihoods import Likelihood
from bnn_pyro.likelihoods.resolve import resolve_likelihood

__all__ = ["TabularBNN"]


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


class TabularBNN(Persistence):
    """A Bayesian neural network on a ``(N, D)`` table: standardisation, method, save/load.

    Args:
        task: ``"regression"`` or ``"classification"``.
        method: a name from :data:`bnn_pyro.METHODS`: ``"vi"`` (mean-field variational
            inference, :class:`~bnn_pyro.VariationalBNN`), ``"lrt"`` (the same with local
            reparameterization), ``"bb_alpha"`` (the same trained on the black-box alpha
            energy), ``"hidden_layer"`` (:class:`~bnn_pyro.HiddenLayerBNN`),
            ``"vbnn"`` (:class:`~bnn_pyro.VariationalBayesNN`, pure-torch Bayes by Backprop),
            ``"dropout"`` (MC dropout), ``"ensemble"`` (deep ensemble), ``"swag"`` or
            ``"laplace"`` (GGN Laplace with the linearised predictive).
        hidden_sizes: widths of the hidden layers of the MLP.
        activation: a name from :data:`bnn_pyro.nn.mlp.ACTIVATIONS`.
        epochs: passes over the data.
        batch_size: minibatch size; ``None`` = full batch.
        lr: Adam's learning rate (SGD's for SWAG); for ``"sghmc"``, ``"sgld"`` and
            ``"csghmc"`` their step, where ``None`` (their own default) measures it on the
            posterior (:meth:`~bnn_pyro.methods.sgmcmc.method.SGMCMC.fit`).
        num_samples: Monte Carlo samples per prediction (ensemble: the members instead).
        prior_scale: std of the Gaussian prior ``N(0, prior_scale²)`` on every weight (the
            variational methods, Laplace), or the matching L2 penalty ``1 / (prior_scale² N)``
            on the mean loss (the methods trained to a point estimate).
        noise: regression noise std: ``"learned"`` (``"vi"``, ``"lrt"``, ``"bb_alpha"``,
            ``"hidden_layer"``: a latent with a posterior; ``"vbnn"``: optimised with the ELBO;
            the others: the maximum-likelihood std of the training residuals) or a float in the
            units of ``y``.
        standardize: standardise the columns of ``X`` (and of ``y`` for regression) inside.
        dropout_rate: dropout probability (``method="dropout"``).
        ensemble_size: number of members (``method="ensemble"``).
        device: where the model trains and predicts: ``None`` or ``"cpu"`` (default), ``"cuda"``,
            ``"cuda:1"``, a ``torch.device``; the NumPy inputs are copied there and the results
            back. Refused before any work when this machine lacks it. Not saved: a loaded model
            is on the CPU (move ``model.module`` with ``.to()``).

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
        lr: float | None = 1e-2,
        num_samples: int = 100,
        prior_scale: float = 1.0,
        noise: str | float = "learned",
        standardize: bool = True,
        dropout_rate: float = 0.1,
        ensemble_size: int = 5,
        device: str | torch.device | None = None,
    ) -> None:
        self.device = check_device("device", device) or torch.device("cpu")
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
        self.module: BaseBayesianMethod | None = None
        self.metadata: dict[str, Any] = {}

    @property
    def task(self) -> str:
        """``"regression"`` or ``"classification"``."""
        return self.params["task"]

    @property
    def likelihood(self) -> Likelihood:
        """The observation model: the fitted model's, or before a fit the one ``task`` names
        (``Categorical()``, or a ``Gaussian`` whose noise the fit estimates).

        Example:
            >>> TabularBNN("classification").likelihood
            Categorical()
        """
        if self.module is not None:
            return self.module.likelihood
        return resolve_likelihood(self.task, None, type(self).__name__)[0]

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
        method = self.params["method"]
        if _methods.scalar_noise(method):
            if not np.allclose(scaled, scaled[0]):
                raise ValueError(
                    "noise as a float with several target columns of different scales needs "
                    f"standardize=False or noise='learned' for method={method!r} (one noise "
                    "scale for all columns)"
                )
            return float(scaled[0])
        return torch.as_tensor(scaled, dtype=_methods.DTYPE, device=self.device)

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

        Raises:
            TypeError, ValueError: ``X``/``y``/``seed``/``progress`` of the wrong type, shape or
                values (NaN, labels outside ``0..C-1``, fewer than 2 classes), before any work.

        Example:
            >>> X = np.arange(12.0).reshape(6, 2); y = np.array([0, 0, 1, 1, 2, 2])
            >>> clf = TabularBNN("classification", "ensemble", epochs=2, ensemble_size=2)
            >>> clf.fit(X, y, seed=0).n_outputs
            3
        """
        X = _matrix("X", X)
        y = self._targets(y, X.shape[0], n_classes)
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be an int, got {type(seed).__name__} ({seed!r})")
        if seed < 0:
            raise ValueError(f"seed must be an int >= 0, got {seed}")
        if not isinstance(progress, bool):
            raise TypeError(f"progress must be a bool, got {type(progress).__name__}")
        standardize = self.params["standardize"]
        self.x_mean, self.x_scale = _moments(X, standardize)
        if self.task == "regression":
            self.y_mean, self.y_scale = _moments(y, standardize)
            standardized = (y - self.y_mean) / self.y_scale
            targets = torch.as_tensor(standardized, dtype=_methods.DTYPE, device=self.device)
            n_out = y.shape[1]
        else:
            self.y_mean = self.y_scale = None
            targets = torch.as_tensor(y, device=self.device)
            n_out = int(y.max()) + 1 if n_classes is None else n_classes
        self.noise_std = self._fixed_noise(self.y_scale) if self.task == "regression" else None
        self.n_features, self.n_outputs, self.n_train, self.seed = X.shape[1], n_out, len(X), seed
        inputs = self._inputs(X)
        module = _methods.build(self.params, self.n_features, n_out, self.noise_std, seed)
        self.module = module.to(self.device)
        _methods.fit(self.module, self.params, inputs, targets, seed, progress)
        return self

    # ------------------------------------------------------------------ prediction
    def _inputs(self, X: np.ndarray) -> torch.Tensor:
        device = self.module.device if self.module is not None else self.device
        return torch.as_tensor(
            (X - self.x_mean) / self.x_scale, dtype=_methods.DTYPE, device=device
        )

    def _fitted(self, X: Any) -> torch.Tensor:
        if self.module is None:
            raise NotFittedError("this TabularBNN is not fitted yet: call fit(X, y) first")
        return self._inputs(_matrix("X", X, self.n_features))

    @torch.no_grad()
    def predictive_gaussian(self, X: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Regression predictive in the units of ``y`` as a Gaussian mixture.

        The density of ``y`` at row ``n`` is ``1/S sum_s Normal(y; locs[s, n], scales[s, n])``:
        what :func:`bnn_pyro.metrics.gaussian_log_likelihood` and the calibration plots take.

        Args:
            X: ``(N, D)`` inputs.

        Returns:
            ``locs (S, N, O)`` and ``scales`` (noise stds) broadcastable to ``locs``.

        Example:
            >>> X = np.linspace(0, 1, 10)[:, None]
            >>> reg = TabularBNN(method="swag", epochs=4, num_samples=5).fit(X, 10 * X[:, 0])
            >>> locs, scales = reg.predictive_gaussian(X)
            >>> locs.shape, bool((scales > 0).all())
            (torch.Size([5, 10, 1]), True)
        """
        inputs = self._fitted(X)
        if self.task != "regression":
            raise ValueError(
                "predictive_gaussian is for task='regression'; use predict or probability_samples"
            )
        locs, scales = self.module.predictive_gaussian(inputs, seed=self.seed)
        y_scale = torch.as_tensor(self.y_scale, dtype=locs.dtype, device=locs.device)
        locs = locs * y_scale + torch.as_tensor(self.y_mean, dtype=locs.dtype, device=locs.device)
        return locs, torch.as_tensor(scales, dtype=locs.dtype, device=locs.device) * y_scale

    @torch.no_grad()
    def probability_samples(self, X: Any) -> torch.Tensor:
        """Class-probability samples of a classifier.

        Args:
            X: ``(N, D)`` inputs.

        Returns:
            ``(S, N, C)`` probabilities, one ``(N, C)`` table per weight sample (member, mask).

        Example:
            >>> X = np.arange(8.0)[:, None]; y = (X[:, 0] > 3).astype(int)
            >>> clf = TabularBNN("classification", "ensemble", epochs=2, ensemble_size=3)
            >>> clf.fit(X, y).probability_samples(X).shape
            torch.Size([3, 8, 2])
        """
        inputs = self._fitted(X)
        if self.task != "classification":
            raise ValueError("probability_samples is for task='classification'")
        return self.module.predict(inputs, return_samples=True, seed=self.seed)[2]

    def predict(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Predictive mean and std per row, float64 numpy.

        Regression: the mean of ``y`` and its total predictive std (epistemic spread of the
        samples plus the observation noise), both ``(N, O)`` in the units of ``y``.
        Classification: the class probabilities ``(N, C)`` and their epistemic std.

        Args:
            X: ``(N, D)`` inputs.

        Returns:
            ``mean``, ``std``: float64 arrays, ``(N, O)`` or ``(N, C)``.

        Example:
            >>> X = np.linspace(0, 1, 10)[:, None]
            >>> reg = TabularBNN(method="ensemble", noise=0.5, epochs=2, ensemble_size=2)
            >>> mean, std = reg.fit(X, X[:, 0]).predict(X)
            >>> bool((std >= 0.5).all())  # the noise, plus the members' disagreement
            True
        """
        if self.task == "regression":
            locs, scales = self.predictive_gaussian(X)
            var, mean = torch.var_mean(locs, dim=0, correction=0)
            var = var + (scales**2).expand_as(locs).mean(0)
        else:
            var, mean = torch.var_mean(self.probability_samples(X), dim=0, correction=0)
        return mean.cpu().numpy(), var.sqrt().cpu().numpy()

    def __repr__(self) -> str:
        fitted = "fitted" if self.module is not None else "not fitted"
        return f"TabularBNN(task={self.task!r}, method={self.params['method']!r}, {fitted})"
