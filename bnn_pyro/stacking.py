"""``fit_stacked``: K models of one method trained as one, each to what its own ``fit`` gives.

A short dispatcher to the stacked fit that the models' method declares in its
:class:`~bnn_pyro.spec.MethodSpec` (``stacked_fit``): the VI models'
(:func:`~bnn_pyro.methods.vi.stacked_fit.fit_stacked_vi`), the classic methods' (MC dropout,
SWAG, Laplace, VBLL, SNGP: :func:`~bnn_pyro.methods.classic.stacked.fit_classic_stacked`) and
SG-MCMC's chains (:func:`~bnn_pyro.methods.sgmcmc.stacked.fit_stacked_sgmcmc`). An option that the
method's stacked fit does not take is refused by name.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch

from bnn_pyro._checks import as_tensor
from bnn_pyro._kept import kept_on_error
from bnn_pyro.registry import method_specs
from bnn_pyro.spec import MethodSpec, load_object
from bnn_pyro.threads import uses_threads
from bnn_pyro.training.callbacks import History

__all__ = ["fit_stacked", "trains_stacked", "why_not_stacked"]


@uses_threads
def fit_stacked(
    bnns: Sequence[Any],
    X: torch.Tensor,
    y: torch.Tensor,
    *,
    seeds: Sequence[int],
    **options: Any,
) -> History:
    """Train K ``VariationalBNN`` (or K ``MCDropout``, ``SWAG``, ``LaplaceApproximation``,
    ``VBLL``, ``SNGP`` or ``SGMCMC``) models as one; each ends as its own ``fit(X_k, y_k, seed=seeds[k], ...)`` would (up to
    float rounding).

    Args:
        bnns: K models of one architecture (for VI, see
            :func:`~bnn_pyro.methods.vi.stacked_support.why_not_stacked_vi`).
        X: ``(N, D)`` shared by all, or ``(K, N, D)``: member k's own rows (a tensor, numpy
            array or nested list).
        y: ``(N,)``/``(N, O)`` targets, or ``(K, N)``/``(K, N, O)``.
        seeds: K seeds, each as ``fit(seed=)``.
        **options: the options of the method's own stacked fit, each as in its ``fit``, and
            with the same defaults, so that each member ends as its own ``fit`` with the same
            arguments would:

            - VI (:func:`~bnn_pyro.methods.vi.stacked_fit.fit_stacked_vi`): ``epochs``,
              ``batch_size``, ``lr``, ``optimizer`` (an elementwise one), ``kl_weight`` (a
              float or ``fn(epoch)``, e.g.
              :func:`~bnn_pyro.training.callbacks.linear_annealing`), ``lr_schedule``,
              ``average``, ``shuffle``, ``callbacks`` (``fn(models, epoch, history)`` after
              each epoch, the models written back), ``validation_data`` (``(Nv, D)`` shared or
              ``(K, Nv, D)``, adding ``val_nll`` and ``member_val_nll``), ``resume``,
              ``progress``, ``init``/``map_epochs`` (with ``init="map"`` each member runs its
              own MAP phase first), ``elbo``/``num_particles`` (``"trace"``, ``"stl"`` or
              ``"meanfield"`` with one particle, or ``"alpha"`` for nets without dropout: the
              objectives of :class:`~bnn_pyro.methods.vi.objective.VIObjective`), ``compile``
              (weight-space draws: no local reparameterization, no dropout);
            - MC dropout, SWAG, Laplace, VBLL, SNGP
              (:func:`~bnn_pyro.methods.classic.stacked.fit_classic_stacked`): ``epochs``,
              ``batch_size``, ``lr``, ``weight_decay``, ``optimizer``, ``lr_schedule``,
              ``average``, ``callbacks`` (``fn(models, epoch, history)``),
              ``validation_data`` (``(Nv, D)`` shared or ``(K, Nv, D)``, adding ``val_loss``
              and ``member_val_loss``), ``resume``, ``compile``, ``progress``;
            - SG-MCMC chains (:func:`~bnn_pyro.methods.sgmcmc.stacked.fit_stacked_sgmcmc`):
              ``epochs``, ``batch_size``, ``lr``, ``shuffle``, ``callbacks``,
              ``validation_data`` (adding ``val_nll`` and ``member_val_nll``), ``progress``
              (the models share their sampler settings).

    Returns:
        A :class:`~bnn_pyro.training.History`: ``loss`` (the members' mean) and ``member_loss``.

    Raises:
        ValueError: no models, a method that does not train stacked, or an option that its
            stacked fit does not take (named).
        TrainingDivergedError: a member's loss is not finite (the members named). Like any
            ``Exception`` raised inside, it leaves every model as it was before the call
            (unfitted after a failed first fit, its earlier fit after a failed refit), as
            each model's own ``fit`` does.

    Example:
        >>> import bnn_pyro as bp
        >>> X = torch.randn(64, 2); y = X.sum(-1, keepdim=True)
        >>> bnns = [bp.VariationalBNN(bp.nn.mlp(2, [8], 1), bp.Gaussian(0.1)) for _ in range(3)]
        >>> history = fit_stacked(bnns, X, y, seeds=[0, 1, 2], epochs=2, progress=False)
        >>> len(history["member_loss"][-1])
        3
        >>> drops = [bp.MCDropout(bp.nn.mlp(2, [8], 1, dropout=0.1)) for _ in range(2)]
        >>> fit_stacked(drops, X, y, seeds=[0, 1], kl_weight=0.5)
        Traceback (most recent call last):
          ...
        ValueError: kl_weight does not apply to MCDropout models; their stacked fit takes average, batch_size, callbacks, compile, epochs, lr, lr_schedule, optimizer, progress, resume, validation_data, weight_decay
    """  # noqa: E501
    X, y = as_tensor("X", X, min_dim=2), as_tensor("y", y)
    if not bnns:
        raise ValueError("fit_stacked needs at least one model")
    stacked_fit = _stacked_fit_of(type(bnns[0]))
    takes = sorted(
        name
        for name, p in inspect.signature(stacked_fit).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and name != "seeds"
    )
    unused = [k for k in options if k not in takes]
    if unused:
        verb = "does" if len(unused) == 1 else "do"
        raise ValueError(
            f"{' and '.join(unused)} {verb} not apply to {type(bnns[0]).__name__} models; "
            f"their stacked fit takes {', '.join(takes)}"
        )
    # a stacked fit that raises leaves every model as it was; it trains under no_grad() too
    with kept_on_error(*bnns), torch.enable_grad():
        return stacked_fit(bnns, X, y, seeds=seeds, **options)


def trains_stacked(cls: type) -> bool:
    """Whether :func:`fit_stacked` trains models of class ``cls`` (its spec names a stacked
    fit).

    Example:
        >>> import bnn_pyro as bp
        >>> trains_stacked(bp.MCDropout), trains_stacked(bp.HiddenLayerBNN)
        (True, False)
        >>> trains_stacked(bp.MCDropout(bp.nn.mlp(1, [4], 1, dropout=0.1)))
        Traceback (most recent call last):
          ...
        TypeError: cls must be a method class such as bp.MCDropout, got an instance of MCDropout
    """
    if not isinstance(cls, type):
        raise TypeError(
            "cls must be a method class such as bp.MCDropout, got an instance of "
            f"{type(cls).__name__}"
        )
    return any(spec.stacked_fit is not None for spec in _specs_of(cls))


def _specs_of(cls: type) -> list[MethodSpec]:
    """The registry's specs of class ``cls`` (given as the class or as ``"module:Class"``)."""
    names = (cls, f"{cls.__module__}:{cls.__name__}")
    return [spec for spec in method_specs().values() if spec.cls in names]


def why_not_stacked(models: Sequence[Any]) -> str | None:
    """Why :func:`fit_stacked` would refuse to train ``models`` as one, before any work, or
    ``None`` when it takes them: for a caller (cross-validation) that then fits them one by one.

    Args:
        models: K built models of one method.

    Returns:
        The reason (one line), or ``None``.

    Example:
        >>> import bnn_pyro as bp
        >>> why_not_stacked([bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1))] * 2)
        >>> net = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.LayerNorm(4),
        ...                           torch.nn.Linear(4, 1))
        >>> why_not_stacked([bp.VariationalBNN(net, bp.Gaussian(0.1))])[:40]
        'the nets hold point-estimate parameters '
        >>> why_not_stacked([bp.make("hidden_layer", bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1))])
        'fit_stacked does not train HiddenLayerBNN models'
        >>> why_not_stacked([])
        Traceback (most recent call last):
          ...
        ValueError: why_not_stacked needs at least one model
    """
    if not models:
        raise ValueError("why_not_stacked needs at least one model")
    cls = type(models[0])
    if not trains_stacked(cls):
        return f"fit_stacked does not train {cls.__name__} models"
    for spec in _specs_of(cls):
        if spec.why_not_stacked is not None:
            return load_object(spec.why_not_stacked)(models)
    return None


def _stacked_fit_of(cls: type) -> Callable[..., History]:
    """The stacked fit that ``cls``'s spec declares (a clear error when none does)."""
    specs = _specs_of(cls)
    for spec in specs:
        if spec.stacked_fit is not None:
            return load_object(spec.stacked_fit)
    why = next((spec.unstacked for spec in specs if spec.unstacked), None)
    if why is not None:
        raise ValueError(f"fit_stacked does not train {cls.__name__} models: {why}")
    stacked = sorted({s.name for s in method_specs().values() if s.stacked_fit is not None})
    raise ValueError(
        f"fit_stacked does not train {cls.__name__} models (the class itself); the methods "
        f"that train stacked: {stacked}"
    )
