"""Published results on the standard UCI regression splits, to draw beside our own.

Each row is a dict in the results format of :func:`benchmarks.uci.plots.plot_uci_results`:
``{"dataset", "method", "metric", "mean", "stderr", "source"}`` with ``metric`` either
``"test_ll"`` (mean per-point test log-likelihood in original units, nats, higher is better)
or ``"rmse"`` (original units, lower is better). ``stderr`` is the standard error over the 20
splits as published, ``None`` where we do not carry it (all RMSE rows). Data sets are keyed by
their folder names. The deep-ensemble paper reports NLL; its rows hold the negated value.
"""

from __future__ import annotations

__all__ = ["PUBLISHED_UCI"]

_SOURCES = {
    "VI (PBP paper)": "Graves (2011) variational inference as reported by "
    "Hernandez-Lobato & Adams (2015), ICML, Table 1",
    "MC dropout (2016)": "Gal & Ghahramani (2016), ICML, Table 1",
    "MC dropout (2018 rerun)": "yaringal/DropoutUncertaintyExps README (2018 rerun)",
    "Deep ensembles (2017)": "Lakshminarayanan, Pritzel & Blundell (2017), NeurIPS, Table 1 "
    "(NLL, negated here)",
}
_METHODS = tuple(_SOURCES)

# (mean, stderr) of the test log-likelihood per method, in _METHODS order.
_TEST_LL = {
    "bostonHousing": ((-2.90, 0.07), (-2.46, 0.25), (-2.40, 0.04), (-2.41, 0.25)),
    "concrete": ((-3.39, 0.02), (-3.04, 0.09), (-2.93, 0.02), (-3.06, 0.18)),
    "energy": ((-2.39, 0.03), (-1.99, 0.09), (-1.21, 0.01), (-1.38, 0.22)),
    "yacht": ((-3.43, 0.16), (-1.55, 0.12), (-1.25, 0.01), (-1.18, 0.21)),
}
# Test RMSE per method, in _METHODS order (their standard errors are not carried here).
_RMSE = {
    "bostonHousing": (4.32, 2.97, 2.90, 3.28),
    "concrete": (7.19, 5.23, 4.82, 6.03),
    "energy": (2.65, 1.66, 0.54, 2.09),
    "yacht": (6.89, 1.11, 0.67, 1.58),
}


def _rows() -> tuple[dict[str, object], ...]:
    rows: list[dict[str, object]] = []
    for dataset, values in _TEST_LL.items():
        for method, (mean, stderr) in zip(_METHODS, values, strict=True):
            rows.append(
                {
                    "dataset": dataset,
                    "method": method,
                    "metric": "test_ll",
                    "mean": mean,
                    "stderr": stderr,
                    "source": _SOURCES[method],
                }
            )
    for dataset, values in _RMSE.items():
        for method, mean in zip(_METHODS, values, strict=True):
            rows.append(
                {
                    "dataset": dataset,
                    "method": method,
                    "metric": "rmse",
                    "mean": mean,
                    "stderr": None,
                    "source": _SOURCES[method],
                }
            )
    return tuple(rows)


PUBLISHED_UCI: tuple[dict[str, object], ...] = _rows()
"""Published UCI results, one dict per (dataset, method, metric); see the module docstring."""
