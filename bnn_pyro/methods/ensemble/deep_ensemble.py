"""Deep ensembles (Lakshminarayanan et al. 2017), predicted all members at once with vmap."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import stack_module_state
from torch.utils.data import DataLoader

from bnn_pyro._checks import check_bool, check_device, check_int
from bnn_pyro.base import (
    PredictOutput,
)
from bnn_pyro.exceptions import warn_user
from bnn_pyro.likelihoods import Likelihood
from bnn_pyro.methods.classic.base import ClassicMethod
from bnn_pyro.methods.classic.params import batched_call
from bnn_pyro.methods.classic.training import TrainSettings, module_device
from bnn_pyro.methods.ensemble.heads import VAR_FLOOR, check_heads_in_sample, split_heads
from bnn_pyro.methods.ensemble.stacked import fit_stacked, why_not_stacked
from bnn_pyro.nn.modes import modes
from bnn_pyro.training import History, LossStep, train
from bnn_pyro.training.stacked import same_layers

__all__ = ["DeepEnsemble"]


class DeepEnsemble(ClassicMethod):
    """An ensemble of independently trained nets; the spread of their outputs is the uncertainty.

    :meth:`predict` runs all members in one vectorized call (``torch.func.stack_module_state``
    + ``vmap`` + ``functional_call``), with the same numbers as a loop over members; members of
    different architectures (other layers, or other activations between the same layers) fall
    back to the loop.

    With ``gaussian_nll=True`` (regression), each member outputs ``(N, 2 O)``: a mean head and a
    variance head, ``variance = softplus(raw) + 1e-6``, trained with the Gaussian NLL
    (Lakshminarayanan et al. 2017). :meth:`predict` then returns the member means as samples,
    and :meth:`predictive_gaussian` the per-member ``(loc, scale)``: a Gaussian mixture.

    Args:
        model_fn: called ``num_models`` times to build the members.
        num_models: M, the ensemble size.
        likelihood: ``Categorical()``/``"classification"``, ``Gaussian(...)``/``"regression"``,
            or ``HeteroscedasticGaussian()`` (the same as ``gaussian_nll=True``).
        gaussian_nll: members have mean and variance heads (regression only).
        noise_scale: homoscedastic noise std for regression without variance heads; None lets
            :meth:`fit` estimate it.

    Example:
        >>> ens = DeepEnsemble(lambda: nn.Linear(3, 2), num_models=4)
        >>> mean, var, samples = ens.predict(torch.randn(6, 3), return_samples=True)
        >>> samples.shape
        torch.Size([4, 6, 2])
    """

    hooks = (*ClassicMethod.hooks, "train_member")
    _config_keys = ("num_models", "gaussian_nll")
    _resume_extendable = False  # members train one after another: each to its epochs

    def __init__(
        self,
        model_fn: Callable[[], nn.Module],
        num_models: int = 5,
        *,
        likelihood: Likelihood | str = "classification",
        gaussian_nll: bool = False,
        noise_scale: float | torch.Tensor | None = None,
    ) -> None:
        super().__init__()
        if isinstance(model_fn, nn.Module):
            raise TypeError(
                f"model_fn must be a factory that builds one member, got a net "
                f"({type(model_fn).__name__}); pass lambda: MyNet(...), or "
                "DeepEnsemble.from_net(net, likelihood, num_models=...) (or make('ensemble', net)) "
                "for re-initialised copies of a net"
            )
        if not callable(model_fn):
            raise TypeError(f"model_fn must be callable, got {type(model_fn).__name__}")
        check_int("num_models", num_models)
        check_bool("gaussian_nll", gaussian_nll)
        self._set_likelihood(likelihood, noise_scale, True, variance_heads=gaussian_nll)
        # variance heads: a mean and a variance output per target (HeteroscedasticGaussian)
        gaussian_nll = self.likelihood.output_dim(1) == 2
        models = [model_fn() for _ in range(num_models)]
        for i, m in enumerate(models):
            if not isinstance(m, nn.Module):
                raise TypeError(
                    f"model_fn must return a torch.nn.Module, got {type(m).__name__} (member {i})"
                )
        self.num_models = num_models
        self.gaussian_nll = gaussian_nll
        self.models = nn.ModuleList(models)

    @property
    def num_samples(self) -> int:  # type: ignore[override]
        """``S`` of :meth:`predict`: the members (``num_models``)."""
        return self.num_models

    def forward(self, x: torch.Tensor, model_idx: int | None = None) -> torch.Tensor:
        """Raw output of member ``model_idx``, or the average of all members' raw outputs.

        Runs the members in their current modes with autograd (a loop over the members); use
        :meth:`predict` for vectorized, eval-mode inference.
        """
        if model_idx is not None:
            return self.models[model_idx](x)
        return torch.stack([m(x) for m in self.models]).mean(dim=0)

    def _member_outputs(self, x: torch.Tensor, vectorize: bool = True) -> torch.Tensor:
        """Raw member outputs ``(M, N, ...)`` in eval mode (modes restored afterwards)."""
        with modes(self, lambda m: False):
            if vectorize:
                members = list(self.models)
                # one forward (the first member's) runs every member's parameters
                why = None if same_layers(members) else "the members differ in their layers"
                if why is None:
                    try:
                        params, buffers = stack_module_state(members)
                    except RuntimeError as err:
                        why = str(err)
                    else:
                        return batched_call(members[0], {**params, **buffers}, x)
                warn_user(
                    f"ensemble members cannot be stacked ({why}); predicting in a loop",
                    RuntimeWarning,
                )
            return torch.stack([m(x) for m in self.models])

    def _net(self) -> nn.Module | None:
        return self.models[0] if len(self.models) else None

    def predict(
        self,
        x: torch.Tensor,
        return_samples: bool = False,
        return_all: bool = False,
        normalize_output: bool | None = None,
        *,
        vectorize: bool = True,
        **kwargs: Any,
    ) -> PredictOutput:
        """Ensemble prediction; the samples are the M members' outputs.

        Args:
            x: ``(N, ...)`` inputs.
            return_samples: also return the ``(M, N, O)`` member outputs.
            return_all: deprecated alias of ``return_samples`` (seed API).
            normalize_output: softmax multi-column outputs; ``None``: for a classifier only.
            vectorize: run members with vmap (True) or in a Python loop (False).
            **kwargs: ``num_samples`` (None or ``num_models``: the samples are the members),
                ``seed`` and ``generator`` (accepted for the one signature; the members are
                deterministic).

        Returns:
            ``mean (N, O)``, ``variance (N, O)`` (epistemic: the members' disagreement) and, if
            asked, ``samples (M, N, O)``; for ``gaussian_nll`` members the samples are the means.
        """
        if return_all:
            warn_user("return_all is deprecated; use return_samples", DeprecationWarning)
        check_bool("vectorize", vectorize)
        return super().predict(
            x, return_samples or return_all, normalize_output, vectorize=vectorize, **kwargs
        )

    def _sample_outputs(
        self, x: torch.Tensor, num_samples: int, seed: int | None, *, vectorize: bool
    ) -> torch.Tensor:
        if num_samples != self.num_models:
            raise ValueError(
                f"a DeepEnsemble's samples are its {self.num_models} members: num_samples must be "
                f"None or {self.num_models}, got {num_samples!r}"
            )
        out = self._member_outputs(x, vectorize=vectorize)
        return split_heads(out)[0] if self.gaussian_nll else out

    @torch.no_grad()
    def predictive_gaussian(
        self, x: torch.Tensor, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-member ``(loc, scale)``, each ``(M, N, O)``, for ``gaussian_nll`` members.

        Without variance heads this is the base class's mixture with ``noise_scale``.
        """
        if not self.gaussian_nll:
            return super().predictive_gaussian(x, **kwargs)
        x = self._check_x(x)
        loc, var = split_heads(self._member_outputs(x))
        return loc, var.sqrt()

    def diversity(self, x: torch.Tensor) -> torch.Tensor:
        """Disagreement between members: the predictive variance averaged over outputs, ``(N,)``.

        Example:
            >>> ens = DeepEnsemble(lambda: nn.Linear(2, 3), num_models=3)
            >>> ens.diversity(torch.randn(4, 2)).shape
            torch.Size([4])
        """
        _, variance = self.predict(x)
        return variance.mean(dim=-1)

    def train_member(
        self,
        model_idx: int,
        train_loader: DataLoader,
        optimizer: torch.optim.Optimizer,
        criterion: nn.Module,
        num_epochs: int = 10,
        device: str | torch.device | None = None,
    ) -> list[float]:
        """Train one member with the caller's loader, optimizer and loss (seed API).

        Args:
            model_idx: index of the member, ``0 <= model_idx < num_models``.
            train_loader: yields ``(x, y)`` batches.
            optimizer: an optimizer over that member's parameters.
            criterion: ``loss = criterion(member(x), y)``.
            num_epochs: epochs to train.
            device: moves the member (and batches) there; None keeps the member's device.

        Returns:
            The mean loss per sample of each epoch.

        Example:
            >>> from torch.utils.data import DataLoader, TensorDataset
            >>> ens = DeepEnsemble(lambda: nn.Linear(2, 2), num_models=2)
            >>> data = DataLoader(TensorDataset(torch.randn(8, 2), torch.randint(0, 2, (8,))))
            >>> opt = torch.optim.SGD(ens.models[0].parameters(), lr=0.1)
            >>> len(ens.train_member(0, data, opt, nn.CrossEntropyLoss(), num_epochs=2))
            2
        """
        check_int("model_idx", model_idx, minimum=0)
        if model_idx >= self.num_models:
            raise ValueError(f"model_idx must be < num_models = {self.num_models}, got {model_idx}")
        check_int("num_epochs", num_epochs)
        model = self.models[model_idx]
        device = check_device("device", device) or module_device(model)
        model.to(device)

        def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
            for batch_x, batch_y in train_loader:
                yield batch_x.to(device), batch_y.to(device)

        step = LossStep(lambda xb, yb: criterion(model(xb), yb), optimizer, desc="train_member")
        with modes(model, lambda m: True):  # the one loop, with the caller's optimizer and loss
            history = train(model, step, batches, epochs=num_epochs, progress=False)
        return history["loss"]

    def _loss(self, member: nn.Module) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        if not self.gaussian_nll:
            return lambda xb, yb: self.likelihood.point_loss(member(xb), yb).mean()

        def nll(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
            mean, var = split_heads(member(xb))
            return F.gaussian_nll_loss(mean, yb, var, eps=VAR_FLOOR)

        return nll

    def _fit(
        self, x: torch.Tensor, y: torch.Tensor, settings: TrainSettings, stacked: bool | None = None
    ) -> History:
        """Train every member independently (own shuffling; seed ``seed + i`` for member i).

        The members train together as one stacked model (:mod:`bnn_pyro.training.stacked`: one
        pass of the loop for all of them, each with its own minibatch order and optimizer
        state, the numbers of the one-by-one run up to float rounding) when they allow it:
        same architecture, no dropout or buffers, an elementwise optimizer. Stacked, a callback
        sees the members' mean ``loss`` (and ``val_loss``) per epoch, so a callback's ``True``
        (``EarlyStopping``) stops every member at once. ``stacked=False`` trains them one after
        the other; ``stacked=True`` refuses (``ValueError``, with the reason) when they cannot
        be stacked.

        Loss: cross-entropy, squared error, or the Gaussian NLL for ``gaussian_nll`` members.
        For regression without variance heads, ``noise_scale`` (unless set by the user) becomes
        the maximum-likelihood std of the training residuals of the ensemble mean.

        Args:
            x: ``(N, D)`` inputs.
            y: ``(N,)`` class indices, or ``(N,)`` / ``(N, O)`` regression targets.
            seed: member i's run is seeded with ``seed + i``; the global RNG is left untouched.
            callbacks: see :meth:`bnn_pyro.BaseBayesianMethod.fit`; they run in each member's
                training, with that member's history.
            validation_data: see :meth:`bnn_pyro.BaseBayesianMethod.fit`.

        Returns:
            The :class:`~bnn_pyro.training.History`: per epoch, ``loss`` (and ``val_loss``)
            averaged over the members that ran that epoch, and ``member_loss``, the list of
            the members' losses.

        Example:
            >>> make = lambda: nn.Sequential(nn.Linear(1, 8), nn.Tanh(), nn.Linear(8, 2))
            >>> ens = DeepEnsemble(make, 3, likelihood="regression", gaussian_nll=True)
            >>> x = torch.linspace(-1, 1, 16).unsqueeze(-1)
            >>> history = ens.fit(x, x, epochs=200, progress=False)
            >>> loc, scale = ens.predictive_gaussian(x)
            >>> loc.shape, scale.shape
            (torch.Size([3, 16, 1]), torch.Size([3, 16, 1]))
        """
        first = self.models[0]
        x, yt, validation = self.fit_data(x, y, first, first, settings.validation_data, "member")
        if stacked is not None:
            check_bool("stacked", stacked)
        if stacked is not False:
            why_not = why_not_stacked(list(self.models), settings)
            if stacked and why_not is not None:
                raise ValueError(f"stacked=True: the members cannot train stacked: {why_not}")
            if why_not is None:
                history = fit_stacked(self, x, yt, settings, validation)
                self._after_members(x, yt)
                return history
        runs = []
        for i, member in enumerate(self.models):
            device = module_device(member)
            val = (
                None if validation is None else (validation[0].to(device), validation[1].to(device))
            )
            runs.append(
                self._train(
                    member.parameters(),
                    self._loss(member),
                    (x.to(device), yt.to(device)),
                    settings,
                    module=member,
                    seed=None if settings.seed is None else settings.seed + i,
                    desc=f"DeepEnsemble member {i + 1}/{self.num_models}",
                    validation=val,
                )
            )
        self._after_members(x, yt)
        return _mean_history(runs)

    def _after_members(self, x: torch.Tensor, yt: torch.Tensor) -> None:
        """Once every member is trained: the noise of mean-only members from the residuals;
        each variance-head member's in-sample check (a member whose variance head grew over
        rows its mean left behind: :mod:`bnn_pyro.training.in_sample`)."""
        if self.gaussian_nll:
            check_heads_in_sample(self.models, x, yt)
        else:
            self._refit_noise(x, yt, None)

    @classmethod
    def from_checkpoint_config(cls, net: nn.Module | None, config: dict[str, Any]) -> DeepEnsemble:
        if net is None:
            raise ValueError("loading a DeepEnsemble needs net=: one member's architecture")
        options = {k: v for k, v in config.items() if k != "likelihood"}
        return cls(lambda: copy.deepcopy(net), likelihood=cls._likelihood_from(config), **options)

    @classmethod
    def from_net(cls, net: nn.Module, likelihood: Any, **options: Any) -> DeepEnsemble:
        """An ensemble of copies of ``net``, each re-initialised (``reset_parameters`` of every
        submodule that has one), so the members start apart.

        Example:
            >>> import bnn_pyro as bp
            >>> ens = DeepEnsemble.from_net(nn.Linear(2, 1), bp.Gaussian(0.1), num_models=3)
            >>> bool(torch.equal(ens.models[0].weight, ens.models[1].weight))
            False
        """
        return cls(lambda: _reinitialised(net), likelihood=likelihood, **options)


def _reinitialised(net: nn.Module) -> nn.Module:
    member = copy.deepcopy(net)
    for module in member.modules():
        reset = getattr(module, "reset_parameters", None)
        if callable(reset):
            reset()
    return member


def _mean_history(runs: list[History]) -> History:
    """One history from the members': per epoch the mean over the members that ran it."""
    history = History()
    for epoch in range(max(len(run["loss"]) for run in runs)):
        ran = [run for run in runs if epoch < len(run["loss"])]
        row: dict[str, Any] = {"epoch": epoch}
        for key in ("loss", "val_loss"):
            if key in ran[0]:
                row[key] = sum(run[key][epoch] for run in ran) / len(ran)
        row["member_loss"] = [run["loss"][epoch] for run in ran]
        history.append(**row)
    return history
