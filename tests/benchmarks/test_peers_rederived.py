"""Figures of the peer tables re-derived by re-running the benchmark scripts' own contenders
with the committed settings (one thread, the full sizes).

* ``benchmarks/results/sgmcmc_peers.md``: the row of bnn_pyro's SGHMC (the row the target is
  about) and the row of torch-uncertainty's SGLD on the summed loss at its default noise factor,
  5,000 epochs each; their mean error, covariance error and sampled / exact variance compared
  at their printed precision (three significant digits, one decimal of a percent). Every
  contender starts from the same net and minibatch order (``sgmcmc_peer_runs``) and its chain
  is seeded, so a row reproduces (here: every figure equal to the committed one). The
  scaling-check figures (``2.0e-08``) are float32 round-off and differ between machines
  (``4.9e-09`` here), so they are not compared; the times are wall-clock.
* ``benchmarks/results/sgmcmc_defaults.md``: sgld's row on the problem of condition number
  107 (its dense preconditioner) and two rows of the exact control, re-run with the script's
  seeds: every figure but the seconds at its printed precision.
* ``benchmarks/results/laplace_kron.md``: the log-evidence of bnn_pyro's KFAC posterior and of
  laplace-torch's with either backend, on the script's own net, data and prior precision
  (two decimals). The evidence and variance gaps are float32 round-off (1e-7 to 2e-5), and the
  GLM variance costs laplace-torch 12 s: not compared.

The full list of what CI re-derives is in ``test_results_rederived.py``'s docstring.
"""

from __future__ import annotations

import importlib.util
import warnings

import pytest
import torch

from tests.benchmarks.test_results_rederived import (
    RESULTS,
    assert_printed,
    load_script,
    tables,
)

needs_torch_uncertainty = pytest.mark.skipif(
    importlib.util.find_spec("torch_uncertainty") is None, reason="torch-uncertainty absent"
)


@pytest.mark.parametrize(
    ("contender", "how"),
    [
        (
            "bnn_pyro sghmc",
            "defaults: the whole data set per step (5,000 steps), step measured on the posterior",
        ),  # ~15 s
        pytest.param(  # ~5 s
            "torch-uncertainty SGLD",
            "summed loss −log p(θ, D), weight_decay 1; lr 1e-3; noise_factor 1e-2 (default)",
            marks=needs_torch_uncertainty,
        ),
    ],
)
def test_an_sgmcmc_row_rerun_gives_the_committed_figures(monkeypatch, contender, how):
    peers = load_script("sgmcmc_peers", monkeypatch)
    runs = load_script("sgmcmc_peer_runs", monkeypatch)
    committed = [
        r for r in tables((RESULTS / "sgmcmc_peers.md").read_text())[0] if r[:2] == [contender, how]
    ]
    assert len(committed) == 1, (contender, how)
    _, _, mean_error, cov_error, variance, _, verdict = committed[0]
    with warnings.catch_warnings():  # tensordict's notes on posteriors' state classes
        warnings.simplefilter("ignore", FutureWarning)
        sampler = next(s for name, h, s in peers.contenders() if (name, h) == (contender, how))
        X, y = runs.data()
        mean, cov = runs.exact_posterior(X, y)
        m, c, v = peers.errors(sampler(X, y, peers.EPOCHS), mean, cov)
    assert_printed(mean_error, m, what=f"{contender}: mean error")
    assert_printed(cov_error, c, what=f"{contender}: covariance error")
    assert_printed(variance, v, what=f"{contender}: variance ratio")
    met = m < peers.MEAN_TARGET and c < peers.COV_TARGET
    assert verdict == ("met" if met else "missed")


def test_laplace_kron_log_evidence_of_every_contender(monkeypatch):
    """~5 s: the three contenders' KFAC fits on the script's net and data, and their
    log-evidence at the page's two decimals."""
    pytest.importorskip("laplace", reason="laplace-torch, the peer: pip install -e '.[ood]'")
    module = load_script("laplace_kron", monkeypatch)
    committed = {r[0]: r[3] for r in tables((RESULTS / "laplace_kron.md").read_text())[0][1:]}
    with warnings.catch_warnings():  # laplace-torch's and its backends' deprecation notes
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        net, loader, _ = module.problem("full")
        fits = module.contenders(net, loader)
        assert sorted(fits) == sorted(committed)
        for name, fit in fits.items():
            assert_printed(committed[name], module.evidence(fit()), what=name)


@pytest.mark.parametrize(
    ("sampler", "index"),
    [("sgld", 4), ("exact", 4), ("exact", 9)],  # sgld ~13 s; an exact control row ~1 s
    ids=["sgld, condition number 107", "exact, condition number 107", "exact, 1,000 rows"],
)
def test_an_sgmcmc_defaults_row_rerun_gives_the_committed_figures(sampler, index):
    """A row of ``sgmcmc_defaults.md`` re-run as the script runs it (10,000 epochs, its seed
    for the problem, 2,000 exact-draw repetitions): the posterior's condition number, the
    measured step, the samples kept, the ESS, each error and its band, and the verdict."""
    from benchmarks.sgmcmc_defaults import FAMILY, MIN_ESS, SAMPLERS, exact_row, run

    order = [*SAMPLERS, "exact"]
    table = tables((RESULTS / "sgmcmc_defaults.md").read_text())[order.index(sampler)]
    problem = FAMILY[index]
    committed = [r for r in table if r[0] == problem.name]
    assert len(committed) == 1, problem.name
    cells = committed[0]
    torch.set_num_threads(1)  # the script's
    derived = exact_row(problem) if sampler == "exact" else run(problem, sampler, 10_000)
    what = f"{sampler}, {problem.name}"
    assert_printed(cells[1], derived.cond_precision, what=f"{what}: cond")
    if derived.step is None:
        assert cells[2] == ""
    else:
        assert_printed(cells[2], derived.step, what=f"{what}: lr")
    assert cells[3] == str(derived.kept)
    verdict = derived.verdict
    assert_printed(cells[4], verdict.ess, what=f"{what}: ESS")
    for cell, error, band in zip(cells[5:9], verdict.errors, verdict.bands, strict=True):
        printed_error, printed_band = cell.split(" / ")
        assert_printed(printed_error, float(error), what=f"{what}: error")
        assert_printed(printed_band, float(band), what=f"{what}: band")
    low = f"ESS < {MIN_ESS}"
    assert cells[9] == ("yes" if verdict.passed else "**no**" if not verdict.within else low)
