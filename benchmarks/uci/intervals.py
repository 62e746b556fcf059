"""Prediction intervals on the UCI splits: raw, recalibrated and conformal, for every method.

For each (data set, split, method) of a finished UCI run, the configuration the run chose is
trained again on the first 80% of the split's training rows (the rows its search trained on);
the last 20% become the *calibration* rows, and the split's test rows are scored. The
calibration rows are the validation rows of the search: the model never trained on them, so
each interval kind below sees exactly what a user with a held-out set would have.

Interval kinds, each at 90% and 95% (the report's columns,
:data:`benchmarks.uci.interval_report.KINDS`):

* ``raw``: the method's own central interval, the quantiles of its predictive mixture;
* ``scaled``: :class:`~bnn_pyro.calibration.ScaleRecalibration`, ``μ ± z s σ``;
* ``isotonic``: :class:`~bnn_pyro.calibration.IsotonicRecalibration` (Kuleshov et al. 2018);
* ``conformal_abs`` / ``conformal_norm``: :class:`~bnn_pyro.calibration.SplitConformal` with
  the absolute score ``|y - μ|`` and the normalised one ``|y - μ| / σ``;
* ``cqr``: :class:`~bnn_pyro.calibration.QuantileConformal` on the mixture's quantiles;
* ``mapie_norm``: MAPIE's own ``SplitConformalRegressor`` with ``StdConformityScore`` on the
  same ``μ`` and ``σ`` (a prefit estimator that returns them), side by side.

Each kind gets coverage (PICP), mean width and the Winkler interval score (both in original
units). Beside them: MACE of the raw, scaled and isotonic predictives (from their probability
integral transforms, 100 levels as :func:`bnn_pyro.metrics.calibration_errors`), and the test
NLL of the raw predictive and the scaled one. The library's calibrators run on a predictive
computed once per row set (:class:`FrozenPredictive`), so every kind sees the same samples.

Run from the repository root, after ``python -m benchmarks.uci``::

    python -m benchmarks.uci.intervals --runs benchmarks/results/uci/uci.json \
        --data benchmarks/uci/data --out benchmarks/results/uci --jobs 2
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from benchmarks._report import repo_command
from benchmarks.uci.data import load_uci_split, validation_split
from benchmarks.uci.interval_report import interval_markdown, readme_markdown
from benchmarks.uci.protocol import prepare, seed_for
from benchmarks.uci.registry import get_method
from benchmarks.uci.runner import config_key, is_chosen
from bnn_pyro.calibration import (
    IsotonicRecalibration,
    QuantileConformal,
    ScaleRecalibration,
    SplitConformal,
    predictive_moments,
    predictive_quantiles,
)
from bnn_pyro.metrics import (
    gaussian_log_likelihood,
    gaussian_mixture_cdf,
    interval_score,
    mean_interval_width,
    picp,
)

__all__ = ["ALPHAS", "FrozenPredictive", "interval_record", "interval_task", "mace"]

#: The miss rates: 90% and 95% intervals.
ALPHAS = (0.1, 0.05)


class FrozenPredictive:
    """A "method" whose predictive on each row set was computed once: the library's
    calibrators take it like any fitted regression method, and every calibrator sees the same
    samples.

    Args:
        table: ``[(x, (locs (S, N, 1), scales)), ...]``: the predictive on each row set; a
            call with ``x`` returns the entry whose ``x`` is that very tensor.

    Example:
        >>> x = torch.zeros(3, 1)
        >>> frozen = FrozenPredictive([(x, (torch.ones(2, 3, 1), torch.tensor(0.5)))])
        >>> predictive_moments(frozen, x)[0].shape
        torch.Size([3, 1])
    """

    def __init__(self, table: list[tuple[torch.Tensor, tuple[torch.Tensor, Any]]]) -> None:
        self.table = table

    def predictive_gaussian(self, x: torch.Tensor, **_: Any) -> tuple[torch.Tensor, Any]:
        """The stored ``(locs, scales)`` of ``x`` (``KeyError`` for any other tensor)."""
        for rows, predictive in self.table:
            if rows is x:
                return predictive
        raise KeyError("FrozenPredictive holds no predictive for these rows")


def mace(pit: torch.Tensor, num_levels: int = 100) -> float:
    """Mean absolute calibration error from probability integral transforms ``u = F(y)``: the
    central interval of level ``p`` holds ``y`` iff ``|2u - 1| <= p`` (levels evenly spaced in
    ``[0, 1]``, as :func:`bnn_pyro.metrics.calibration_errors`).

    Example:
        >>> mace(torch.tensor([0.5, 0.5]))  # every y at the median: coverage 1 at every level
        0.5
    """
    levels = torch.linspace(0.0, 1.0, num_levels, dtype=torch.float64)
    distance = (2 * pit.double().reshape(-1) - 1).abs()
    coverage = (distance[None, :] <= levels[:, None]).double().mean(1)
    return float((coverage - levels).abs().mean())


def _mapie_interval(
    mean: torch.Tensor, sd: torch.Tensor, y_cal: torch.Tensor, n_cal: int, alpha: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """MAPIE's split conformal interval with ``StdConformityScore`` on the given moments: the
    first ``n_cal`` rows calibrate, the rest are predicted. The estimator is prefit and looks
    its moments up by row number, so MAPIE sees exactly ``mean`` and ``sd``."""
    from mapie.conformity_scores import StdConformityScore
    from mapie.regression import SplitConformalRegressor
    from sklearn.base import BaseEstimator, RegressorMixin

    mu, sigma = mean[:, 0].double().numpy(), sd[:, 0].double().numpy()

    class Moments(RegressorMixin, BaseEstimator):
        def fit(self, X: np.ndarray, y: np.ndarray) -> Moments:
            self.fitted_ = True  # what MAPIE's fitted check reads
            return self

        def predict(self, X: np.ndarray, return_std: bool = False) -> Any:
            rows = np.asarray(X)[:, 0].astype(int)
            return (mu[rows], sigma[rows]) if return_std else mu[rows]

    rows = np.arange(len(mu), dtype=np.float64)[:, None]
    estimator = Moments().fit(rows, mu)
    mapie = SplitConformalRegressor(
        estimator, confidence_level=1 - alpha, conformity_score=StdConformityScore(), prefit=True
    )
    mapie.conformalize(rows[:n_cal], y_cal[:, 0].double().numpy())
    _, bounds = mapie.predict_interval(rows[n_cal:])
    return torch.as_tensor(bounds[:, 0, 0])[:, None], torch.as_tensor(bounds[:, 1, 0])[:, None]


def interval_record(
    cal: tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, Any]],
    test: tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, Any]],
    y_std: float,
) -> dict[str, Any]:
    """Every interval kind and calibration score of one fitted model.

    Args:
        cal: ``(x, y, (locs, scales))`` of the calibration rows: ``x (n, D)``, ``y (n, 1)``,
            the predictive ``locs (S, n, 1)`` and ``scales``, normalised units.
        test: the same for the test rows.
        y_std: original units per normalised unit (widths and scores are reported in
            original units).

    Returns:
        ``{"intervals": {alpha: {kind: {"coverage", "width", "winkler"}}}, "mace": {...},
        "nll": {"raw", "scaled"}, "scale_factor", "n_cal", "n_test"}``.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> def rows(n):
        ...     x = torch.randn(n, 1, generator=g, dtype=torch.float64)
        ...     return x, x + torch.randn(n, 1, generator=g, dtype=torch.float64), (x[None], 0.5)
        >>> record = interval_record(rows(200), rows(300), y_std=2.0)
        >>> 1.8 < record["scale_factor"] < 2.2  # noise sd 1, predicted 0.5
        True
        >>> record["intervals"]["0.1"]["raw"]["coverage"] < 0.7  # over-confident
        True
        >>> record["intervals"]["0.1"]["conformal_abs"]["coverage"] > 0.85
        True
    """
    (x_cal, y_cal, pred_cal), (x_test, y_test, pred_test) = cal, test
    frozen = FrozenPredictive([(x_cal, pred_cal), (x_test, pred_test)])
    mean, sd = predictive_moments(frozen, x_test)
    mean_cal, sd_cal = predictive_moments(frozen, x_cal)
    scaled = ScaleRecalibration(frozen).fit(x_cal, y_cal)
    isotonic = IsotonicRecalibration(frozen).fit(x_cal, y_cal)
    factor = scaled.factor.to(sd)
    record: dict[str, Any] = {"intervals": {}, "scale_factor": float(factor[0])}
    conformal = {  # calibrated once: the scores do not depend on the level
        f"conformal_{name}": SplitConformal(frozen, score=score).calibrate(x_cal, y_cal)
        for name, score in (("abs", "absolute"), ("norm", "normalized"))
    }
    both_mean, both_sd = torch.cat([mean_cal, mean]), torch.cat([sd_cal, sd])  # MAPIE's rows
    for alpha in ALPHAS:
        z = float(torch.special.ndtri(torch.tensor(1 - alpha / 2, dtype=torch.float64)))
        raw = predictive_quantiles(frozen, x_test, [alpha / 2, 1 - alpha / 2])
        bounds = {
            "raw": (raw[0], raw[1]),
            "scaled": (mean - z * factor * sd, mean + z * factor * sd),
            "isotonic": isotonic.predict_interval(x_test, alpha=alpha),
            **{k: c.predict_interval(x_test, alpha=alpha) for k, c in conformal.items()},
            "cqr": QuantileConformal(frozen, alpha)
            .calibrate(x_cal, y_cal)
            .predict_interval(x_test),
            "mapie_norm": _mapie_interval(both_mean, both_sd, y_cal, len(x_cal), alpha),
        }
        record["intervals"][str(alpha)] = {
            kind: {
                "coverage": picp(lo, hi, y_test),
                "width": mean_interval_width(lo, hi) * y_std,
                "winkler": interval_score(lo, hi, y_test, alpha=alpha) * y_std,
            }
            for kind, (lo, hi) in bounds.items()
        }
    z_test = ((y_test - mean) / sd).double()
    iso_pit = np.interp(z_test.reshape(-1).numpy(), isotonic.z.numpy(), isotonic.observed.numpy())
    record["mace"] = {
        "raw": mace(gaussian_mixture_cdf(pred_test[0], pred_test[1], y_test)),
        "scaled": mace(torch.special.ndtr(z_test / factor.double())),
        "isotonic": mace(torch.as_tensor(iso_pit)),
    }
    record["nll"] = {
        "raw": -float(gaussian_log_likelihood(*pred_test, y_test, y_scale=y_std)),
        "scaled": -float(gaussian_log_likelihood(mean[None], factor * sd, y_test, y_scale=y_std)),
    }
    record.update(n_cal=int(len(x_cal)), n_test=int(len(x_test)))
    return record


def interval_task(
    dataset: str, folder: str, split: int, method: str, config: Mapping[str, Any], samples: int
) -> dict[str, Any]:
    """Train ``config`` on the first 80% of a split's training rows and score every interval
    kind on its test rows, with the last 20% as calibration rows (:func:`interval_record`).

    Args:
        dataset: the data set's name; ``folder`` its split folder.
        split: the split number.
        method: a registered UCI method name (:data:`benchmarks.uci.registry.METHODS`).
        config: the configuration to train (with its ``epochs``), e.g. the one a UCI run chose.
        samples: predictive samples.

    Returns:
        :func:`interval_record`'s dict with ``dataset``, ``split``, ``method``, ``config`` and
        ``seconds``.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from benchmarks.uci.writer import write_uci_folder
        >>> g = torch.Generator().manual_seed(0)
        >>> X = torch.randn(120, 2, generator=g); y = X[:, 0] + 0.3 * torch.randn(120, generator=g)
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     folder = str(write_uci_folder(Path(tmp) / "toy", X, y))
        ...     config = {"epochs": 5, "lr": 0.01, "batch_size": 100, "members": 2}
        ...     record = interval_task("toy", folder, 0, "ensemble", config, samples=10)
        >>> record["n_cal"], record["n_test"], sorted(record["intervals"])
        (22, 12, ['0.05', '0.1'])
    """
    start = time.perf_counter()
    spec = get_method(method)
    whole = load_uci_split(folder, split)
    val = validation_split(whole, 0.2)  # first 80% train, last 20% calibrate
    data = prepare(val)
    x_test = val.normalize_x(whole.X_test).to(data.x)  # the test rows, as the model sees rows
    y_test = val.normalize_y(whole.y_test).to(data.y)
    out: dict[str, Any] = {}

    def report(epoch: int, predictor: Any, overrides: Mapping[str, Any] | None = None) -> None:
        if not is_chosen(config, epoch, overrides):
            return
        with torch.no_grad():
            cal = (data.x_eval, data.y_eval, predictor(data.x_eval))
            test = (x_test, y_test, predictor(x_test))
        out.update(interval_record(cal, test, data.y_std))

    spec.train(
        config,
        data.x,
        data.y,
        y_std=data.y_std,
        hidden=data.hidden,
        seed=seed_for(dataset, split, method, "intervals", config_key(config)),
        checkpoints=[int(config["epochs"])],
        report=report,
        num_samples=samples,
    )
    if not out:
        raise RuntimeError(f"{method} reported no prediction for {config}")
    seconds = time.perf_counter() - start
    return {"dataset": dataset, "split": split, "method": method, "config": dict(config),
            **out, "seconds": seconds}  # fmt: skip


def _guarded(task: tuple[Any, ...]) -> dict[str, Any]:
    """:func:`interval_task` on one torch thread (workers share the cores); a failure becomes
    a record with its ``error``."""
    torch.set_num_threads(1)
    dataset, _, split, method, config, _ = task
    try:
        return interval_task(*task)
    except (RuntimeError, ValueError, FloatingPointError) as err:
        return {"dataset": dataset, "split": split, "method": method, "config": dict(config),
                "error": repr(err)}  # fmt: skip


def _header(args: Any, records: list[dict[str, Any]]) -> str:
    import platform

    import pyro

    ok = [r for r in records if "error" not in r]
    failed = len(records) - len(ok)
    minutes = sum(float(r["seconds"]) for r in ok) / 60
    return (
        f"Command: `python -m benchmarks.uci.intervals {repo_command(args.argv)}`. "
        f"{len(ok)} (data set, split, method) fits"
        + (f", {failed} failed (left out)" if failed else "")
        + f", {args.samples} predictive samples; each refits the configuration the UCI run "
        "chose on the first 80% of the split's training rows and calibrates on the last 20%. "
        f"Mean ± standard error over splits. torch {torch.__version__}, pyro {pyro.__version__}, "
        f"Python {platform.python_version()}; the fits took {minutes:.0f} min on one thread each."
    )


def main(argv: list[str] | None = None) -> int:
    """The command: refit every run of a UCI results file and write the interval report."""
    import argparse
    import sys
    from pathlib import Path

    from joblib import Parallel, delayed

    from benchmarks.uci.results import append_jsonl, drop_partial_line, read_jsonl, write_json

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", required=True, help="a UCI results file (uci.json)")
    parser.add_argument("--data", required=True, help="the folder of data set folders")
    parser.add_argument("--out", required=True, help="folder for intervals.{jsonl,json,md}")
    parser.add_argument("--readme", help="also write the README's part of the report here")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--samples", type=int, default=1000, help="predictive samples")
    parser.add_argument("--splits", type=int, help="only the first SPLITS splits (smoke runs)")
    parser.add_argument("--methods", help="comma-separated method names (default: all)")
    parser.add_argument("--epochs", type=int, help="override every config's epochs (smoke runs)")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.jobs < 1 or args.samples < 1:
        parser.error("--jobs and --samples must be >= 1")
    payload = json.loads(Path(args.runs).read_text())
    runs = payload["runs"]
    methods = set(args.methods.split(",")) if args.methods else None
    tasks = []
    for run in runs:
        if "error" in run or (methods and run["method"] not in methods):
            continue
        if args.splits is not None and run["split"] >= args.splits:
            continue
        config = dict(run["config"]) | ({"epochs": args.epochs} if args.epochs else {})
        folder = str(Path(args.data) / run["dataset"])
        tasks.append((run["dataset"], folder, run["split"], run["method"], config, args.samples))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    jsonl = out / "intervals.jsonl"
    if not jsonl.exists() and (out / "intervals.json").exists():  # a committed run: its records
        for record in json.loads((out / "intervals.json").read_text())["records"]:
            append_jsonl(jsonl, record)
    drop_partial_line(jsonl)
    done = {(r["dataset"], r["split"], r["method"]) for r in read_jsonl(jsonl)}
    todo = [t for t in tasks if (t[0], t[2], t[3]) not in done]
    print(f"{len(tasks)} fits, {len(tasks) - len(todo)} already in {jsonl}", file=sys.stderr)
    results = Parallel(n_jobs=args.jobs, return_as="generator_unordered")(
        delayed(_guarded)(t) for t in todo
    )
    for i, record in enumerate(results, 1):
        append_jsonl(jsonl, record)
        what = record.get("error") or f"90% raw {record['intervals']['0.1']['raw']['coverage']:.2f}"
        print(f"[{i}/{len(todo)}] {record['dataset']} {record['split']} {record['method']}: "
              f"{what}", file=sys.stderr)  # fmt: skip
    keys = {(t[0], t[2], t[3]) for t in tasks}
    records = [r for r in read_jsonl(jsonl) if (r["dataset"], r["split"], r["method"]) in keys]
    rank = {name: i for i, name in enumerate(payload["methods"])}
    records.sort(key=lambda r: (r["dataset"], rank.get(r["method"], len(rank)), r["split"]))
    header = _header(args, records)
    write_json(out / "intervals.json", {"header": header, "records": records})
    (out / "intervals.md").write_text(interval_markdown(records, header))
    if args.readme:
        link = Path(out, "intervals.md").as_posix()
        Path(args.readme).write_text(readme_markdown(records, header, link))
    print(f"wrote {out / 'intervals.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
