"""The one prediction contract that every method in bnn_pyro answers.

``mean, variance = method.predict(x)`` and
``mean, variance, samples = method.predict(x, return_samples=True)`` with ``samples`` of shape
``(S, N, ...)``. The variance is the *epistemic* part: the spread of the S predictive samples,
or its closed form where a method has one (the Laplace GLM's).
"""

from __future__ import annotations

import functools
import itertools
import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn

from bnn_pyro._checks import check_int, check_seed
from bnn_pyro._kept import kept_on_error
from bnn_pyro._rng import seed_from
from bnn_pyro._streaming import reduce_samples
from bnn_pyro.checkpoint import class_named, load_method, register_class, save_method
from bnn_pyro.threads import uses_threads

#: The calls that run on the thread count of :mod:`bnn_pyro.threads` (one by default) in every
#: method: training, and each way of reading the posterior predictive, so that a prediction's
#: figures do not depend on how many threads torch has elsewhere.
THREADED = ("fit", "predict", "predictive_gaussian", "log_predictive_density", "sample_posterior")

if TYPE_CHECKING:
    from bnn_pyro.training import History

__all__ = ["BaseBayesianMethod", "PredictOutput", "summarize_samples", "to_probabilities"]

_NO_NOISE = (
    "{cls} has no observation noise: set `noise_scale` (the Gaussian noise standard deviation, "
    "a float or a tensor broadcastable to (S, N, O)) or use a Gaussian-likelihood regression model"
)

PredictOutput = tuple[torch.Tensor, torch.Tensor] | tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def to_probabilities(outputs: torch.Tensor, normalize_output: bool = True) -> torch.Tensor:
    """Apply a softmax to multi-column logits (class probabilities from a classifier's outputs).

    Args:
        outputs: ``(S, N, C)`` per-sample network outputs, or ``(S, N)`` / ``(S, N, 1)``.
        normalize_output: when True and the per-sample output is 2-D with more than one column
            (``outputs.dim() == 3 and C > 1``), the columns are treated as logits and turned into
            probabilities with a softmax over the last dimension. Otherwise returned unchanged.

    Returns:
        Tensor of the same shape as ``outputs``.

    Example:
        >>> p = to_probabilities(torch.zeros(2, 3, 4))
        >>> bool(torch.allclose(p, torch.full((2, 3, 4), 0.25)))
        True
    """
    if not isinstance(outputs, torch.Tensor):
        raise TypeError(f"outputs must be a torch.Tensor, got {type(outputs).__name__}")
    if normalize_output and outputs.dim() == 3 and outputs.size(-1) > 1:
        return torch.softmax(outputs, dim=-1)
    return outputs


def summarize_samples(samples: torch.Tensor, return_samples: bool = False) -> PredictOutput:
    """Reduce predictive samples to ``(mean, variance[, samples])``.

    The variance is the population variance over the sample dimension (``correction=0``): it is
    the variance of the equally weighted mixture of the samples, it is 0 (not NaN) for S = 1, and
    it is never negative.

    Args:
        samples: ``(S, N, ...)`` predictive samples.
        return_samples: also return ``samples`` as the third element.

    Returns:
        ``mean`` ``(N, ...)``, ``variance`` ``(N, ...)`` and, if asked, ``samples`` ``(S, N, ...)``.

    Example:
        >>> m, v = summarize_samples(torch.tensor([[1.0], [3.0]]))
        >>> m.tolist(), v.tolist()
        ([2.0], [1.0])
    """
    if not isinstance(samples, torch.Tensor):
        raise TypeError(f"samples must be a torch.Tensor, got {type(samples).__name__}")
    if samples.dim() < 2:
        raise ValueError(f"samples must have shape (S, N, ...), got shape {tuple(samples.shape)}")
    mean, variance = reduce_samples(samples)
    if return_samples:
        return mean, variance, samples
    return mean, variance


class BaseBayesianMethod(nn.Module, ABC):
    """Abstract base class of every uncertainty method in bnn_pyro: one contract for all.

    Every method (``VariationalBNN``, ``HiddenLayerBNN``, ``MCDropout``, ``DeepEnsemble``,
    ``SWAG``, ``LaplaceApproximation``, ``VariationalBayesNN``) answers::

        history = m.fit(X, y, epochs=..., batch_size=..., lr=..., seed=..., progress=...,
                        callbacks=[...], validation_data=(X_val, y_val))   # -> History
        mean, variance = m.predict(x, num_samples=..., seed=...)            # epistemic variance
        mean, variance, samples = m.predict(x, return_samples=True)         # samples (S, N, ...)
        m.save(path); m2 = bnn_pyro.load(path, net=...)

    ``num_samples`` is a constructor default that a ``predict`` call overrides. ``samples`` are
    the per-sample predictive means (class probabilities for a classifier). The variance is the
    disagreement between the S samples (see :func:`summarize_samples`), or its closed form
    where the method has one (Laplace's GLM predictive: no sampling).

    Devices: ``m.to("cuda")`` moves everything the method holds; ``fit`` and ``predict`` move the
    data they are given to the method's device, and ``predict`` returns its results there.
    ``seed=`` makes a call reproducible on one device, bit for bit; on another device the same
    seed gives the same distribution, not the same draws (the CPU's and a GPU's random streams
    differ). The minibatch order is drawn on the CPU, the same on every device.

    A ``fit`` that raises an ``Exception`` (``TrainingDivergedError`` on a NaN loss, a bad later
    batch, a callback that raises) leaves the method as it was before the call: its parameters
    and buffers bit for bit, its guide's parameters and Pyro param store, its fitted flags, its
    samples or snapshots, every attribute. A first fit that fails leaves the method unfitted
    (``predict`` raises :class:`~bnn_pyro.exceptions.NotFittedError` where it needs a fit); a
    refit that fails keeps the earlier fit. Every subclass's ``fit`` gets this from the base
    class (see :mod:`bnn_pyro._kept`); :func:`bnn_pyro.fit_stacked` gives it to each of its
    models. A ``KeyboardInterrupt`` is the exception: it keeps the progress made.

    Subclasses are registered by class name when they are defined, so a checkpoint names its
    class and :func:`bnn_pyro.load` finds it (a user's own subclass too, once its module is
    imported). To be saved, a subclass implements :meth:`checkpoint_config` and
    :meth:`from_checkpoint_config` (the :class:`~bnn_pyro.checkpoint.Checkpointable` hooks).

    Example:
        >>> from bnn_pyro.methods import MCDropout
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(2, 8), nn.Dropout(0.2), nn.Linear(8, 1))
        >>> method: BaseBayesianMethod = MCDropout(net, num_samples=4)
        >>> mean, variance, samples = method.predict(torch.randn(3, 2), return_samples=True)
        >>> samples.shape
        torch.Size([4, 3, 1])
        >>> BaseBayesianMethod.subclass("MCDropout") is MCDropout
        True
    """

    #: The default number of predictive samples ``S``; ``predict(num_samples=...)`` overrides.
    num_samples: int = 100

    #: The members a new method defines or calls to plug into ``fit``, ``predict`` and the
    #: checkpoints: the contract between a method and the library, not part of a user's API.
    #: Each family's base class adds its own; the API pages leave them off a method's page.
    hooks: tuple[str, ...] = (
        "hooks",
        "subclass",
        "forward",
        "checkpoint_config",
        "from_checkpoint_config",
        "fitted_state",
        "restore_fitted_state",
    )

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        register_class(cls)
        fit = cls.__dict__.get("fit")
        if callable(fit) and not getattr(fit, "__bnn_pyro_kept__", False):
            cls.fit = _kept_fit(fit)  # a fit that raises leaves the method as it was
        for name in THREADED:  # on the thread count of bnn_pyro.threads
            fn = cls.__dict__.get(name)
            if callable(fn) and not getattr(fn, "__bnn_pyro_threads__", False):
                setattr(cls, name, uses_threads(fn))

    @staticmethod
    def subclass(name: str) -> type[BaseBayesianMethod]:
        """The registered method class called ``name`` (raises ``ValueError`` if unknown).

        Example:
            >>> import bnn_pyro as bp
            >>> BaseBayesianMethod.subclass("SWAG") is bp.SWAG
            True
        """
        return class_named(name)

    @classmethod
    def from_net(cls, net: nn.Module, likelihood: Any, **options: Any) -> BaseBayesianMethod:
        """Build the method around a plain ``net`` (what :func:`bnn_pyro.make` calls).

        The default is ``cls(net, likelihood=likelihood, **options)``; methods whose
        constructor takes something else (a member factory, layer widths) override it.
        """
        return cls(net, likelihood=likelihood, **options)  # type: ignore[call-arg]

    @abstractmethod
    def fit(self, X: Any, y: Any = None, **kwargs: Any) -> History:
        """Train on ``X (N, ...)`` and ``y (N,)``/``(N, O)``; return the
        :class:`~bnn_pyro.training.History`.

        A fit that raises an ``Exception`` leaves the method as it was before the call (see
        the class docstring): unfitted after a failed first fit, the earlier fit after a
        failed refit.

        The arguments every method's ``fit`` takes (through the one loop,
        :func:`bnn_pyro.training.train`):

        Args:
            X: ``(N, D)`` inputs (``VariationalBNN``, ``HiddenLayerBNN`` and
                ``LaplaceApproximation`` also take a ``DataLoader`` of ``(x, y)``).
            y: ``(N,)`` class indices, or ``(N,)`` / ``(N, O)`` regression targets.
            **kwargs: ``epochs``; ``batch_size``; ``lr``; ``optimizer`` (see
                :func:`bnn_pyro.training.make_optimizer`); ``seed`` (shuffling and every draw of
                the run, without touching the global RNG); ``progress`` (a tqdm bar);
                ``callbacks`` (``fn(method, epoch, history)`` after each epoch, ``True`` stops);
                ``validation_data`` (``(X_val, y_val)``, scored after each epoch as ``val_nll``
                by the SVI methods, as ``val_loss``, the training loss, by the others); and the
                method's own options.

        Example:
            >>> import bnn_pyro as bp
            >>> m = bp.make("vi", bp.nn.mlp(2, [8], 1), bp.Gaussian(0.5))
            >>> X = torch.randn(32, 2); y = X.sum(-1)
            >>> m.fit(X, y, epochs=2, callbacks=[lambda m, e, h: 1 / 0], progress=False)
            Traceback (most recent call last):
            ZeroDivisionError: division by zero
            >>> m.is_fitted()  # a failed first fit leaves the method unfitted
            False
        """

    @abstractmethod
    def predict(
        self, x: torch.Tensor, return_samples: bool = False, **kwargs: Any
    ) -> PredictOutput:
        """Predict with uncertainty.

        Args:
            x: ``(N, ...)`` inputs.
            return_samples: also return the ``(S, N, ...)`` samples.
            **kwargs: ``num_samples`` (``S``, default the constructor's), ``seed`` and the
                method's own options.

        Returns:
            ``(mean, variance)`` or ``(mean, variance, samples)``.
        """

    @property
    def device(self) -> torch.device:
        """The device of the method's tensors."""
        for tensor in itertools.chain(self.buffers(), self.parameters()):  # lazy: the first
            return tensor.device
        return torch.device("cpu")

    @property
    def dtype(self) -> torch.dtype:
        """The floating dtype of the method's tensors."""
        for tensor in itertools.chain(self.buffers(), self.parameters()):
            if tensor.is_floating_point():
                return tensor.dtype
        return torch.get_default_dtype()

    def _kept_on_error(self) -> AbstractContextManager[None]:
        """The whole method put back as it was if the block raises an ``Exception``: every
        subclass's ``fit`` runs in it (see :mod:`bnn_pyro._kept` for what it keeps)."""
        return kept_on_error(self)

    def _samples_to_draw(self, num_samples: int | None) -> int:
        """``num_samples`` of a ``predict`` call, or the method's default; checked either way
        (the attribute may have been set by hand)."""
        if num_samples is None:
            return check_int("num_samples (the method's default)", self.num_samples)
        return check_int("num_samples", num_samples)

    @staticmethod
    def _predict_seed(seed: int | None, generator: torch.Generator | None) -> int | None:
        """The seed of a ``predict`` call: ``seed``, else one drawn from ``generator``."""
        if seed is not None and generator is not None:
            raise ValueError("pass seed or generator, not both")
        seed = check_seed("seed", seed) if generator is None else seed_from(generator)
        if seed is None:
            from bnn_pyro.training import distributed  # (here: training imports the core)

            if distributed.active():  # predict is sharded: every rank the same draws
                seed = distributed.shared_seed(None)
        return seed

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_config(self) -> dict[str, Any]:
        """The constructor settings as plain data (``weights_only``-safe), without the net."""
        raise NotImplementedError(f"{type(self).__name__} cannot be saved yet")

    @classmethod
    def from_checkpoint_config(
        cls, net: nn.Module | None, config: dict[str, Any]
    ) -> BaseBayesianMethod:
        """A fresh, unfitted instance around ``net`` from :meth:`checkpoint_config`'s settings."""
        raise NotImplementedError(f"{cls.__name__} cannot be loaded yet")

    def fitted_state(self) -> dict[str, Any]:
        """What a fitted model holds beyond ``state_dict()`` (plain data)."""
        return {}

    def restore_fitted_state(self, fitted: dict[str, Any]) -> None:
        """Put back :meth:`fitted_state` before ``load_state_dict`` (e.g. create lazily made
        parameters)."""

    def save(self, path: str | os.PathLike) -> None:
        """Write the method to one file, atomically; reload with :func:`bnn_pyro.load`.

        The file holds the class name, the constructor settings, the ``state_dict`` and the
        fitted state; it loads with ``torch.load(weights_only=True)``.

        Args:
            path: the file to write (its folder must exist).
        """
        save_method(self, path)

    @classmethod
    def load(
        cls, path: str | os.PathLike, net: nn.Module | None = None, map_location: Any = None
    ) -> BaseBayesianMethod:
        """Rebuild a saved method around a fresh ``net`` of the saved architecture.

        Args:
            path: a file written by :meth:`save`.
            net: an instance of the saved architecture (its weights are overwritten); methods
                that build their own layers (``HiddenLayerBNN``, ``VariationalBayesNN``) take
                ``None``.
            map_location: as in ``torch.load``.

        Returns:
            The method, of this class (or a subclass).
        """
        return load_method(path, net=net, map_location=map_location, expected=cls)

    @uses_threads
    def predictive_gaussian(
        self, x: torch.Tensor, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The Gaussian predictive of a regression model as a mixture over samples.

        The predictive density of ``y`` at ``x`` is ``1/S sum_s Normal(y; locs[s], scales[s])``.
        ``locs`` are samples of the mean function (epistemic), ``scales`` the observation noise
        standard deviation of each sample (aleatoric). This is what the Gaussian test
        log-likelihood and CRPS in :mod:`bnn_pyro.metrics` consume.

        The default uses ``self.noise_scale`` (homoscedastic noise); heteroscedastic models
        override it.

        Args:
            x: ``(N, D)`` inputs.
            **kwargs: passed to :meth:`predict`.

        Returns:
            ``locs`` ``(S, N, O)`` and ``scales`` broadcastable to ``(S, N, O)``.
        """
        noise_scale = getattr(self, "noise_scale", None)
        if noise_scale is None:
            raise NotImplementedError(_NO_NOISE.format(cls=type(self).__name__))
        _, _, locs = self.predict(x, return_samples=True, normalize_output=False, **kwargs)
        scales = torch.as_tensor(noise_scale, dtype=locs.dtype, device=locs.device)
        if bool((scales <= 0).any()):
            raise ValueError(f"noise_scale must be positive, got {noise_scale}")
        return locs, scales


def _kept_fit(fit: Callable[..., Any]) -> Callable[..., Any]:
    """``fit`` run inside the method's :meth:`~BaseBayesianMethod._kept_on_error`, with
    gradients on (a fit called under ``torch.no_grad()`` trains as any other)."""

    @functools.wraps(fit)
    def kept_fit(self: BaseBayesianMethod, *args: Any, **kwargs: Any) -> Any:
        with self._kept_on_error(), torch.enable_grad():
            return fit(self, *args, **kwargs)

    kept_fit.__bnn_pyro_kept__ = True  # type: ignore[attr-defined]
    return kept_fit
