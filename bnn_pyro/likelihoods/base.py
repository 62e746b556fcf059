"""The :class:`Likelihood` base class: the observation site of a BNN, its registry of
subclasses (so a checkpoint names its likelihood's class), and the data plate."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

import pyro
import pyro.distributions as dist
import torch

__all__ = [
    "LIKELIHOOD_EXPECTED",
    "PROBIT_SCALE",
    "Likelihood",
    "likelihood_from_config",
    "observed_targets",
    "probit_scale",
]


def _data_plate(
    batch: int, dataset_size: int | None, dim: int = -1, device: torch.device | None = None
) -> pyro.plate:
    size = batch if dataset_size is None else dataset_size
    if size < batch:
        raise ValueError(
            f"dataset_size must be >= the number of rows passed, got dataset_size={size}, "
            f"batch={batch}"
        )
    subsample = None if size == batch else torch.arange(batch, device=device)
    return pyro.plate("data", size=size, subsample=subsample, dim=dim, device=device)


def observed_targets(y: torch.Tensor, fn: dist.Distribution, rows: int) -> torch.Tensor:
    """``y`` in the layout the observation site ``fn`` reads: ``(..., B, *event)``.

    What ``fit`` does to its targets, done where the model observes them, so that a user's own
    ``SVI``, ``Predictive``, ``MCMC`` or ``Trace_ELBO().loss`` scores the same likelihood as
    ``fit``: a ``(B,)`` vector for a site whose event is one column becomes ``(B, 1)``, and a
    ``(B, 1)`` column of class labels becomes ``(B,)``. Any other shape whose trailing
    dimensions are not ``(B, *event)`` is refused: left as it is, it would broadcast against the
    net's ``(B, O)`` output to ``(B, B)``, every prediction scored against every target, with no
    shape check failing. Only shapes are read (no host sync).

    Args:
        y: the targets passed to the model.
        fn: the observation distribution, batch shape ``(..., B)``.
        rows: ``B``, the number of rows of the net's output.

    Returns:
        ``y`` itself or a view of it.

    Example:
        >>> fn = dist.Normal(torch.zeros(4, 1), 1.0).to_event(1)
        >>> observed_targets(torch.zeros(4), fn, 4).shape
        torch.Size([4, 1])
        >>> observed_targets(torch.zeros(3), fn, 4)
        Traceback (most recent call last):
        ...
        ValueError: y has shape (3,), not (B,) or (B, 1) with B = 4 (the rows of x)
    """
    event = tuple(fn.event_shape)
    want = (rows, *event)
    shape = tuple(y.shape)
    if shape[-len(want) :] == want and len(shape) >= len(want):
        return y
    if event == (1,) and shape == (rows,):
        return y.unsqueeze(-1)
    if event == () and shape == (rows, 1):
        return y.squeeze(-1)
    forms = "(B,) or (B, 1)" if event in ((), (1,)) else f"(B, {', '.join(map(str, event))})"
    raise ValueError(f"y has shape {shape}, not {forms} with B = {rows} (the rows of x)")


#: How argument errors describe a likelihood argument.
LIKELIHOOD_EXPECTED = "a bnn_pyro.likelihoods.Likelihood (e.g. Gaussian(), Categorical())"


class Likelihood(ABC):
    """Base class of the observation models.

    Subclasses define :meth:`distribution` (of ``y`` given one net output; the Pyro site of
    :meth:`observe` and :meth:`log_prob` use it), :meth:`mean` (the predictive mean of ``y``
    given one net output) and :meth:`check_targets`; likelihoods with latent variables of their
    own (a learned noise scale) also :meth:`sample_latents`. ``name`` is the observation site.

    Example:
        >>> from bnn_pyro.likelihoods import Categorical
        >>> lik: Likelihood = Categorical()
        >>> lik.mean(torch.zeros(1, 2, 4)).shape  # (S, N, C) logits -> class probabilities
        torch.Size([1, 2, 4])
    """

    name = "obs"
    #: The targets are class labels and the net's outputs their logits: ``predict`` turns
    #: them into probabilities by default, and the interval tools (for real-valued targets)
    #: refuse the model.
    classifies: bool = False
    #: One noise std per output column, which a point fit either takes as given or estimates
    #: from its residuals afterwards (a homoscedastic Gaussian).
    homoscedastic: bool = False
    #: That noise std is the fit's to find (``Gaussian(scale="learned")``).
    learned: bool = False
    #: ``y`` given one net output is Normal, with the ``(loc, scale)`` of
    #: :meth:`~bnn_pyro.likelihoods.gaussian.GaussianLikelihood.loc_scale`: what
    #: ``predictive_gaussian`` returns and the fits' in-sample checks judge.
    gaussian: bool = False

    def output_dim(self, target_dim: int) -> int:
        """The net output width needed for targets of width ``target_dim``."""
        return target_dim

    @abstractmethod
    def check_targets(self, y: torch.Tensor, out_dim: int) -> torch.Tensor:
        """Validate ``y`` against a net output of width ``out_dim`` and return it in the shape and
        dtype the observation site needs (raises ``ValueError``/``TypeError``)."""

    def sample_latents(self, f: torch.Tensor) -> dict[str, torch.Tensor]:
        """Declare the likelihood's own latent sites (none by default) for net output ``f``."""
        return {}

    def latent_priors(self, f: torch.Tensor) -> dict[str, dist.TorchDistribution] | None:
        """The priors of this likelihood's own latent sites for net output ``f``, by site name,
        read without running Pyro (what the plain-torch objectives score them by, inside a
        compiled graph too), or ``None`` where only :meth:`sample_latents` knows them (a
        subclass that draws latents of its own: the objectives replay it). ``{}`` by default,
        where :meth:`sample_latents` draws nothing.

        Example:
            >>> from bnn_pyro.likelihoods import Categorical
            >>> Categorical().latent_priors(torch.zeros(3, 2))
            {}
        """
        return {} if type(self).sample_latents is Likelihood.sample_latents else None

    def initial_latents(self, X: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        """Initial values of the likelihood's latent sites read from training data ``X (N,
        ...)``, ``y`` (as :meth:`check_targets` returns it); none by default."""
        return {}

    def distribution(
        self, f: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> dist.TorchDistribution:
        """The distribution of each row's ``y`` given net output ``f: (*S, N, O)``: batch shape
        ``(*S, N)``, the output columns in its event. Subclasses define it (or override both
        :meth:`observe` and :meth:`log_prob`)."""
        raise NotImplementedError(f"{type(self).__name__} defines no distribution()")

    def observe(
        self,
        f: torch.Tensor,
        y: torch.Tensor | None,
        latents: dict[str, torch.Tensor],
        dataset_size: int | None = None,
    ) -> None:
        """Declare the observation site for net output ``f`` inside the data plate.

        Args:
            f: ``(N, O)`` or ``(*S, N, O)`` net output.
            y: targets as returned by :meth:`check_targets`, or ``None`` to sample.
            latents: what :meth:`sample_latents` returned.
            dataset_size: total number of data points; the ``N`` rows stand for it (their
                log-likelihood is scaled by ``dataset_size / N``). ``None``: the rows are all.
        """
        fn = self.distribution(f, latents)
        if y is not None:
            y = observed_targets(y, fn, f.shape[-2])
        with _data_plate(f.shape[-2], dataset_size, device=f.device):
            pyro.sample(self.name, fn, obs=y)

    @abstractmethod
    def mean(self, f: torch.Tensor) -> torch.Tensor:
        """The predictive mean of ``y`` given net output ``f: (S, N, O)`` → ``(S, N, O')``."""

    def log_prob(
        self, f: torch.Tensor, y: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """Each row's log-likelihood ``log p(y_n | f_n)``, summed over the output columns: the
        one density every objective, curvature and score of the library reads.

        Args:
            f: ``(*S, N, O)`` net outputs (``*S``: draws, stacked members, or none).
            y: targets as :meth:`check_targets` returns them (``(N, O')`` or ``(N,)`` labels),
                or with leading dimensions that broadcast against ``*S``.
            latents: the likelihood's latent sites (:meth:`sample_latents`), each broadcast
                against ``f`` (a learned noise scale ``(O,)``, ``(S, O)`` or ``(*S, 1, O)``).

        Returns:
            ``(*S, N)``. The built-in likelihoods compute it in plain torch (equal to their
            :meth:`distribution`'s ``log_prob``, which the Pyro model observes); this default
            reads it off :meth:`distribution`.
        """
        return self.distribution(f, latents).log_prob(y)

    def point_loss(self, f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Each row's loss for a point fit of the net (what the classic methods train on):
        ``-log p(y_n | f_n)`` at the likelihood's fixed latents by default.

        Args:
            f: ``(*S, N, O)`` net outputs (``*S``: stacked members, or none).
            y: targets as :meth:`check_targets` returns them, with the same leading dimensions
                as ``f`` or none.

        Returns:
            ``(*S, N)``; a fit takes its mean over the rows.

        Example:
            >>> from bnn_pyro.likelihoods import Categorical
            >>> Categorical().point_loss(torch.zeros(2, 4), torch.tensor([0, 3]))  # log 4 each
            tensor([1.3863, 1.3863])
        """
        return -self.log_prob(f, y, self.fixed_latents(f))

    def output_hessian(
        self, f: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, bool]:
        """The Hessian ``Λ`` of each row's negative log-likelihood in the net output (the
        generalised Gauss-Newton's middle factor), as ``(w, coupled)``: ``Λ = diag(w)``, or
        ``diag(w) - w wᵀ`` where ``coupled`` (a softmax's probabilities).

        Args:
            f: ``(*S, N, O)`` net outputs; ``latents`` as for :meth:`log_prob`.

        Returns:
            ``w`` of ``f``'s shape, and ``coupled``. The base class has none (``TypeError``).

        Example:
            >>> from bnn_pyro.likelihoods import Bernoulli
            >>> Bernoulli().output_hessian(torch.zeros(1, 2), {})  # p (1 - p) at p = 1/2
            (tensor([[0.2500, 0.2500]]), False)
        """
        raise TypeError(
            f"{type(self).__name__} gives no Hessian of its log-likelihood in the net output, "
            "which a Gauss-Newton curvature needs"
        )

    def predictive_log_prob(
        self, f: torch.Tensor, var: torch.Tensor, y: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """Each row's log predictive density of ``y`` when the net output is uncertain,
        ``f_n ~ N(f, diag(var))`` (a linearised posterior's, as the Laplace GLM has): exact
        where the likelihood is Gaussian, the probit approximation through a sigmoid or
        softmax.

        Args:
            f: ``(N, O)`` the output's mean; ``var``: ``(N, O)`` its variance.
            y: targets as :meth:`check_targets` returns them; ``latents`` as for
                :meth:`log_prob`.

        Returns:
            ``(N,)``. The base class has none (``TypeError``).

        Example:
            >>> from bnn_pyro.likelihoods import Categorical
            >>> f, var = torch.zeros(1, 2), torch.ones(1, 2)
            >>> Categorical().predictive_log_prob(f, var, torch.tensor([0]), {})  # log 1/2
            tensor([-0.6931])
        """
        raise TypeError(
            f"{type(self).__name__} gives no predictive density under an uncertain net output"
        )

    def fixed_latents(self, f: torch.Tensor) -> dict[str, torch.Tensor]:
        """The values this likelihood fixes for the latent sites a learned variant of it
        samples (a fixed Gaussian's noise scale), on ``f``'s device and dtype; none by default.

        Models stacked into one pass, each with its own fixed value, stack these and hand them
        to :meth:`log_prob` as ``latents``, one row per model.
        """
        return {}

    def noise_variance(
        self, f: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> torch.Tensor | None:
        """Aleatoric variance per sample, broadcastable to :meth:`mean`; None if not Gaussian."""
        return None

    def null_nll(self, y: torch.Tensor) -> float | None:
        """The negative log-likelihood of targets ``y`` (as :meth:`check_targets` returns them)
        under the best prediction that ignores the inputs (their mean, their class
        frequencies), summed over the rows: what a fit that learned nothing from ``X`` scores.
        ``None`` where it is not defined (the default)."""
        return None

    _subclasses: dict[str, type[Likelihood]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.__name__.startswith("_"):  # a private base names no checkpoint's class
            Likelihood._subclasses[cls.__name__] = cls

    @classmethod
    def _from_config(cls, own: dict[str, Any]) -> Likelihood:
        """The inverse of :meth:`config` (``own``: the settings without ``type``)."""
        return cls(**own)

    def config(self) -> dict[str, Any]:
        """A ``weights_only``-safe description, inverse of :func:`likelihood_from_config`."""
        return {"type": type(self).__name__, **self._own_config()}

    def _own_config(self) -> dict[str, Any]:
        return {}

    def __repr__(self) -> str:
        own = ", ".join(f"{k}={v!r}" for k, v in self._own_config().items())
        return f"{type(self).__name__}({own})"


#: ``π / 8``: ``sigmoid(t) ≈ Φ(sqrt(π / 8) t)``, the match of the two at ``t = 0`` in slope.
PROBIT_SCALE = math.pi / 8


def probit_scale(var: torch.Tensor) -> torch.Tensor:
    """``1 / sqrt(1 + π var / 8)``: the probit approximation's shrinkage of a logit with
    variance ``var`` (MacKay 1992), any shape.

    Example:
        >>> probit_scale(torch.tensor([0.0, 8 / math.pi]))
        tensor([1.0000, 0.7071])
    """
    return torch.rsqrt(1 + PROBIT_SCALE * var)


def float_targets(y: torch.Tensor, out_dim: int, what: str) -> torch.Tensor:
    given = tuple(y.shape)
    if not torch.is_floating_point(y):
        y = y.float()
    if y.dim() == 1 and out_dim == 1:
        y = y.unsqueeze(-1)
    if y.dim() != 2 or y.shape[1] != out_dim:
        shapes = "(N,) or (N, 1)" if out_dim == 1 else f"(N, {out_dim})"
        raise ValueError(
            f"y must have shape {shapes} for {what} with {out_dim} output(s), got {given}"
        )
    return y


def likelihood_from_config(config: dict[str, Any]) -> Likelihood:
    """Rebuild a likelihood from :meth:`Likelihood.config` (used when loading a checkpoint).

    The ``type`` names a :class:`Likelihood` subclass: every subclass is registered by its
    class name when it is defined, so a user's own likelihood reloads once its module is
    imported.

    Example:
        >>> from bnn_pyro.likelihoods import Gaussian
        >>> likelihood_from_config(Gaussian(scale=0.5).config())
        Gaussian(scale=0.5)
    """
    config = dict(config)
    kind = config.pop("type", None)
    if kind not in Likelihood._subclasses:
        raise ValueError(
            f"unknown likelihood type {kind!r} in checkpoint (known: "
            f"{sorted(Likelihood._subclasses)}); import the module that defines it before loading"
        )
    return Likelihood._subclasses[kind]._from_config(config)
