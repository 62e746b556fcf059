"""The ``laplace`` row of the UCI harness against its own variants and laplace-torch.

For each data set and split: the ``laplace`` row's configuration (MAP epochs and weight decay)
as chosen on that split's validation rows, the MAP net trained once with the harness's model
and seed (:func:`benchmarks.uci.baselines.swag_laplace_model`), then four posteriors on that one
net, scored on the test rows in original units (:func:`benchmarks.uci.protocol.score`):

* ``glm_full``: ours, full GGN, the GLM predictive in closed form: ``N(f(x, θ*), J Σ Jᵀ + σ²)``
  (:meth:`~bnn_pyro.methods.laplace.predictive.LaplacePredictive.glm_variance`), λ by the
  evidence, σ the maximum-likelihood std of the training residuals (what ``fit`` sets);
* ``nn_full``: the same posterior and λ, the net itself run on ``test_samples`` weight draws
  (``predictive="nn"``), a mixture scored as the harness scores samples;
* ``glm_kron``: ours, KFAC (``hessian_structure="kron"``), GLM in closed form, its own λ;
* ``laplace_torch``: ``Laplace(net, "regression", subset_of_weights="all",
  hessian_structure="full", sigma_noise=σ)`` with σ ours, ``fit`` on the training rows,
  ``optimize_prior_precision(method="marglik")`` (its defaults: Adam on log λ, 100 steps from
  1), ``la(x, pred_type="glm")`` → ``N(f_mu, f_var + σ²)``.

The configuration is read from the harness's results (``--choices``, default the committed
``benchmarks/results/uci/uci.json``) when that file holds the split's ``laplace`` record and its
config is the best of the record's validation search (``val_ll``, validation rows only) and a
config of :func:`~benchmarks.uci.baselines.laplace_grid`; otherwise (and with ``--quick``) the
harness's search is re-run (:func:`~benchmarks.uci.runner.select_hyperparameters`). Each record
also holds the harness's own score of the row (the sampled GLM predictive, its seed) beside the
committed one: equal numbers show the net is the harness's.

Times (one thread, ``time.perf_counter``, each contender once, in this process, after one
untimed warm-up of both libraries): ``fit`` (posterior on the trained net), ``prior`` (λ) and
``predict`` (the test rows). Summaries and targets: :mod:`benchmarks.uci.laplace_peer_report`.

Run: ``python -m benchmarks.uci.laplace_peer --data benchmarks/uci/data --out DIR``.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from benchmarks._report import repo_command
from benchmarks.uci.baselines import laplace_grid, prediction_seed, swag_laplace_model
from benchmarks.uci.cli import find_datasets
from benchmarks.uci.data import load_uci_split, uci_num_splits
from benchmarks.uci.laplace_peer_report import (
    CONTENDERS,
    closed_form_scores,
    peer_markdown,
    summarize_peer,
    versions,
)
from benchmarks.uci.protocol import RegressionData, prepare, score, seed_for
from benchmarks.uci.registry import get_method
from benchmarks.uci.results import write_json
from benchmarks.uci.runner import (
    BenchmarkSettings,
    config_key,
    dataset_info,
    ranked_records,
    select_hyperparameters,
)
from benchmarks.uci.selection import parse_names, parse_splits
from bnn_pyro.likelihoods import Gaussian
from bnn_pyro.methods.laplace.laplace import LaplaceApproximation
from bnn_pyro.registry import make

__all__ = [
    "CHOICES",
    "CONTENDERS",
    "chosen_config",
    "fit_laplace_torch",
    "fit_ours",
    "main",
    "run_split",
]

CHOICES = Path(__file__).resolve().parents[1] / "results" / "uci" / "uci.json"


def chosen_config(
    runs: Sequence[Mapping[str, Any]], dataset: str, split: int, grid: Sequence[Mapping[str, Any]]
) -> tuple[dict[str, Any], float, float] | None:
    """The ``laplace`` row's chosen ``(config, val_ll, test_ll)`` of ``dataset`` split ``split``
    in the harness's ``runs``, or None when they hold none that can be trusted: no record, a config
    that is not the best of its own validation search (a fallback), or one not in ``grid``.

    Example:
        >>> grid = [{"epochs": 1, "wd": 0.1}, {"epochs": 1, "wd": 0.2}]
        >>> records = [{"config": c, "val_ll": v} for c, v in zip(grid, (-2.0, -1.0))]
        >>> run = {"method": "laplace", "dataset": "d", "split": 0, "config": grid[1],
        ...        "records": records, "test_ll": -1.5}
        >>> chosen_config([run], "d", 0, grid), chosen_config([run], "d", 1, grid)
        (({'epochs': 1, 'wd': 0.2}, -1.0, -1.5), None)
        >>> chosen_config([{**run, "config": grid[0]}], "d", 0, grid) is None  # not the best
        True
    """
    for run in runs:
        if (run.get("method"), run.get("dataset"), run.get("split")) != ("laplace", dataset, split):
            continue
        ranked = ranked_records(run.get("records", []))
        if not ranked or ranked[0]["config"] != run["config"] or run["config"] not in grid:
            return None
        return dict(run["config"]), float(ranked[0]["val_ll"]), float(run["test_ll"])
    return None


def fit_ours(
    net: nn.Module, data: RegressionData, structure: str, num_samples: int
) -> tuple[LaplaceApproximation, dict[str, float]]:
    """Our Laplace (GGN, ``structure``) on a copy of the trained ``net``: ``fit`` on ``data``'s
    training rows (noise from their residuals), λ by the evidence, the GLM variance at the
    evaluation rows; the seconds of each step.

    Returns:
        ``(posterior, {"fit", "prior", "predict", "mean" (M, 1), "var" (M, 1)})``, the last two
        the predictive mean and the GLM variance of ``f`` at ``data.x_eval`` (normalised units).

    Example:
        >>> data = RegressionData(torch.randn(30, 2), torch.randn(30, 1), torch.randn(4, 2),
        ...                       torch.randn(4, 1), 1.0, 8)
        >>> la, out = fit_ours(nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 1)),
        ...                    data, "kron", 10)
        >>> la.hessian_structure, out["var"].shape, sorted(out)[:3]
        ('kron', torch.Size([4, 1]), ['fit', 'mean', 'predict'])
    """
    if structure not in ("full", "kron"):
        raise ValueError(f"structure must be 'full' or 'kron', got {structure!r}")
    began = time.perf_counter()
    la = make(
        "laplace",
        copy.deepcopy(net),
        Gaussian(scale="learned"),
        hessian="ggn",
        hessian_structure=structure,
        predictive="glm",
        num_samples=num_samples,
    )
    la.fit(data.x, data.y, epochs=0, progress=False)
    fitted = time.perf_counter()
    la.optimize_prior_precision()
    chosen = time.perf_counter()
    var = la.glm_variance(data.x_eval)
    with torch.no_grad():
        mean = la.model.eval()(data.x_eval)
    done = time.perf_counter()
    seconds = {"fit": fitted - began, "prior": chosen - fitted, "predict": done - chosen}
    return la, {**seconds, "mean": mean, "var": var}


def fit_laplace_torch(
    net: nn.Module, data: RegressionData, sigma: float, at: float | None = None
) -> tuple[Any, dict[str, Any]]:
    """laplace-torch's full-GGN Laplace on a copy of ``net`` with noise std ``sigma``: ``fit``
    on the training rows (batches of 256), λ by ``method="marglik"`` (its defaults), the GLM
    predictive at the evaluation rows; as :func:`fit_ours` returns, and with ``at``, untimed,
    ``"var_at"``: its GLM variance at λ = ``at`` instead of its own λ (then restored).

    Raises:
        ImportError: laplace-torch is not installed (``pip install ".[ood]"``).

    Example:
        >>> import pytest; _ = pytest.importorskip("laplace")
        >>> data = RegressionData(torch.randn(30, 2), torch.randn(30, 1), torch.randn(4, 2),
        ...                       torch.randn(4, 1), 1.0, 8)
        >>> la, out = fit_laplace_torch(nn.Linear(2, 1), data, 0.5)
        >>> out["mean"].shape, out["var"].shape, float(la.sigma_noise)
        (torch.Size([4, 1]), torch.Size([4, 1]), 0.5)
    """
    from laplace import Laplace

    began = time.perf_counter()
    la = Laplace(
        copy.deepcopy(net),
        "regression",
        subset_of_weights="all",
        hessian_structure="full",
        sigma_noise=float(sigma),
    )
    la.fit(DataLoader(TensorDataset(data.x, data.y), batch_size=256))
    fitted = time.perf_counter()
    la.optimize_prior_precision(method="marglik", pred_type="glm")
    chosen = time.perf_counter()
    mean, var = la(data.x_eval, pred_type="glm")
    done = time.perf_counter()
    seconds = {"fit": fitted - began, "prior": chosen - fitted, "predict": done - chosen}
    out = {"mean": mean.detach(), "var": var.detach().diagonal(dim1=-2, dim2=-1)}
    if at is not None:
        own, la.prior_precision = la.prior_precision, float(at)
        out["var_at"] = la(data.x_eval, pred_type="glm")[1].detach().diagonal(dim1=-2, dim2=-1)
        la.prior_precision = own
    return la, {**seconds, **out}


def run_split(
    folder: str | Path,
    split: int,
    settings: BenchmarkSettings,
    runs: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """One split: the chosen configuration, the MAP net, the four contenders' test scores.

    Args:
        folder: the data set folder.
        split: the split number.
        settings: ``quick`` (the quick grid, chosen afresh) and ``test_samples``.
        runs: the harness's records to read the chosen configuration from (see
            :func:`chosen_config`); none: the search is re-run.

    Returns:
        ``{dataset, split, config, config_source, val_ll, seed, n_train, n_test, noise_scale,
        map_seconds, harness_test_ll, committed_test_ll, contenders: {name: {test_ll, rmse,
        coverage_95, prior_precision, seconds: {fit, prior, predict, total}}}, threads}``;
        ``laplace_torch`` is missing where laplace-torch is not installed.

    Example:
        >>> import tempfile
        >>> from benchmarks.uci.writer import write_uci_folder
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     folder = write_uci_folder(Path(tmp) / "toy", torch.randn(40, 2), torch.randn(40))
        ...     record = run_split(folder, 0, BenchmarkSettings(quick=True, test_samples=20))
        >>> record["config_source"], record["n_test"], sorted(record["contenders"])[:2]
        ('search', 4, ['glm_full', 'glm_kron'])
    """
    if not isinstance(settings, BenchmarkSettings):
        raise TypeError(f"settings must be a BenchmarkSettings, got {type(settings).__name__}")
    spec = get_method("laplace")
    loaded = load_uci_split(folder, split)
    info = dataset_info(str(folder), loaded)
    found = (
        None if settings.quick else chosen_config(runs, loaded.dataset, split, laplace_grid(info))
    )
    source = "harness results" if found else "search"
    if found is None:
        config, records = select_hyperparameters(spec, loaded, info, settings)
        found = (config, next(r["val_ll"] for r in ranked_records(records)), None)
    config, val_ll, committed = found
    data = prepare(loaded)
    seed = seed_for(loaded.dataset, split, spec.name, "final", config_key(config))
    began = time.perf_counter()
    harness, fit_options = swag_laplace_model(
        spec.name, data.x.shape, data.hidden, seed, settings.test_samples
    )
    harness.fit(
        data.x,
        data.y,
        epochs=int(config["epochs"]),
        batch_size=int(config["batch_size"]),
        lr=float(config["lr"]),
        progress=False,
        seed=seed,
        weight_decay=float(config["weight_decay"]),
        **fit_options,
    )
    map_seconds = time.perf_counter() - began
    harness.optimize_prior_precision()  # the harness's own score of the row
    locs, scales = harness.predictive_gaussian(data.x_eval, seed=prediction_seed(seed))
    net = harness.model
    contenders: dict[str, dict[str, Any]] = {}
    for name, structure in (("glm_full", "full"), ("glm_kron", "kron")):
        la, out = fit_ours(net, data, structure, settings.test_samples)
        contenders[name] = {
            **closed_form_scores(out, float(la.noise_scale), data),
            "prior_precision": float(la.prior_precision),
        }
        if structure == "full":
            full = la
    sigma = float(full.noise_scale)
    full.predictive = "nn"  # the same posterior and λ, the net on each draw
    began = time.perf_counter()
    nn_locs, nn_scales = full.predictive_gaussian(
        data.x_eval, seed=prediction_seed(seed), num_samples=settings.test_samples
    )
    predict = time.perf_counter() - began
    seconds = dict(contenders["glm_full"]["seconds"], predict=predict)
    seconds["total"] = seconds["fit"] + seconds["prior"] + predict
    contenders["nn_full"] = {
        **score(nn_locs, nn_scales, data.y_eval, data.y_std),
        "prior_precision": float(full.prior_precision),
        "seconds": seconds,
    }
    try:
        theirs, out = fit_laplace_torch(net, data, sigma, at=full.prior_precision)
    except ImportError:
        pass
    else:
        contenders["laplace_torch"] = {
            **closed_form_scores(out, sigma, data),
            "prior_precision": float(theirs.prior_precision),
        }
        at_ours = closed_form_scores({**out, "var": out["var_at"], "prior": 0.0}, sigma, data)
        contenders["laplace_torch_at_our_lambda"] = {
            **at_ours,
            "prior_precision": float(full.prior_precision),
        }
    return {
        "dataset": loaded.dataset,
        "split": split,
        "config": config,
        "config_source": source,
        "val_ll": val_ll,
        "seed": seed,
        "n_train": int(data.x.shape[0]),
        "n_test": int(data.x_eval.shape[0]),
        "noise_scale": sigma,
        "map_seconds": map_seconds,
        "harness_test_ll": score(locs, scales, data.y_eval, data.y_std, coverage=False)["test_ll"],
        "committed_test_ll": committed,
        "contenders": contenders,
        "threads": torch.get_num_threads(),
    }


def _warm_up(folder: str | Path) -> None:
    """One untimed fit of each contender on a few rows of ``folder``'s split 0 (first calls
    load code and caches; the timed ones should not pay for it)."""
    data = prepare(load_uci_split(folder, 0))
    net = nn.Sequential(nn.Linear(data.x.shape[1], 8), nn.ReLU(), nn.Linear(8, 1))
    for structure in ("full", "kron"):
        fit_ours(net, data, structure, 10)
    try:
        fit_laplace_torch(net, data, 1.0)
    except ImportError:
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """The command: every split of the chosen data sets, then ``laplace_peer.json`` and
    ``laplace_peer.md`` in ``--out``, on one thread (``argv``: default ``sys.argv[1:]``).

    Example:
        >>> main(["--data", "benchmarks/uci/data", "--out", "unused", "--datasets", "boston"])
        Traceback (most recent call last):
        ...
        ValueError: datasets: unknown name(s) ['boston']; choose from ['bostonHousing', \
'concrete', 'energy', 'yacht'] or 'all'
    """
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.uci.laplace_peer", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--data", required=True, help="a UCI data folder, or a folder of them")
    parser.add_argument("--out", required=True, help="folder for laplace_peer.json / .md")
    parser.add_argument("--datasets", default="all", help="comma-separated names, or 'all'")
    parser.add_argument("--splits", default="all", help="e.g. '0-4', '0,3' or 'all'")
    parser.add_argument(
        "--choices",
        default=str(CHOICES),
        help="the harness's uci.json to read each split's chosen config from "
        "('none': re-run the search)",
    )
    parser.add_argument("--test-samples", type=int, default=BenchmarkSettings().test_samples)
    parser.add_argument(
        "--quick", action="store_true", help="the quick grid (2 epochs), chosen afresh; a smoke run"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    folders = find_datasets(args.data)
    names = parse_names(args.datasets, list(folders), "datasets")
    settings = BenchmarkSettings(quick=args.quick, test_samples=args.test_samples)
    started = time.perf_counter()
    runs = [] if args.choices == "none" else json.loads(Path(args.choices).read_text())["runs"]
    if not args.quick:
        _warm_up(folders[names[0]])
    records = []
    for name in names:
        for split in parse_splits(args.splits, uci_num_splits(folders[name])):
            records.append(run_split(folders[name], split, settings, runs))
            rec = records[-1]
            print(
                f"{name} {split}: "
                + ", ".join(f"{k} {v['test_ll']:.3f}" for k, v in rec["contenders"].items()),
                flush=True,
            )
    payload = {
        "command": "python -m benchmarks.uci.laplace_peer "
        + repo_command(list(argv or sys.argv[1:])),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "wall_time_seconds": time.perf_counter() - started,
        "versions": versions(),
        "settings": settings.to_dict(),
        "choices": repo_command([str(args.choices)]),
        "contenders": CONTENDERS,
        "summary": summarize_peer(records),
        "runs": records,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "laplace_peer.json", payload)
    (out / "laplace_peer.md").write_text(peer_markdown(payload))
    print(f"wrote {out / 'laplace_peer.json'} and {out / 'laplace_peer.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
