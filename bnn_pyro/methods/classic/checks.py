"""The classic methods' data checks (inputs, and targets by the likelihood's own check against
the net's output), raised before any work starts; the generic checks are in
:mod:`bnn_pyro._checks`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import torch

from bnn_pyro._checks import check_finite, check_tensor

if TYPE_CHECKING:
    from bnn_pyro.likelihoods import Likelihood


def check_inputs(x: object, name: str = "x", indices: bool = False) -> torch.Tensor:
    """``x`` must be a floating tensor ``(N, D, ...)`` with N >= 1 and finite values; with
    ``indices`` (a net that starts from an ``nn.Embedding``) an integer tensor is accepted too.

    Example:
        >>> check_inputs(torch.tensor([[1, 2]]), indices=True).dtype
        torch.int64
    """
    check_tensor(name, x, floating=False)
    integer = not x.is_floating_point() and not x.is_complex() and x.dtype != torch.bool
    if not x.is_floating_point() and not (indices and integer):
        raise TypeError(
            f"{name} must have a floating dtype, got {x.dtype}"
            + ("" if indices else " (integer indices only for a net with an nn.Embedding)")
        )
    if x.dim() < 2 or len(x) == 0:
        raise ValueError(
            f"{name} must have shape (N, D, ...) with N >= 1, got {tuple(x.shape)}"
            + ("; for 1-D features use x.unsqueeze(-1)" if x.dim() == 1 else "")
        )
    return check_finite(name, x)


def output_width(out: torch.Tensor, what: str = "model") -> int:
    """``O`` of a net's output ``(N, O)`` (a probe's), which the targets are checked against.

    Example:
        >>> output_width(torch.zeros(2, 3))
        3
    """
    if out.dim() != 2:
        raise ValueError(f"{what} output must have shape (N, O), got {tuple(out.shape)}")
    return out.shape[1]


def check_targets(x: torch.Tensor, y: object, likelihood: Likelihood, out_dim: int) -> torch.Tensor:
    """Check ``y`` against ``x``'s rows and a net output of width ``out_dim``, by the
    likelihood's own :meth:`~bnn_pyro.likelihoods.Likelihood.check_targets`; return ``y`` as it
    returns it (class labels ``(N,)``, real targets ``(N, O)``), finite.

    Example:
        >>> from bnn_pyro.likelihoods import Gaussian
        >>> check_targets(torch.zeros(3, 2), torch.zeros(3), Gaussian(), 1).shape
        torch.Size([3, 1])
    """
    check_tensor("y", y, floating=False)
    if y.dim() == 0 or len(y) != len(x):
        raise ValueError(f"y must have {len(x)} rows (len(x)), got shape {tuple(y.shape)}")
    return check_finite("y", likelihood.check_targets(y, out_dim))


def check_batches(
    batches: Iterable[Any],
    check_x: Callable[[Any, str], torch.Tensor],
    likelihood: Likelihood,
    net: Callable[[torch.Tensor], torch.Tensor],
) -> None:
    """One pass over ``batches`` (a ``DataLoader`` or sequence of ``(x, y)`` pairs) checking
    every batch, before any work: ``x`` by ``check_x(x, name)``, ``y`` by
    :func:`check_targets` against ``net``'s output on the first batch's rows (finite, the
    right rows, dtype and width). A bad batch raises the check's ``ValueError``/``TypeError``
    with the batch's index in front.

    Example:
        >>> from bnn_pyro.likelihoods import Gaussian
        >>> net = lambda x: x[:2]  # noqa: E731 - a net with one output
        >>> good = [(torch.zeros(2, 1), torch.zeros(2)), (torch.zeros(2, 1), torch.zeros(2))]
        >>> check_batches(good, lambda x, name: x, Gaussian(), net)
        >>> bad = good + [(torch.zeros(2, 1), torch.tensor([0.0, float("nan")]))]
        >>> check_batches(bad, lambda x, name: x, Gaussian(), net)
        Traceback (most recent call last):
          ...
        ValueError: batch 2 of the data: y must be finite, got 1 NaN or infinite value(s)
    """
    count, width = 0, None
    for i, batch in enumerate(batches):
        if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
            raise ValueError(
                f"batch {i} of the data must be an (x, y) pair, got {type(batch).__name__}"
            )
        try:
            x = check_x(batch[0], "x")
            width = output_width(net(x)) if width is None else width
            check_targets(x, batch[1], likelihood, width)
        except (TypeError, ValueError) as err:
            raise type(err)(f"batch {i} of the data: {err}") from None
        count += 1
    if count == 0:
        raise ValueError("the data yielded no batch")
