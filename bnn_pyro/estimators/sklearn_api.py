"""scikit-learn estimators: :class:`BNNRegressor` and :class:`BNNClassifier`.

They follow scikit-learn's conventions: the constructor only stores its arguments, ``fit``
validates them (a ``ValueError``/``TypeError`` naming the argument, before any work) and the
data, attributes learned by ``fit`` end in ``_``, and the same ``random_state`` gives the same
model and the same predictions. They work in ``Pipeline``, ``cross_val_score`` and
``GridSearchCV`` and pass ``sklearn.utils.estimator_checks`` (see
``tests/estimators/test_sklearn_checks.py`` for the two checks skipped for ``method="dropout"``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils import Tags, check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from bnn_pyro.estimators.tabular import TabularBNN

__all__ = ["BNNClassifier", "BNNRegressor"]

_COMMON_ARGS = """
        hidden_sizes: widths of the hidden layers of the MLP, e.g. ``(50,)`` or ``(50, 50)``.
        activation: ``"relu"``, ``"tanh"``, ``"gelu"``, ... (:data:`bnn_pyro.nn.mlp.ACTIVATIONS`).
        method: a name from :data:`bnn_pyro.METHODS`: ``"vi"`` (mean-field variational
            inference), ``"lrt"`` (the same trained with local reparameterization),
            ``"bb_alpha"`` (the same trained on the black-box alpha energy),
            ``"hidden_layer"`` (HiddenLayer sites), ``"vbnn"`` (pure-torch Bayes by Backprop),
            ``"dropout"`` (MC dropout), ``"ensemble"`` (deep ensemble), ``"swag"`` or
            ``"laplace"`` (GGN Laplace, linearised predictive).
        epochs: passes over the training data.
        batch_size: minibatch size; ``None`` = full batch.
        lr: learning rate (Adam; SGD with momentum for SWAG).
        num_samples: Monte Carlo samples per prediction (``"ensemble"``: the members instead).
        prior_scale: std of the prior ``N(0, prior_scale²)`` on every weight (the variational
            methods, Laplace), or the matching L2 penalty for the methods trained to a point
            estimate.
        standardize: standardise the input columns inside the estimator (predictions come back
            in the original units)."""

_TAIL_ARGS = """
        dropout_rate: dropout probability (``method="dropout"``).
        ensemble_size: number of members (``method="ensemble"``).
        random_state: ``None``, an int or a ``numpy.random.RandomState``; seeds the initial
            weights, the minibatches and the Monte Carlo samples of ``predict``.
        progress: show a progress bar during ``fit``.
        device: where the model trains and predicts: ``None``/``"cpu"`` (default), ``"cuda"``,
            ``"cuda:1"``; the arrays are copied there and the results back as NumPy arrays."""


@dataclass(eq=False, repr=False)  # scikit-learn's repr; hashable (identity) as estimators are
class _BNNEstimator(BaseEstimator):
    """Shared parts: the hyperparameters (the constructor only stores them, as scikit-learn
    asks), building the :class:`TabularBNN`, seeding, tags."""

    hidden_sizes: tuple[int, ...] = (50,)
    activation: str = "relu"
    method: str = "vi"
    epochs: int = 200
    batch_size: int | None = 128
    lr: float = 1e-2
    num_samples: int = 100
    prior_scale: float = 1.0
    standardize: bool = True
    dropout_rate: float = 0.1
    ensemble_size: int = 5
    random_state: int | np.random.RandomState | None = None
    progress: bool = False
    device: str | None = None

    _task = "regression"

    def _params_for_model(self) -> dict[str, Any]:
        names = self._get_param_names()
        skip = {"random_state", "progress"}
        return {name: getattr(self, name) for name in names if name not in skip}

    @contextmanager
    def _unchanged_on_error(self) -> Iterator[None]:
        """A ``fit`` that raises (bad data, a diverged run) leaves the estimator as it was: no
        ``n_features_in_`` without a model, and an earlier fit's model kept."""
        before = dict(self.__dict__)
        try:
            yield
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(before)
            raise

    def _new_model(self) -> tuple[TabularBNN, int]:
        """Validate the hyperparameters (before any work) and draw the seed of this fit."""
        model = TabularBNN(self._task, **self._params_for_model())
        if not isinstance(self.progress, bool):
            raise TypeError(f"progress must be a bool, got {type(self.progress).__name__}")
        try:
            rng = check_random_state(self.random_state)
        except ValueError:
            raise TypeError(
                "random_state must be None, an int or a numpy.random.RandomState, got "
                f"{self.random_state!r}"
            ) from None
        return model, int(rng.randint(np.iinfo(np.int32).max))

    def __sklearn_tags__(self) -> Tags:
        tags = super().__sklearn_tags__()
        # MC dropout draws a mask per row from one stream: a row's prediction depends on the
        # rows predicted with it, so predictions on a subset differ from those on the full set.
        tags.non_deterministic = self.method == "dropout"
        return tags


@dataclass(eq=False, repr=False)
class BNNRegressor(RegressorMixin, _BNNEstimator):
    """A Bayesian neural network regressor with the scikit-learn interface.

    ``predict(X, return_std=True)`` returns the mean and the total predictive standard deviation
    of ``y`` (as ``GaussianProcessRegressor`` does): the epistemic spread of the Monte Carlo
    samples *and* the observation noise, ``std² = Var_s[mean_s] + E_s[noise_s²]``, in the units
    of ``y``. Inputs and targets are standardised inside (``standardize=True``). Computation
    runs in float64, on the CPU unless ``device`` names a GPU.

    Args:{common}
        noise: the observation noise std: ``"learned"`` (the variational methods: inferred
            with the weights; the others: the maximum-likelihood std of the training residuals)
            or a fixed float in the units of ``y``.{tail}

    Attributes:
        n_features_in_: D, the number of input columns.
        n_outputs_: O, the number of target columns (1 for a 1-D ``y``).
        model_: the fitted :class:`~bnn_pyro.estimators.TabularBNN`; ``model_.module`` is the
            bnn_pyro method object (e.g. a :class:`~bnn_pyro.VariationalBNN`).

    Shapes:
        ``fit(X: (N, D), y: (N,) | (N, O))``; ``predict(X) -> (N,) | (N, O)``, with
        ``return_std=True`` a pair of those.

    Example:
        >>> import numpy as np
        >>> X = np.linspace(-2, 2, 60)[:, None]; y = X[:, 0] ** 2
        >>> reg = BNNRegressor(hidden_sizes=(16,), epochs=40, num_samples=10, random_state=0)
        >>> mean, std = reg.fit(X, y).predict(X[:3], return_std=True)
        >>> mean.shape, bool((std > 0).all())
        ((3,), True)
    """

    noise: str | float = "learned"

    _task = "regression"

    def fit(self, X: Any, y: Any) -> BNNRegressor:
        """Standardise, build and train the model.

        Args:
            X: ``(N, D)`` numbers (array-like).
            y: ``(N,)`` or ``(N, O)`` targets.

        Returns:
            self.

        Raises:
            TypeError, ValueError: a bad hyperparameter (named) or bad data, before any work.
        """
        model, seed = self._new_model()
        with self._unchanged_on_error():
            X, y = validate_data(self, X, y, multi_output=True, y_numeric=True, dtype=np.float64)
            self._y_1d = y.ndim == 1
            self.model_ = model.fit(X, y, seed=seed, progress=self.progress)
            self.n_outputs_ = self.model_.n_outputs
        return self

    def predict(
        self, X: Any, return_std: bool = False
    ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """Posterior predictive mean, and with ``return_std`` the total predictive std of ``y``.

        Args:
            X: ``(N, D)`` inputs.
            return_std: also return the std (epistemic spread plus observation noise).

        Returns:
            ``mean`` ``(N,)`` (``(N, O)`` if ``y`` had O columns), or ``(mean, std)``.
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        mean, std = self.model_.predict(X)
        if self._y_1d:
            mean, std = mean[:, 0], std[:, 0]
        return (mean, std) if return_std else mean

    def __sklearn_tags__(self) -> Tags:
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags


@dataclass(eq=False, repr=False)
class BNNClassifier(ClassifierMixin, _BNNEstimator):
    """A Bayesian neural network classifier with the scikit-learn interface.

    ``predict_proba`` is the posterior predictive: the class probabilities averaged over the
    Monte Carlo samples (weights, dropout masks or members). Labels may be any values (strings,
    ints); inputs are standardised inside (``standardize=True``). Computation runs in float64.

    Args:{common}{tail}

    Attributes:
        classes_: the sorted class labels ``(C,)``.
        n_features_in_: D.
        model_: the fitted :class:`~bnn_pyro.estimators.TabularBNN`.

    Shapes:
        ``fit(X: (N, D), y: (N,))``; ``predict(X) -> (N,)``; ``predict_proba(X) -> (N, C)``.

    Example:
        >>> import numpy as np
        >>> X = np.r_[np.zeros((20, 2)), np.ones((20, 2))]; y = np.r_[["a"] * 20, ["b"] * 20]
        >>> clf = BNNClassifier(hidden_sizes=(8,), epochs=30, num_samples=10, random_state=0)
        >>> clf.fit(X, y).predict([[0.0, 0.0], [1.0, 1.0]]).tolist()
        ['a', 'b']
        >>> clf.predict_proba(X[:1]).shape
        (1, 2)
    """

    _task = "classification"

    def fit(self, X: Any, y: Any) -> BNNClassifier:
        """Standardise, build and train the model.

        Args:
            X: ``(N, D)`` numbers (array-like).
            y: ``(N,)`` class labels (any values; at least two distinct ones).

        Returns:
            self.

        Raises:
            TypeError, ValueError: a bad hyperparameter (named), continuous or single-class
                ``y``, or bad data, before any work.
        """
        model, seed = self._new_model()
        with self._unchanged_on_error():
            X, y = validate_data(self, X, y, dtype=np.float64)
            check_classification_targets(y)
            classes, encoded = np.unique(y, return_inverse=True)
            if len(classes) < 2:
                raise ValueError(
                    f"BNNClassifier needs at least 2 classes in y, got 1 class ({classes[0]!r})"
                )
            self.model_ = model.fit(
                X, encoded, n_classes=len(classes), seed=seed, progress=self.progress
            )
            self.classes_ = classes
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        """Posterior predictive class probabilities.

        Args:
            X: ``(N, D)`` inputs.

        Returns:
            ``(N, C)`` probabilities (rows sum to 1), columns in the order of ``classes_``.
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return self.model_.predict(X)[0]

    def predict(self, X: Any) -> np.ndarray:
        """The most probable class of each row.

        Args:
            X: ``(N, D)`` inputs.

        Returns:
            ``(N,)`` labels from ``classes_``.
        """
        probs = self.predict_proba(X)
        return self.classes_[np.argmax(probs, axis=1)]


for _cls in (BNNRegressor, BNNClassifier):
    _cls.__doc__ = _cls.__doc__.format(common=_COMMON_ARGS, tail=_TAIL_ARGS)
