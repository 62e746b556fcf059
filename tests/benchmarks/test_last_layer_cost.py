"""``benchmarks/last_layer_cost.py``: its rows, ratios and verdicts (figures of a one-epoch run
on a tiny problem: the script's arithmetic, not its timings)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def cost():
    sys.path.insert(0, str(BENCHMARKS))  # the script imports _report from its own folder
    try:
        import last_layer_cost
    finally:
        sys.path.remove(str(BENCHMARKS))
    return last_layer_cost


def test_a_tiny_run_has_a_row_per_contender_with_its_ratios(cost):
    problem = cost.Problem("tiny classifier", 4, 8, 3, 40, 20, 1)
    rows = cost.measure(problem, repeats=1)
    peers = list(cost.PEER_ROWS) if cost._has_vbll() else []
    assert [r["method"] for r in rows] == ["plain net", *cost.TARGETED, *peers]
    base = rows[0]
    for r in rows:
        assert r["fit"] > 0 and r["predict"] > 0
        assert r["fit_ratio"] == pytest.approx(r["fit"] / base["fit"])
        assert r["predict_ratio"] == pytest.approx(r["predict"] / base["predict"])
    table = cost.table({problem.name: rows})
    assert table.count("| tiny classifier |") == 4 + len(peers)


def test_a_regression_adds_dkl_beside_the_exact_gp(cost):
    problem = cost.Problem("tiny regression", 3, 8, 1, 80, 20, 1)
    rows = cost.measure(problem, repeats=1)
    names = [r["method"] for r in rows]
    peers = list(cost.PEER_ROWS) if cost._has_vbll() else []
    assert names == ["plain net", *cost.TARGETED, *cost.GP_ROWS, *peers, cost.GP]
    lines = cost.verdicts({problem.name: rows})
    gp, dkl = rows[-1], rows[names.index("dkl")]
    assert f"- dkl (tiny regression): fit {dkl['fit'] / gp['fit']:.2f}x and predict" in "\n".join(
        lines
    )


def test_the_exact_gp_row_trains_its_kernel(cost):
    """The GP row is a real fit: its marginal likelihood per row goes down."""
    import torch

    from bnn_pyro.nn.param_scope import ParamScope

    problem = cost.Problem("tiny regression", 3, 8, 1, 64, 16, 200)
    x, y, _ = problem.data()
    start = cost.build_gp(3, 1, kernel="rbf", inducing_points=None, lengthscale=1.0,
                          variance=1.0, jitter=1e-6)  # fmt: skip
    trained = cost.gp_fit(problem, x, y)
    with torch.no_grad():  # a store per GP: two in one store would share parameters by name
        with ParamScope():
            before = float(cost.gp_objective(start, x, y.unsqueeze(0), len(x)))
        with ParamScope():
            after = float(cost.gp_objective(trained, x, y.unsqueeze(0), len(x)))
    assert after < before - 0.05
    mean, var = cost.gp_predict(trained, x[:5])
    assert mean.shape == var.shape == (1, 5)


def test_the_verdict_gives_each_problem_s_ratio_and_counts_those_that_meet_the_target(cost):
    def rows(vbll: float, diagonal: float, sngp: float) -> list[dict]:
        ratios = (vbll, diagonal, sngp)
        return [{"method": m, "fit_ratio": r} for m, r in zip(cost.TARGETED, ratios, strict=True)]

    lines = cost.verdicts({"a": rows(1.1, 1.0, 1.3), "b": rows(1.31, 2.0, 0.9)})
    assert lines == [
        "- vbll: fit 1.10x / 1.31x the plain net's (target 1.3x: met on 1 of 2)",
        "- vbll, diagonal covariance: fit 1.00x / 2.00x the plain net's (target 1.3x: met on 1 "
        "of 2)",
        "- sngp: fit 1.30x / 0.90x the plain net's (target 1.3x: met on 2 of 2)",
    ]


def test_the_plain_fit_trains(cost):
    """The hand-written loop lowers the loss it trains on (it is a real baseline)."""
    import torch
    import torch.nn.functional as F

    problem = cost.Problem("tiny regression", 3, 16, 1, 64, 16, 30)
    x, y, _ = problem.data()
    torch.manual_seed(0)
    before = F.mse_loss(problem.net()(x)[:, 0], y)
    net = cost.plain_fit(problem, x, y)
    assert float(F.mse_loss(net(x)[:, 0], y)) < 0.5 * float(before)


def test_the_peer_verdict_reads_each_vbll_row_against_the_package_s_own(cost):
    rows = [
        {"method": "vbll", "fit": 3.0, "fit_ratio": 3.0},
        {"method": "vbll, diagonal covariance", "fit": 1.0, "fit_ratio": 1.0},
        {"method": "vbll package, its own loop", "fit": 4.0, "fit_ratio": 4.0},
        {"method": "vbll package, its own loop, diagonal", "fit": 2.0, "fit_ratio": 2.0},
    ]
    lines = cost.verdicts({"a": rows})
    assert (
        "- vbll package, its own loop: fit 4.00x the plain net's; vbll's fit 0.75x its (no "
        "target)" in lines
    )
    assert (
        "- vbll package, its own loop, diagonal: fit 2.00x the plain net's; vbll, diagonal "
        "covariance's fit 0.50x its (no target)" in lines
    )


def test_the_peer_row_trains_the_vbll_package_s_layer(cost):
    """The ``vbll`` row is a real fit of the package's own layer: its loss goes down."""
    pytest.importorskip("vbll")
    import torch

    problem = cost.Problem("tiny classifier", 4, 16, 3, 64, 16, 40)
    x, y, _ = problem.data()
    torch.manual_seed(0)
    model = cost.peer_fit(problem, x, y, "dense")
    fresh = cost.peer_fit(cost.Problem(**{**problem.__dict__, "epochs": 0}), x, y, "dense")
    with torch.no_grad():
        assert float(model(x).train_loss_fn(y)) < float(fresh(x).train_loss_fn(y)) - 0.1
