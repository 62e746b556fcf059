"""Reliability: the methods' ``fit`` refuses bad arguments up front, names the argument and
leaves the method unchanged (``assert_refused`` with ``obj=method``)."""

from __future__ import annotations

import pytest

import bnn_pyro as bp
from bnn_pyro.methods import LaplaceApproximation, MCDropout
from tests.reliability._nets import LIK, D, _data, _mlp
from tests.reliability.refusal import assert_refused

METHODS = {
    "VariationalBNN": lambda: bp.VariationalBNN(bp.nn.mlp(D, [8], 1), LIK),
    "MCDropout": lambda: MCDropout(_mlp(0.1), likelihood="regression"),
    "Laplace": lambda: LaplaceApproximation(_mlp(), likelihood="regression"),
}

X, Y = _data()
_nan_y = Y.clone()
_nan_y[3] = float("nan")

# name -> (fit kwargs overriding the good call, exception, the argument named)
BAD_ARGS = {
    "epochs float": ({"epochs": 1.5}, (TypeError, ValueError), "epochs"),
    "epochs negative": ({"epochs": -1}, ValueError, "epochs"),
    "epochs str": ({"epochs": "10"}, TypeError, "epochs"),
    "batch_size zero": ({"batch_size": 0}, ValueError, "batch_size"),
    "lr negative": ({"lr": -0.1}, ValueError, "lr"),
    "lr nan": ({"lr": float("nan")}, ValueError, "lr"),
    "seed float": ({"seed": 0.5}, (TypeError, ValueError), "seed"),
    "seed negative": ({"seed": -3}, ValueError, "seed"),
    "y nan": ({"y": _nan_y}, ValueError, "y"),
    "x/y length mismatch": ({"y": Y[:-2]}, ValueError, "y"),
    "validation not a pair": ({"validation_data": X}, (TypeError, ValueError), "validation_data"),
    "callbacks not callable": ({"callbacks": [42]}, TypeError, "callbacks"),
}


@pytest.mark.parametrize("bad", list(BAD_ARGS), ids=list(BAD_ARGS))
@pytest.mark.parametrize("method", list(METHODS), ids=list(METHODS))
def test_bad_fit_argument_refused(method: str, bad: str) -> None:
    model = METHODS[method]()
    kwargs, exc, name = BAD_ARGS[bad]
    call = {"y": Y, "epochs": 2, "progress": False, **kwargs}
    y = call.pop("y")
    assert_refused(lambda: model.fit(X, y, **call), exc, name, obj=model)


def test_x_with_inf_refused() -> None:
    model = METHODS["MCDropout"]()
    x = X.clone()
    x[0, 0] = float("inf")
    assert_refused(lambda: model.fit(x, Y, epochs=1, progress=False), ValueError, "x", obj=model)
