"""The benchmarked methods by name: ``vi``, ``lrt`` (when available), ``dropout``, ``ensemble``,
``swag``, ``laplace``."""

from __future__ import annotations

from benchmarks.uci import baselines, variational
from benchmarks.uci.method import MethodSpec

__all__ = ["METHODS", "available_methods", "get_method"]


def _specs() -> dict[str, MethodSpec]:
    specs = [
        MethodSpec(
            name="vi",
            label="VI (VariationalBNN)",
            description="mean-field VariationalBNN, Trace_ELBO, learned noise, Adam, batch 32",
            grid=variational.vi_grid,
            train=variational.vi_train,
            checkpoints=variational.vi_checkpoints,
            cost=30.0,
        ),
        MethodSpec(
            name="lrt",
            label="VI, local reparam.",
            description="vi with VariationalBNN(local_reparameterization=True)",
            grid=variational.vi_grid,
            train=variational.lrt_train,
            checkpoints=variational.vi_checkpoints,
            cost=40.0,
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
            train=baselines.swag_train,
            cost=4.0,
        ),
        MethodSpec(
            name="laplace",
            label="Laplace (GGN, GLM)",
            description="MAP (Adam, weight decay), full GGN Laplace, GLM predictive, evidence",
            grid=baselines.laplace_grid,
            train=baselines.laplace_train,
            cost=3.0,
        ),
    ]
    return {spec.name: spec for spec in specs if spec.name != "lrt" or variational.LRT_AVAILABLE}


#: Every method this installation can run, in table order (``lrt`` only when
#: ``VariationalBNN`` has the ``local_reparameterization`` option).
METHODS: dict[str, MethodSpec] = _specs()


def available_methods() -> list[str]:
    """Names of the methods this installation can run, in table order.

    Example:
        >>> available_methods()[:1], "dropout" in available_methods()
        (['vi'], True)
    """
    return list(METHODS)


def get_method(name: str) -> MethodSpec:
    """The :class:`MethodSpec` called ``name``.

    Raises:
        TypeError: if ``name`` is not a str.
        ValueError: if there is no such method (the message lists the available ones).

    Example:
        >>> get_method("dropout").label
        'MC dropout'
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    if name not in METHODS:
        hint = (
            " (VariationalBNN has no local_reparameterization option yet)" if name == "lrt" else ""
        )
        raise ValueError(f"unknown method {name!r}{hint}; available: {available_methods()}")
    return METHODS[name]
