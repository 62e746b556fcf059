"""``ClassicMethod``: what the plain-torch methods share to answer the one contract of
:class:`~bnn_pyro.BaseBayesianMethod`: the likelihood, the noise scale, ``predict`` and the
plumbing of ``fit``.

A subclass implements ``_sample_outputs`` (``S`` raw net outputs, for the ``predict`` of
:class:`~bnn_pyro.methods.classic.predictive.ClassicPredictive`), ``fit``
(through :meth:`ClassicMethod.fit_data` and :meth:`ClassicMethod._train`) and the checkpoint
hooks ``checkpoint_config``/``from_checkpoint_config``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.nn as nn
from torch.utils.data import DataLoader

from bnn_pyro.base import BaseBayesianMethod
from bnn_pyro.likelihoods import Likelihood, likelihood_from_config
from bnn_pyro.likelihoods.resolve import resolve_likelihood
from bnn_pyro.methods.classic.checks import check_inputs, check_targets, output_width
from bnn_pyro.methods.classic.engine import train_epochs
from bnn_pyro.methods.classic.noise import HomoscedasticNoise
from bnn_pyro.methods.classic.predictive import ClassicPredictive
from bnn_pyro.methods.classic.training import (
    TrainSettings,
    check_fit_args,
    module_device,
    probe,
)
from bnn_pyro.nn.inputs import takes_indices
from bnn_pyro.training import Callback, History, OptimizerSpec
from bnn_pyro.training.batches import gather_loader, validation_pair
from bnn_pyro.training.resume import ResumePath, open_resume

__all__ = ["ClassicMethod", "StackedParts"]

#: What a stacked fit trains of one model (:meth:`ClassicMethod.stacked_parts`): the net that
#: trains stacked, and either ``(None, None)`` (the net on the likelihood's point loss) or the
#: model's own head beside it with one member's loss ``(head, net output (B, ...), targets) -> ()``.
StackedParts = tuple[
    nn.Module,
    nn.Module | None,
    Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor] | None,
]

Data = tuple[torch.Tensor, torch.Tensor]
#: The ``fit`` settings that fix a run's trajectory, compared with a resume file's.
RUN_KEYS = (
    "epochs",
    "batch_size",
    "lr",
    "weight_decay",
    "optimizer",
    "seed",
    "lr_schedule",
    "average",
)


class ClassicMethod(HomoscedasticNoise, ClassicPredictive):
    """Base of the classic methods (MC dropout, ensembles, SWAG, Laplace, ``VariationalBayesNN``).

    ``self.likelihood`` is a :class:`~bnn_pyro.likelihoods.Likelihood` (its ``point_loss`` is
    what the net trains on), ``noise_scale`` the homoscedastic Gaussian noise std of a
    regression model (see :class:`~bnn_pyro.methods.classic.noise.HomoscedasticNoise`).
    """

    hooks = (
        *BaseBayesianMethod.hooks,
        "epoch_callbacks",
        "after_training",
        "complete_training",
        "fit_data",
        "fit_defaults",
        "fit_probe",
        "stacked_parts",
    )

    def _set_likelihood(
        self,
        likelihood: Likelihood | str,
        noise_scale: Any,
        heteroscedastic: bool = False,
        variance_heads: bool = False,
        classifies: bool = True,
    ) -> None:
        """Resolve the likelihood (a :class:`Likelihood` or a name such as ``"regression"``) and
        the noise (:func:`~bnn_pyro.likelihoods.resolve.resolve_likelihood`)."""
        self.likelihood, noise = resolve_likelihood(
            likelihood, noise_scale, type(self).__name__, heteroscedastic, variance_heads,
            classifies=classifies,
        )  # fmt: skip
        self.noise_scale = noise

    # ------------------------------------------------------------------ fit
    #: The ``lr`` and ``optimizer`` that ``fit`` uses when the call does not give them.
    fit_defaults: dict[str, Any] = {"lr": 1e-3, "optimizer": "adam"}
    _min_epochs = 1
    #: May a finished resumable run go on to more epochs (one net; see ``resume``)?
    _resume_extendable = True

    def fit(
        self,
        x: Any,
        y: Any = None,
        *,
        epochs: int = 100,
        batch_size: int = 32,
        lr: float | None = None,
        weight_decay: float = 0.0,
        optimizer: OptimizerSpec = None,
        progress: bool = True,
        seed: int | None = None,
        callbacks: Iterable[Callback] = (),
        validation_data: tuple[torch.Tensor, torch.Tensor] | None = None,
        lr_schedule: Any = None,
        average: float | None = None,
        resume: ResumePath = None,
        compile: bool = False,
        **options: Any,
    ) -> History:
        """Train on ``(x, y)`` with the one loop, then fit the method's posterior.

        Args:
            x: ``(N, D)`` inputs, or a ``DataLoader`` of ``(x, y)`` batches (then ``y`` is
                None; its rows are gathered into one tensor each, so it must fit in memory).
            y: ``(N,)`` class indices, or ``(N,)`` / ``(N, O)`` regression targets.
            epochs: passes over the data.
            batch_size: rows per minibatch (reshuffled every epoch).
            lr: learning rate (default: the class's ``fit_defaults``, ``1e-3``; SWAG ``1e-2``).
            weight_decay: an L2 penalty on the mean loss (a Gaussian prior on the weights).
            optimizer: ``"adam"``, ``"sgd"`` (momentum 0.9), a torch optimizer class, instance
                or factory (see :func:`bnn_pyro.training.make_optimizer`); default the class's
                ``fit_defaults`` (Adam; SWAG: SGD).
            progress: show a tqdm bar.
            seed: seeds shuffling and every draw of the run (the global RNG is left untouched).
            callbacks: ``fn(method, epoch, history)`` after each epoch; ``True`` stops.
            validation_data: ``(x_val, y_val)``; adds ``val_loss`` (the training loss on it,
                in eval mode) to the history.
            lr_schedule: the learning rate over the epochs (see
                :func:`bnn_pyro.training.train`).
            average: Polyak averaging of the last iterates, the share of the epochs averaged
                (see :func:`bnn_pyro.training.train`); ``None``: the last iterate.
            resume: a file path: the run writes its state there after each epoch, and a fit
                with the same path and settings goes on from it to the same numbers as a run
                never interrupted (see :mod:`bnn_pyro.training.resume`).
            compile: compile the step's loss, forward and backward, with ``torch.compile``
                (:mod:`bnn_pyro.training.compiled`): the first step of each batch shape
                compiles it (seconds), later steps run the graph, drawing the eager fit's
                weight noise and dropout masks.
            **options: the method's own (SWAG: ``swa_start``; ``VariationalBayesNN``:
                ``train_samples``, ``kl_weight``; Laplace: ``device``).

        Returns:
            The :class:`~bnn_pyro.training.History` (``loss`` per epoch, ``val_loss``).

        Raises:
            TrainingDivergedError: a NaN or infinite loss. Like any ``Exception`` inside
                ``fit``, it leaves the method as it was before the call (unfitted, or as fitted).

        Example:
            >>> import bnn_pyro as bp
            >>> m = bp.make("swag", bp.nn.mlp(2, [8], 1), bp.Gaussian(0.5))
            >>> X = torch.randn(32, 2); y = X.sum(-1)
            >>> m.fit(X, y, epochs=2, callbacks=[lambda m, e, h: e and 1 / 0], progress=False)
            Traceback (most recent call last):
            ZeroDivisionError: division by zero
            >>> m.n_models  # the failed first fit left no snapshot behind
            0
        """
        if isinstance(x, DataLoader):
            net = self._net()
            indices = net is not None and takes_indices(net)
            x, y = gather_loader(x, y, lambda t, name: check_inputs(t, name, indices))
        settings = check_fit_args(
            epochs,
            batch_size,
            self.fit_defaults["lr"] if lr is None else lr,
            weight_decay,
            self.fit_defaults["optimizer"] if optimizer is None else optimizer,
            progress,
            seed,
            min_epochs=self._min_epochs,
            callbacks=callbacks,
            validation_data=validation_data,
            lr_schedule=lr_schedule,
            average=average,
            compile=compile,
        )
        if resume is not None:
            run = {**{k: getattr(settings, k) for k in RUN_KEYS}, **options}
            # None: open_resume's rule (a constant learning rate, no averaging) decides
            extendable = None if self._resume_extendable else False
            opened = open_resume(resume, self, settings.callbacks, run, None, extendable)
            settings = dataclasses.replace(settings, resume=opened)
        history = self._fit(x, y, settings, **options)
        self._seen_input = tuple(x.shape[1:])
        return history

    def _fit(self, x: Any, y: Any, settings: TrainSettings) -> History:
        """The method's training and posterior fit, with checked ``settings``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ hooks of fit
    def epoch_callbacks(self, epochs: int) -> list[Callback]:
        """The method's own callbacks for a run of ``epochs`` epochs, called after each epoch
        before the user's (SWAG: its snapshot collector). None by default. The stacked fit
        (:func:`~bnn_pyro.fit_stacked`) runs each member's."""
        return []

    def after_training(self, x: torch.Tensor, yt: torch.Tensor, settings: TrainSettings) -> None:
        """The posterior's fit once the net is trained on ``x`` (``(N, ...)``) and ``yt``
        (``(N, O)`` for regression): SWAG's moments, Laplace's curvature, the noise estimate.
        Nothing by default. ``fit`` and the stacked fit call it after training."""

    def complete_training(self, x: torch.Tensor, yt: torch.Tensor, settings: TrainSettings) -> None:
        """What a fit does once its net is trained: :meth:`after_training`, then remember
        ``x``'s row shape for ``predict``'s input check. The stacked fit calls it per member."""
        self.after_training(x, yt, settings)
        self._seen_input = tuple(x.shape[1:])

    def fit_probe(self, x: torch.Tensor) -> torch.Tensor:
        """What ``fit`` checks the targets' width against: the net's output on a few rows
        ``(n, O)``. The methods with a head of their own also check the net's shape here."""
        return self.model(x)

    def stacked_parts(self, x: torch.Tensor) -> StackedParts:
        """What the stacked fit (:func:`~bnn_pyro.fit_stacked`) trains of this model, to be
        fitted on ``x`` ``(N, ...)`` (see :data:`StackedParts`). By default the net on the
        likelihood's point loss; a method that trains a head of its own gives it and its
        loss."""
        return self.model, None, None

    def fit_data(
        self,
        x: Any,
        y: Any,
        net: Callable[[torch.Tensor], torch.Tensor],
        module: nn.Module,
        validation_data: Any,
        what: str = "model",
    ) -> tuple[torch.Tensor, torch.Tensor, Data | None]:
        """Check ``x``, ``y`` (by the likelihood, against ``net``'s output on two rows) and
        ``validation_data``; return them on ``module``'s device (floating ones in the method's
        dtype), ``y`` as the likelihood's ``check_targets`` returns it (``(N, O)`` for
        regression)."""
        x = self._check_x(x)
        width = output_width(probe(net, module, x), what)
        yt = self._placed(check_targets(x, y, self.likelihood, width))
        device = module_device(module)
        validation = None
        if validation_data is not None:
            pair = validation_pair(
                validation_data,
                self._check_x,
                lambda y, x: check_targets(x, y, self.likelihood, width),
            )
            validation = (pair[0].to(device), self._placed(pair[1]).to(device))
        return x.to(device), yt.to(device), validation

    def _train(
        self,
        params: Iterable[torch.Tensor],
        batch_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        data: Data,
        settings: TrainSettings,
        *,
        module: nn.Module,
        desc: str,
        validation: Data | None,
        seed: int | None = None,
        before: Iterable[Callback] = (),
    ) -> History:
        """The one training loop over ``data`` (see
        :func:`~bnn_pyro.methods.classic.engine.train_epochs`); callbacks (the method's own
        ``before`` first, then the user's) see this method; the loss compiled where
        ``settings.compile``."""
        return train_epochs(
            params,
            batch_loss,
            data,
            settings,
            module=module,
            owner=self,
            name=desc,
            seed=seed,
            validation=validation,
            callbacks=tuple(before),
        )

    def _train_net(
        self,
        data: Data,
        settings: TrainSettings,
        validation: Data | None,
        desc: str,
        before: Iterable[Callback] = (),
    ) -> History:
        """:meth:`_train` of ``self.model`` on the likelihood's point loss (cross-entropy or
        squared error, :meth:`~bnn_pyro.likelihoods.Likelihood.point_loss`)."""
        model, likelihood = self.model, self.likelihood
        return self._train(
            model.parameters(),
            lambda xb, yb: likelihood.point_loss(model(xb), yb).mean(),
            data,
            settings,
            module=model,
            desc=desc,
            validation=validation,
            before=before,
        )

    # ------------------------------------------------------------------ checkpoint hooks
    #: The constructor arguments saved by ``save`` (each also an attribute), besides the net
    #: and the likelihood.
    _config_keys: tuple[str, ...] = ()

    def checkpoint_config(self) -> dict[str, Any]:
        return {
            "likelihood": self.likelihood.config(),
            **{key: getattr(self, key) for key in self._config_keys},
        }

    @classmethod
    def from_checkpoint_config(
        cls, net: nn.Module | None, config: dict[str, Any]
    ) -> BaseBayesianMethod:
        options = {k: v for k, v in config.items() if k != "likelihood"}
        return cls(net, likelihood=cls._likelihood_from(config), **options)  # type: ignore[call-arg]

    @staticmethod
    def _likelihood_from(config: dict[str, Any]) -> Likelihood:
        return likelihood_from_config(config["likelihood"])
