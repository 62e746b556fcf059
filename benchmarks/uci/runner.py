"""One benchmark task: choose hyper-parameters on validation rows, retrain, score the test rows.

A task is one (data set, split, method). Its hyper-parameters (and epochs) are chosen by the
validation log-likelihood in original units on the last 20% of the split's training rows
(:func:`benchmarks.uci.data.validation_split`, normalised on the first 80%); the test rows never
enter the search. The chosen configuration is then retrained on the whole training split and
scored once on the test rows. Every training run gets a seed derived from (data set, split,
method, stage, configuration), so a task gives the same numbers in any process and any order.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch

from benchmarks.uci.data import (
    UCISplit,
    load_uci_hyperparameters,
    load_uci_split,
    validation_split,
)
from benchmarks.uci.method import DatasetInfo, MethodSpec, Report
from benchmarks.uci.protocol import (
    FINAL_CHECK_ROWS,
    FINAL_FLAG_RATIO,
    Predictor,
    RegressionData,
    prepare,
    score,
    seed_for,
)
from benchmarks.uci.registry import get_method
from bnn_pyro._checks import check_device
from bnn_pyro._rows import spread_rows
from bnn_pyro.exceptions import TrainingDivergedError
from bnn_pyro.metrics import rmse

__all__ = [
    "BenchmarkSettings",
    "Task",
    "config_key",
    "is_chosen",
    "run_task",
    "select_hyperparameters",
]

_TRAINING_FAILURES = (FloatingPointError, TrainingDivergedError, ValueError, RuntimeError)


@dataclass(frozen=True)
class BenchmarkSettings:
    """Settings shared by every task.

    Attributes:
        quick: tiny grids and a few epochs (smoke tests only; not comparable).
        validation_fraction: share of the training rows held out for the search.
        validation_samples: predictive samples when scoring validation rows.
        test_samples: predictive samples when scoring test rows.
        device: where the models train and predict (``"cpu"``, ``"cuda"``, ``"cuda:1"``): the
            rows are moved there and each method's model follows its rows.
    """

    quick: bool = False
    validation_fraction: float = 0.2
    validation_samples: int = 200
    test_samples: int = 1000
    device: str = "cpu"

    def __post_init__(self) -> None:
        if not isinstance(self.quick, bool):
            raise TypeError(f"quick must be a bool, got {type(self.quick).__name__}")
        fraction = self.validation_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
            raise TypeError(f"validation_fraction must be a float, got {type(fraction).__name__}")
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"validation_fraction must be in (0, 1), got {fraction}")
        for name in ("validation_samples", "test_samples"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if not isinstance(self.device, str):
            raise TypeError(f"device must be a str such as 'cuda', got {self.device!r}")
        check_device("device", self.device)

    def to_dict(self) -> dict[str, Any]:
        """The settings as a JSON-ready dict (``device`` only where it is not the CPU, so the
        records of runs from before it existed still match a CPU run's on ``--resume``)."""
        out = asdict(self)
        if out["device"] == "cpu":
            del out["device"]
        return out


@dataclass(frozen=True)
class Task:
    """One (data set folder, split, method) to run.

    Example:
        >>> Task("yacht", "/data/uci/yacht", 0, "vi")
        Task(dataset='yacht', folder='/data/uci/yacht', split=0, method='vi')
    """

    dataset: str
    folder: str
    split: int
    method: str


def _check_types(**arguments: tuple[object, type]) -> None:
    for name, (value, kind) in arguments.items():
        if not isinstance(value, kind):
            raise TypeError(f"{name} must be a {kind.__name__}, got {type(value).__name__}")


def config_key(config: Mapping[str, Any]) -> str:
    """A configuration as canonical text: the part of its runs' seeds that names it.

    Example:
        >>> config_key({"lr": 0.1, "epochs": 3})
        '{"epochs": 3, "lr": 0.1}'
    """
    return json.dumps(dict(config), sort_keys=True)


def is_chosen(config: Mapping[str, Any], epoch: int, overrides: Mapping[str, Any] | None) -> bool:
    """Whether a run's report at ``epoch`` with predictive ``overrides`` is ``config``'s own:
    not another split's checkpoint of a shared run, nor a predictive variant not chosen.

    Example:
        >>> config = {"tau": 1.0, "epochs": 3}
        >>> is_chosen(config, 3, {"tau": 1.0}), is_chosen(config, 2, None)
        (True, False)
        >>> is_chosen(config, 3, {"tau": 2.0})
        False
    """
    if epoch != int(config["epochs"]):
        return False
    return all(config.get(key) == value for key, value in (overrides or {}).items())


def _finite(value: float) -> float:
    return value if math.isfinite(value) else -math.inf


def dataset_info(folder: str, split: UCISplit) -> DatasetInfo:
    """What the grids may use about a data set: name, training size, reference settings.

    Args:
        folder: the data set folder (its optional settings files give ``reference``).
        split: one of its splits (for the sizes).

    Returns:
        :class:`~benchmarks.uci.method.DatasetInfo`; ``reference`` is ``None`` when
        the folder lacks ``n_hidden.txt``/``n_epochs.txt``/``dropout_rates.txt``/
        ``tau_values.txt``.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from benchmarks.uci.writer import write_uci_folder
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     folder = write_uci_folder(Path(tmp) / "toy", torch.randn(40, 3), torch.randn(40))
        ...     info = dataset_info(str(folder), load_uci_split(folder, 0))
        >>> info.name, info.n_train, info.n_features, info.reference
        ('toy', 36, 3, None)
    """
    try:
        reference = load_uci_hyperparameters(folder)
    except (FileNotFoundError, ValueError):
        reference = None
    return DatasetInfo(
        name=split.dataset,
        n_train=int(split.X_train.shape[0]),
        n_features=int(split.X_train.shape[1]),
        reference=reference,
    )


def search_report(
    config: Mapping[str, Any], data: RegressionData, records: list[dict[str, Any]]
) -> Report:
    """The ``report`` of a search run: each checkpoint's predictive scored on ``data``'s
    validation rows, appended to ``records`` as ``{config (with the overrides and epochs),
    val_ll, val_rmse}``.

    Example:
        >>> data = RegressionData(torch.zeros(4, 1), torch.zeros(4, 1), torch.zeros(2, 1),
        ...                       torch.zeros(2, 1), 1.0, 8)
        >>> records = []
        >>> search_report({"lr": 0.1}, data, records)(3, lambda x: (torch.zeros(1, 2, 1), 1.0))
        >>> records[0]["config"], round(records[0]["val_ll"], 3)
        ({'lr': 0.1, 'epochs': 3}, -0.919)
    """

    def report(
        epoch: int, predictor: Predictor, overrides: Mapping[str, Any] | None = None
    ) -> None:
        locs, scales = predictor(data.x_eval)
        scores = score(locs, scales, data.y_eval, data.y_std, coverage=False)  # not recorded
        records.append(
            {
                "config": {**config, **(overrides or {}), "epochs": epoch},
                "val_ll": scores["test_ll"],
                "val_rmse": scores["rmse"],
            }
        )

    return report


def final_report(
    config: Mapping[str, Any], data: RegressionData, scores: dict[str, float]
) -> Report:
    """The ``report`` of a final run: the chosen predictive scored on ``data``'s evaluation
    rows into ``scores`` (a predictive variant that was not chosen, or a checkpoint other than
    ``config["epochs"]`` of a run shared with longer ones, is skipped), and its in-sample RMSE
    on the training rows (``train_rmse``, original units; at most
    :data:`~benchmarks.uci.protocol.FINAL_CHECK_ROWS` of them, evenly spaced), which
    :func:`final_check` holds against the search's validation RMSE.

    Example:
        >>> data = RegressionData(torch.zeros(4, 1), torch.zeros(4, 1), torch.zeros(2, 1),
        ...                       torch.zeros(2, 1), 1.0, 8)
        >>> scores = {}
        >>> report = final_report({"tau": 1.0, "epochs": 3}, data, scores)
        >>> zeros = lambda x: (torch.zeros(1, len(x), 1), 1.0)
        >>> report(3, zeros, {"tau": 2.0}); scores
        {}
        >>> report(2, zeros, {"tau": 1.0}); scores
        {}
        >>> report(3, zeros, {"tau": 1.0}); sorted(scores)
        ['coverage_95', 'rmse', 'test_ll', 'train_rmse']
    """

    def report(
        epoch: int, predictor: Predictor, overrides: Mapping[str, Any] | None = None
    ) -> None:
        if not is_chosen(config, epoch, overrides):
            return
        # the RMSE alone, of at most FINAL_CHECK_ROWS rows: a sampling predictive's draws over
        # every training row (and the mixture's quantiles) cost as much as the final fit itself
        rows = spread_rows(len(data.x), FINAL_CHECK_ROWS, data.x.device)
        x, y = (data.x, data.y) if rows is None else (data.x[rows], data.y[rows])
        locs, _ = predictor(x)
        scores["train_rmse"] = rmse(locs.mean(0), y, y_scale=data.y_std)
        locs, scales = predictor(data.x_eval)  # the test rows last, once
        scores.update(score(locs, scales, data.y_eval, data.y_std))

    return report


def final_check(train_rmse: float | None, val_rmse: float | None) -> dict[str, Any]:
    """The final fit held against its search: ``{"train_rmse", "search_val_rmse", "flagged"}``,
    flagged when the final's in-sample RMSE exceeds :data:`FINAL_FLAG_RATIO` times the search's
    validation RMSE of the same configuration (a final fit that went wrong where its search run
    did not: it stays scored, and the report lists it).

    Example:
        >>> final_check(0.0012, 0.001)["flagged"], final_check(0.9, 0.001)["flagged"]
        (False, True)
    """
    flagged = (
        train_rmse is not None
        and val_rmse is not None
        and not train_rmse <= FINAL_FLAG_RATIO * val_rmse  # NaN is flagged too
    )
    return {"train_rmse": train_rmse, "search_val_rmse": val_rmse, "flagged": bool(flagged)}


def ranked_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The search records that scored, best validation log-likelihood first (NaN last).

    Example:
        >>> [r["val_ll"] for r in ranked_records(
        ...     [{"val_ll": -2.0}, {"val_ll": None}, {"val_ll": -1.0}])]
        [-1.0, -2.0]
    """
    return sorted(
        (r for r in records if r.get("val_ll") is not None),
        key=lambda r: _finite(r["val_ll"]),
        reverse=True,
    )


def select_hyperparameters(
    spec: MethodSpec, split: UCISplit, info: DatasetInfo, settings: BenchmarkSettings
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Choose a configuration (with its epochs) on the validation rows of ``split``.

    Only :func:`benchmarks.uci.data.validation_split` of ``split`` is used: the model trains on
    the first 80% of the training rows and is scored on the last 20%.

    Args:
        spec: the method.
        split: the train/test split (its test rows are not used here).
        info: the data set's description for the grid.
        settings: benchmark settings.

    Returns:
        ``(best config, records)``; each record holds a ``config`` (with the scored
        ``epochs``) and its ``val_ll``/``val_rmse``, or the ``error`` that stopped it.

    Raises:
        TypeError: if an argument has the wrong type.
        RuntimeError: if every configuration failed.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from benchmarks.uci.writer import write_uci_folder
        >>> from benchmarks.uci.registry import get_method
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     folder = write_uci_folder(Path(tmp) / "toy", torch.randn(40, 3), torch.randn(40))
        ...     split = load_uci_split(folder, 0)
        ...     info = dataset_info(str(folder), split)
        >>> best, records = select_hyperparameters(
        ...     get_method("ensemble"), split, info, BenchmarkSettings(quick=True))
        >>> best["epochs"], sorted(records[0])
        (2, ['config', 'val_ll', 'val_rmse'])
    """
    _check_types(spec=(spec, MethodSpec), split=(split, UCISplit), info=(info, DatasetInfo))
    _check_types(settings=(settings, BenchmarkSettings))
    val = validation_split(split, settings.validation_fraction)
    data = prepare(val, settings.device)
    records: list[dict[str, Any]] = []
    for config in spec.grid(info, settings.quick):
        seed = seed_for(split.dataset, split.split, spec.name, "search", config_key(config))

        try:
            spec.train(
                config,
                data.x,
                data.y,
                y_std=data.y_std,
                hidden=data.hidden,
                seed=seed,
                checkpoints=spec.checkpoints(config),
                report=search_report(config, data, records),
                num_samples=settings.validation_samples,
            )
        except _TRAINING_FAILURES as err:
            records.append({"config": dict(config), "val_ll": None, "error": repr(err)})
    ranked = ranked_records(records)
    if not ranked:
        raise RuntimeError(
            f"{spec.name} failed for every configuration on {split.dataset} split "
            f"{split.split}: {[r.get('error') for r in records]}"
        )
    return dict(ranked[0]["config"]), records


def _final_fit(
    spec: MethodSpec, split: UCISplit, config: Mapping[str, Any], settings: BenchmarkSettings
) -> dict[str, float]:
    data = prepare(split, settings.device)
    seed = seed_for(split.dataset, split.split, spec.name, "final", config_key(config))
    scores: dict[str, float] = {}

    spec.train(
        config,
        data.x,
        data.y,
        y_std=data.y_std,
        hidden=data.hidden,
        seed=seed,
        checkpoints=[int(config["epochs"])],
        report=final_report(config, data, scores),
        num_samples=settings.test_samples,
    )
    if not scores:
        raise RuntimeError(f"{spec.name} reported no prediction for the chosen config {config}")
    return scores


def run_task(task: Task, settings: BenchmarkSettings) -> dict[str, Any]:
    """Run one task: search on validation rows, retrain on the training split, score the test.

    Args:
        task: the (data set, folder, split, method).
        settings: benchmark settings.

    Returns:
        A JSON-ready record: ``dataset``, ``split``, ``method``, ``test_ll``, ``rmse`` (original
        units), the chosen ``config``, its ``val_ll``, the search ``records``, ``n_train``,
        ``n_test``, ``search_seconds`` and ``final_seconds``. If the chosen configuration fails
        on the whole training split, the next best one is used and ``fallbacks`` says so.

    Raises:
        TypeError: if ``task`` or ``settings`` has the wrong type.
        ValueError: if the method is unknown or the split out of range.
        RuntimeError: if every configuration failed.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from benchmarks.uci.writer import write_uci_folder
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     folder = write_uci_folder(Path(tmp) / "toy", torch.randn(40, 3), torch.randn(40))
        ...     record = run_task(Task("toy", str(folder), 1, "ensemble"), BenchmarkSettings(True))
        >>> record["n_train"], record["n_test"], record["config"]["members"]
        (36, 4, 5)
    """
    _check_types(task=(task, Task), settings=(settings, BenchmarkSettings))
    spec = get_method(task.method)
    split = load_uci_split(task.folder, task.split)
    info = dataset_info(task.folder, split)
    start = time.perf_counter()
    best, records = select_hyperparameters(spec, split, info, settings)
    searched = time.perf_counter()
    ranked = ranked_records(records)
    failures: list[str] = []
    for record in ranked:
        try:
            scores = _final_fit(spec, split, record["config"], settings)
            best = dict(record["config"])
            break
        except _TRAINING_FAILURES as err:
            failures.append(f"{config_key(record['config'])}: {err!r}")
    else:
        raise RuntimeError(f"{task}: every configuration failed on the training split: {failures}")
    return {
        "dataset": task.dataset,
        "split": task.split,
        "method": task.method,
        "test_ll": scores["test_ll"],
        "rmse": scores["rmse"],
        "coverage_95": scores["coverage_95"],
        "config": best,
        "val_ll": next(r["val_ll"] for r in ranked if r["config"] == best),
        **final_check(
            scores.get("train_rmse"),
            next(r.get("val_rmse") for r in ranked if r["config"] == best),
        ),
        "n_train": int(split.X_train.shape[0]),
        "n_test": int(split.X_test.shape[0]),
        "search_seconds": searched - start,
        "final_seconds": time.perf_counter() - searched,
        "fallbacks": failures,
        "records": records,
        "threads": torch.get_num_threads(),
    }
