"""``fit_stacked``: K models of one method trained as one, each to what its own ``fit`` gives.

A short dispatcher to the stacked fit that the models' method declares in its
:class:`~bnn_pyro.spec.MethodSpec` (``stacked_fit``): the VI models'
(:func:`~bnn_pyro.methods.vi.stacked_fit.fit_stacked_vi`) and the classic methods' (MC dropout,
SWAG, Laplace: :func:`~bnn_pyro.methods.classic.stacked.fit_classic_stacked`). An option that
the method's stacked fit does not take is refused by name unless it is left at its default.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from bnn_pyro._checks import as_tensor
from bnn_pyro.registry import method_specs
from bnn_pyro.spec import load_object
from bnn_pyro.training.callbacks import History
from bnn_pyro.training.loop import Callback
from bnn_pyro.training.schedules import KLWeightSpec

__all__ = ["fit_stacked"]


def fit_stacked(
    bnns: Sequence[Any],
    X: torch.Tensor,
    y: torch.Tensor,
    *,
    seeds: Sequence[int],
    epochs: int = 100,
    batch_size: int = 128,
    lr: float | None = None,
    optimizer: Any = None,
    weight_decay: float = 0.0,
    kl_weight: KLWeightSpec = 1.0,
    lr_schedule: Any = None,
    callbacks: Iterable[Callback] = (),
    progress: bool = True,
    init: str | None = None,
    map_epochs: int | None = None,
    elbo: str | None = None,
    num_particles: int = 1,
) -> History:
    """Train K ``VariationalBNN`` (or K ``MCDropout``, ``SWAG`` or ``LaplaceApproximation``)
    models as one; each ends as its own ``fit(X_k, y_k, seed=seeds[k], ...)`` would (up to
    float rounding).

    ``MCDropout``, ``SWAG`` and ``LaplaceApproximation`` models go to
    :func:`bnn_pyro.methods.classic.stacked.fit_classic_stacked` (there ``kl_weight`` and
    ``callbacks`` do not apply; ``weight_decay`` applies there only).

    Args:
        bnns: K models of one architecture (for VI, see
            :func:`~bnn_pyro.methods.vi.stacked_support.why_not_stacked_vi`).
        X: ``(N, D)`` shared by all, or ``(K, N, D)``: member k's own rows (a tensor, numpy
            array or nested list).
        y: ``(N,)``/``(N, O)`` targets, or ``(K, N)``/``(K, N, O)``.
        seeds: K seeds, each as ``fit(seed=)``.
        epochs, batch_size, lr, optimizer, kl_weight, lr_schedule, progress: as in
            :meth:`bnn_pyro.VariationalBNN.fit` (``kl_weight``: a float or ``fn(epoch)``, e.g.
            :func:`~bnn_pyro.training.callbacks.linear_annealing`; ``optimizer``: an elementwise
            one; ``lr=None``: the class's default; ``lr_schedule=None``: the SVI default, cosine).
        callbacks: ``fn(bnns, epoch, history)`` after each epoch, the models written back.
        init, map_epochs: as in :meth:`bnn_pyro.VariationalBNN.fit`: with ``init="map"`` each
            member runs its own MAP phase (:func:`bnn_pyro.methods.vi.map_init.map_phase`, one
            member at a time, on its own minibatch order) before the stacked SVI.
        elbo, num_particles: ``"trace"`` (one particle) or ``"alpha"`` (the black-box alpha
            energy, :class:`~bnn_pyro.methods.vi.stacked_alpha.StackedAlphaVI`), as in ``fit``;
            ``None``: the members' own (their ``elbo=``, one for all).

    Returns:
        A :class:`~bnn_pyro.training.History`: ``loss`` (the members' mean) and ``member_loss``.

    Example:
        >>> import bnn_pyro as bp
        >>> X = torch.randn(64, 2); y = X.sum(-1, keepdim=True)
        >>> bnns = [bp.VariationalBNN(bp.nn.mlp(2, [8], 1), bp.Gaussian(0.1)) for _ in range(3)]
        >>> history = fit_stacked(bnns, X, y, seeds=[0, 1, 2], epochs=2, progress=False)
        >>> len(history["member_loss"][-1])
        3
    """
    X, y = as_tensor("X", X, min_dim=2), as_tensor("y", y)
    if not bnns:
        raise ValueError("fit_stacked needs at least one model")
    stacked_fit = _stacked_fit_of(type(bnns[0]))
    options: dict[str, Any] = dict(
        seeds=seeds, epochs=epochs, batch_size=batch_size, lr=lr, optimizer=optimizer,
        lr_schedule=lr_schedule, progress=progress,
    )  # fmt: skip
    given = dict(
        weight_decay=weight_decay, kl_weight=kl_weight, callbacks=callbacks, init=init,
        map_epochs=map_epochs, elbo=elbo, num_particles=num_particles,
    )  # fmt: skip
    takes = inspect.signature(stacked_fit).parameters
    unused = [k for k, v in given.items() if k not in takes and not _is_default(k, v)]
    if unused:
        verb = "does" if len(unused) == 1 else "do"
        raise ValueError(f"{' and '.join(unused)} {verb} not apply to {type(bnns[0]).__name__}")
    return stacked_fit(bnns, X, y, **options, **{k: v for k, v in given.items() if k in takes})


def _is_default(name: str, value: Any) -> bool:
    """Whether option ``name`` is left at :func:`fit_stacked`'s default (then a method's stacked
    fit that lacks it need not take it)."""
    if name == "callbacks":
        return not list(value)
    default = inspect.signature(fit_stacked).parameters[name].default
    return value is default or (not callable(value) and value == default)


def _stacked_fit_of(cls: type) -> Callable[..., History]:
    """The stacked fit that ``cls``'s spec declares (a clear error when none does)."""
    for spec in method_specs().values():
        if spec.stacked_fit is not None and spec.cls in (cls, f"{cls.__module__}:{cls.__name__}"):
            return load_object(spec.stacked_fit)
    stacked = sorted({s.name for s in method_specs().values() if s.stacked_fit is not None})
    raise ValueError(
        f"fit_stacked does not train {cls.__name__} models (the class itself); the methods "
        f"that train stacked: {stacked}"
    )
