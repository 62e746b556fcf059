"""Likelihoods of discrete targets: ``Categorical`` (class labels) and ``Bernoulli`` (binary)."""

from __future__ import annotations

import pyro.distributions as dist
import torch
import torch.nn.functional as F

from bnn_pyro.likelihoods.base import Likelihood, float_targets, probit_scale

__all__ = ["Bernoulli", "Categorical"]


class _ProbitLink(Likelihood):
    """A likelihood of logits through a softmax or a sigmoid: its density under an uncertain
    output is the probit approximation."""

    def predictive_log_prob(
        self, f: torch.Tensor, var: torch.Tensor, y: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """``log p(y | f / sqrt(1 + π var / 8))`` per row: each logit shrunk by its variance,
        the probit approximation (MacKay 1992; see :meth:`Likelihood.predictive_log_prob`)."""
        return self.log_prob(f * probit_scale(var), y, latents)


class Categorical(_ProbitLink):
    """``y ~ Categorical(logits=f(x))`` for class labels ``0..C-1`` (``C >= 2``).

    Example:
        >>> Categorical().check_targets(torch.tensor([0, 2, 1]), out_dim=3)
        tensor([0, 2, 1])
    """

    classifies = True

    def check_targets(self, y: torch.Tensor, out_dim: int) -> torch.Tensor:
        if out_dim < 2:
            raise ValueError(
                f"a Categorical likelihood needs a net with C >= 2 outputs (one logit per class), "
                f"got {out_dim}; for one binary column use Bernoulli()"
            )
        if y.dim() == 2 and y.shape[1] == 1:
            y = y.squeeze(1)
        if y.dim() != 1:
            raise ValueError(f"y must be a vector of class labels (N,), got shape {tuple(y.shape)}")
        if y.dtype == torch.bool:
            raise TypeError("y must hold integer class labels, got a bool tensor")
        if torch.is_floating_point(y) and not bool((y == y.round()).all()):
            raise ValueError("y must hold integer class labels, got non-integer values")
        y = y.long()
        if y.numel() and (int(y.min()) < 0 or int(y.max()) >= out_dim):
            raise ValueError(
                f"y labels must be in [0, {out_dim - 1}] for a net with {out_dim} outputs, got "
                f"labels in [{int(y.min())}, {int(y.max())}]"
            )
        return y

    def distribution(
        self, f: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> dist.TorchDistribution:
        return dist.Categorical(logits=f, validate_args=False)

    def log_prob(
        self, f: torch.Tensor, y: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """``log softmax(f_n)[y_n]`` per row, in plain torch (see :meth:`Likelihood.log_prob`).

        Example:
            >>> f = torch.zeros(2, 3, 4)  # (S, N, C): every class equally likely
            >>> Categorical().log_prob(f, torch.tensor([0, 1, 3]), {})[0, 0].item()  # -log 4
            -1.3862943649291992
        """
        if f.dim() == 2 and y.dim() == 1:  # one net's rows: no reshaping
            return -F.cross_entropy(f, y, reduction="none")
        labels = y.expand(f.shape[:-1]).reshape(-1)
        ce = F.cross_entropy(f.reshape(-1, f.shape[-1]), labels, reduction="none")
        return -ce.view(f.shape[:-1])

    def output_hessian(
        self, f: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, bool]:
        """``(softmax(f), True)``: ``Λ = diag(p) - p pᵀ`` (see :meth:`Likelihood.output_hessian`).

        Example:
            >>> Categorical().output_hessian(torch.zeros(1, 2), {})
            (tensor([[0.5000, 0.5000]]), True)
        """
        return torch.softmax(f, dim=-1), True

    def mean(self, f: torch.Tensor) -> torch.Tensor:
        return torch.softmax(f, dim=-1)

    def null_nll(self, y: torch.Tensor) -> float | None:
        """Labels ``y (N,)`` predicted by their class frequencies.

        Example:
            >>> round(Categorical().null_nll(torch.tensor([0, 1, 1, 1])), 4)
            2.2493
        """
        counts = torch.bincount(y).double()
        return float(-(counts * torch.log(counts.clamp_min(1) / len(y))).sum())


class Bernoulli(_ProbitLink):
    """``y ~ Bernoulli(logits=f(x))`` for binary targets in {0, 1} (one or several columns).

    Example:
        >>> Bernoulli().check_targets(torch.tensor([0, 1, 1]), out_dim=1).shape
        torch.Size([3, 1])
    """

    classifies = True

    def check_targets(self, y: torch.Tensor, out_dim: int) -> torch.Tensor:
        y = float_targets(y, out_dim, "a Bernoulli likelihood")
        if not bool(((y == 0) | (y == 1)).all()):
            raise ValueError("y must hold binary targets in {0, 1} for a Bernoulli likelihood")
        return y

    def distribution(
        self, f: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> dist.TorchDistribution:
        return dist.Bernoulli(logits=f, validate_args=False).to_event(1)

    def log_prob(
        self, f: torch.Tensor, y: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """``sum_o log Bernoulli(y_no; sigmoid(f_no))`` per row, in plain torch (see
        :meth:`Likelihood.log_prob`).

        Example:
            >>> f = torch.zeros(3, 2)  # (N, O): probability 1/2 for each of two columns
            >>> Bernoulli().log_prob(f, torch.ones(3, 2), {})[0].item()  # 2 log(1/2)
            -1.3862943649291992
        """
        bce = F.binary_cross_entropy_with_logits(f, y.expand_as(f), reduction="none")
        return -bce.sum(-1)

    def output_hessian(
        self, f: torch.Tensor, latents: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, bool]:
        """``(p (1 - p), False)`` with ``p = sigmoid(f)``: each column's own Bernoulli (see
        :meth:`Likelihood.output_hessian`)."""
        p = torch.sigmoid(f)
        return p * (1 - p), False

    def mean(self, f: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(f)

    def null_nll(self, y: torch.Tensor) -> float | None:
        """Binary targets ``y (N, O)`` predicted by each column's frequency of ones.

        Example:
            >>> round(Bernoulli().null_nll(torch.tensor([[0.0], [1.0]])), 4)  # 2 * log 2
            1.3863
        """
        y = y.double()
        p = y.mean(0).clamp(1e-12, 1 - 1e-12)
        return float(-(y * p.log() + (1 - y) * (1 - p).log()).sum())
