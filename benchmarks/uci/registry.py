"""The benchmarked methods, keyed by the library's registry names (:data:`bnn_pyro.METHODS`).

The harness adds what a benchmark needs to a library method (a grid, a label, a cost); it does
not name methods of its own: importing this module fails if a name here is not one of
``bnn_pyro.METHODS``. Benchmarked: ``vi``, ``lrt``, ``bb_alpha``, ``dropout``, ``ensemble``,
``swag``, ``laplace``, ``sghmc``, ``csghmc``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import bnn_pyro
from benchmarks.uci import baselines, baselines_stacked, sgmcmc, variational
from benchmarks.uci.generic import generic_spec
from benchmarks.uci.last_layer import last_layer_specs
from benchmarks.uci.method import MethodSpec

__all__ = ["DEV_METHODS", "METHODS", "available_methods", "get_method", "runnable_methods"]


def _keyed(specs: Iterable[MethodSpec]) -> dict[str, MethodSpec]:
    """``{spec.name: spec}``; raises ``RuntimeError`` on a name ``bnn_pyro.METHODS`` lacks."""
    keyed = {spec.name: spec for spec in specs}
    unknown = [name for name in keyed if name not in bnn_pyro.METHODS]
    if unknown:
        raise RuntimeError(
            f"benchmark methods {unknown} are not in bnn_pyro.METHODS {list(bnn_pyro.METHODS)}: "
            "the harness benchmarks the library's methods under the library's names"
        )
    return keyed


#: Every benchmarked method, in table order, keyed by its ``bnn_pyro.METHODS`` name.
METHODS: dict[str, MethodSpec] = _keyed(
    [
        MethodSpec(
            name="vi",
            label="VI (VariationalBNN)",
            description=(
                "mean-field VariationalBNN, Trace_ELBO, noise learned per input or fixed, "
                "predictive noise factor chosen on validation, Adam, batch 32"
            ),
            grid=variational.vi_grid,
            train=variational.vi_train,
            checkpoints=variational.vi_checkpoints,
            cost=30.0,
            train_stacked=variational.vi_train_stacked,
        ),
        MethodSpec(
            name="lrt",
            label="VI, local reparam.",
            description="vi with VariationalBNN(local_reparameterization=True)",
            grid=variational.vi_grid,
            train=functools.partial(variational.vi_train, method="lrt"),
            checkpoints=variational.vi_checkpoints,
            cost=40.0,
            train_stacked=functools.partial(variational.vi_train_stacked, method="lrt"),
        ),
        MethodSpec(
            name="bb_alpha",
            label="BB-α (VariationalBNN)",
            description=(
                "vi trained on the black-box alpha energy, alpha 0.5, 10 particles "
                "(make('bb_alpha')); the same grid, noise and factors"
            ),
            grid=variational.bb_alpha_grid,
            train=functools.partial(variational.vi_train, method="bb_alpha"),
            checkpoints=variational.vi_checkpoints,
            cost=75.0,
            train_stacked=functools.partial(variational.vi_train_stacked, method="bb_alpha"),
        ),
        MethodSpec(
            name="dropout",
            label="MC dropout",
            description=(
                "Gal's MC dropout: grid over dropout rate x tau x epochs "
                "(10x, 50x the reference n_epochs), batch 128"
            ),
            grid=baselines.dropout_grid,
            train=baselines.dropout_train,
            cost=5.0,
            train_stacked=baselines_stacked.dropout_train_stacked,
        ),
        MethodSpec(
            name="ensemble",
            label="Deep ensemble",
            description="5 members, Gaussian-NLL heads, Adam, batch 100, 40 epochs",
            grid=baselines.ensemble_grid,
            train=baselines.ensemble_train,
            cost=2.0,
        ),
        MethodSpec(
            name="swag",
            label="SWAG",
            description="SGD momentum 0.9, 200 epochs, snapshots over the second half, rank 20",
            grid=baselines.swag_grid,
            train=functools.partial(baselines.swag_laplace_train, method="swag"),
            cost=4.0,
            train_stacked=functools.partial(
                baselines_stacked.swag_laplace_train_stacked, method="swag"
            ),
        ),
        MethodSpec(
            name="laplace",
            label="Laplace (GGN, GLM)",
            description="MAP (Adam, weight decay), full GGN Laplace, GLM predictive, evidence",
            grid=baselines.laplace_grid,
            train=functools.partial(baselines.swag_laplace_train, method="laplace"),
            cost=3.0,
            train_stacked=functools.partial(
                baselines_stacked.swag_laplace_train_stacked, method="laplace"
            ),
        ),
        MethodSpec(
            name="sghmc",
            label="SGHMC",
            description=(
                "scale-adapted SGHMC, learned noise, ~10,000 steps of 32 rows (a quarter burn-in, "
                "up to 1,000 samples kept), grid over lr x weight prior"
            ),
            grid=sgmcmc.sgmcmc_grid,
            train=functools.partial(sgmcmc.sgmcmc_train, method="sghmc"),
            cost=10.0,
            train_stacked=functools.partial(sgmcmc.sgmcmc_train_stacked, method="sghmc"),
        ),
        MethodSpec(
            name="csghmc",
            label="cyclical SGHMC",
            description="sghmc with the cyclical step size (4 cycles, 80% exploration each)",
            grid=sgmcmc.sgmcmc_grid,
            train=functools.partial(sgmcmc.sgmcmc_train, method="csghmc"),
            cost=10.0,
            train_stacked=functools.partial(sgmcmc.sgmcmc_train_stacked, method="csghmc"),
        ),
    ]
)


#: The tuned rows run on the dev sets outside the committed table (``all``), reported by
#: :mod:`benchmarks.uci.dev_report`: the last-layer and distance-aware heads.
DEV_METHODS: dict[str, MethodSpec] = _keyed(last_layer_specs())

#: The untuned rows :func:`get_method` made for library methods without a tuned one.
_UNTUNED: dict[str, MethodSpec] = {}


def available_methods() -> list[str]:
    """Names of the benchmarked methods, in table order.

    Example:
        >>> available_methods()[:1], "dropout" in available_methods()
        (['vi'], True)
        >>> import bnn_pyro
        >>> set(available_methods()) <= set(bnn_pyro.METHODS)
        True
    """
    return list(METHODS)


def runnable_methods() -> list[str]:
    """Every name the harness runs: the tuned rows (:func:`available_methods`, what ``all``
    means), then every other :data:`bnn_pyro.METHODS` name, run untuned
    (:mod:`benchmarks.uci.generic`).

    Example:
        >>> runnable_methods()[9:]  # after the tuned rows, the library's other methods
        ['hidden_layer', 'vbll', 'sngp', 'dkl', 'vbnn', 'sgld']
    """
    tuned = available_methods()
    return [*tuned, *(name for name in bnn_pyro.METHODS if name not in tuned)]


def get_method(name: str) -> MethodSpec:
    """The :class:`MethodSpec` called ``name``: a tuned row (of the committed table, or of
    :data:`DEV_METHODS`), or for any other library method the untuned row of
    :mod:`benchmarks.uci.generic`.

    Raises:
        TypeError: if ``name`` is not a str.
        ValueError: if there is no such method (the message lists the available ones).

    Example:
        >>> get_method("dropout").label, get_method("vbll").label, get_method("vbnn").label
        ('MC dropout', 'VBLL', 'vbnn (untuned)')
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    if name in METHODS:
        return METHODS[name]
    if name in DEV_METHODS:
        return DEV_METHODS[name]
    if name not in bnn_pyro.METHODS:
        raise ValueError(f"unknown method {name!r}; available: {runnable_methods()}")
    if name not in _UNTUNED:
        _UNTUNED[name] = generic_spec(name)
    return _UNTUNED[name]
