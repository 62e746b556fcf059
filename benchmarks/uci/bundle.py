"""All splits of one (data set, method) at once, for methods that train stacked.

A method with a ``train_stacked`` function (:class:`~benchmarks.uci.method.MethodSpec`) trains
the same configuration on K splits as one stacked model (:func:`bnn_pyro.fit_stacked`): the
search trains each grid configuration once for all splits, and the final fit trains the splits
that chose the same grid configuration together (:func:`final_groups`: whatever epoch count and
predictive-only overrides each chose). Every split keeps its own rows, its own seeds
(:func:`~benchmarks.uci.protocol.seed_for`, as :func:`~benchmarks.uci.runner.run_task` derives
them) and its own choice, so each record is the one :func:`~benchmarks.uci.runner.run_task`
gives for that split, up to float rounding (tested). Anything a bundle cannot do together (a
configuration that fails or cannot be stacked, splits of unequal size) runs split by split the
usual way. The records' ``search_seconds``/``final_seconds`` share the stacked time evenly.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import torch

from benchmarks.uci.data import load_uci_split, validation_split
from benchmarks.uci.method import MethodSpec
from benchmarks.uci.protocol import RegressionData, prepare, seed_for
from benchmarks.uci.registry import get_method
from benchmarks.uci.runner import (
    _TRAINING_FAILURES,
    BenchmarkSettings,
    Task,
    _check_types,
    _final_fit,
    config_key,
    dataset_info,
    final_check,
    final_report,
    ranked_records,
    run_task,
    search_report,
)

__all__ = ["bundled", "final_groups", "refit_final_group", "run_bundle"]


def bundled(tasks: list[Task]) -> list[list[Task]]:
    """Group tasks: one group per (data set, method) of a method that trains stacked, one
    group per task otherwise (in the order the groups first appear).

    Example:
        >>> tasks = [Task("a", "/a", s, m) for s in (0, 1) for m in ("vi", "ensemble")]
        >>> [[(t.split, t.method) for t in g] for g in bundled(tasks)]
        [[(0, 'vi'), (1, 'vi')], [(0, 'ensemble')], [(1, 'ensemble')]]
    """
    groups: dict[Any, list[Task]] = {}
    for i, task in enumerate(tasks):
        stacks = get_method(task.method).train_stacked is not None
        key = (task.dataset, task.folder, task.method) if stacks else i
        groups.setdefault(key, []).append(task)
    return list(groups.values())


def _stacked_run(
    spec: MethodSpec,
    config: Mapping[str, Any],
    datas: list[RegressionData],
    seeds: list[int],
    checkpoints: list[int],
    reports: list[Any],
    num_samples: int,
) -> None:
    spec.train_stacked(  # type: ignore[misc]
        config,
        torch.stack([d.x for d in datas]),
        torch.stack([d.y for d in datas]),
        y_stds=[d.y_std for d in datas],
        hidden=datas[0].hidden,
        seeds=seeds,
        checkpoints=checkpoints,
        reports=reports,
        num_samples=num_samples,
    )


def _search(
    spec: MethodSpec, splits: list[Any], grid: list[dict[str, Any]], settings: BenchmarkSettings
) -> list[list[dict[str, Any]]]:
    """Each split's search records, every grid configuration trained once for all splits."""
    datas = [
        prepare(validation_split(s, settings.validation_fraction), settings.device) for s in splits
    ]
    records: list[list[dict[str, Any]]] = [[] for _ in splits]
    for config in grid:
        key = config_key(config)
        seeds = [seed_for(s.dataset, s.split, spec.name, "search", key) for s in splits]
        marks = [len(r) for r in records]
        try:
            _stacked_run(
                spec,
                config,
                datas,
                seeds,
                spec.checkpoints(config),
                [search_report(config, d, r) for d, r in zip(datas, records, strict=True)],
                settings.validation_samples,
            )
            continue
        except (*_TRAINING_FAILURES, NotImplementedError):
            for k, mark in enumerate(marks):  # split by split: each its own result or error
                del records[k][mark:]
        for k, data in enumerate(datas):
            try:
                spec.train(
                    config,
                    data.x,
                    data.y,
                    y_std=data.y_std,
                    hidden=data.hidden,
                    seed=seeds[k],
                    checkpoints=spec.checkpoints(config),
                    report=search_report(config, data, records[k]),
                    num_samples=settings.validation_samples,
                )
            except _TRAINING_FAILURES as err:
                records[k].append({"config": dict(config), "val_ll": None, "error": repr(err)})
    return records


def final_groups(
    spec: MethodSpec, grid: list[dict[str, Any]], configs: list[dict[str, Any]]
) -> list[tuple[dict[str, Any], list[int]]]:
    """The final fits that one stacked run can do: ``(run config, indices into configs)``.

    A chosen configuration is a grid configuration with two kinds of change, neither of which
    needs its own training run: its ``epochs`` is one of the grid configuration's checkpoints
    (the search scored it inside a longer run, which the protocol counts as a run of that many
    epochs: ``spec.checkpoints`` lists more than one epoch count only where that holds), and
    keys the grid does not have are predictive-only overrides (``noise_factor``, Gal's
    ``tau``), scored from the same training. So the splits that chose the same grid
    configuration share one run, as long as the longest of them; each split still keeps its
    own seed and is scored at its own epoch count and overrides. A chosen configuration that
    matches no grid configuration this way runs with those that chose exactly the same one.

    Example:
        >>> import dataclasses
        >>> from benchmarks.uci.registry import get_method
        >>> grid = [{"epochs": 8, "lr": 0.1}, {"epochs": 8, "lr": 0.01}]
        >>> spec = dataclasses.replace(get_method("vi"), checkpoints=lambda c: [2, 4, 6, 8])
        >>> chosen = [{"epochs": 2, "lr": 0.1, "tau": 1.0}, {"epochs": 6, "lr": 0.1, "tau": 2.0},
        ...           {"epochs": 8, "lr": 0.01}]
        >>> final_groups(spec, grid, chosen)
        [({'epochs': 6, 'lr': 0.1}, [0, 1]), ({'epochs': 8, 'lr': 0.01}, [2])]

    Raises:
        TypeError: ``spec`` is not a :class:`MethodSpec` or ``grid``/``configs`` not lists.
        ValueError: a grid or chosen configuration without an ``"epochs"`` key.
    """
    _check_types(spec=(spec, MethodSpec), grid=(grid, list), configs=(configs, list))
    for name, entries in (("grid", grid), ("configs", configs)):
        for entry in entries:
            if not isinstance(entry, Mapping) or "epochs" not in entry:
                raise ValueError(f"every entry of {name} needs an 'epochs' key, got {entry!r}")
    grid_keys = {key for config in grid for key in config}

    def without_epochs(config: Mapping[str, Any]) -> str:
        return config_key({k: v for k, v in config.items() if k != "epochs"})

    keyed = [(without_epochs(g), g) for g in grid]
    groups: dict[tuple[str, str], tuple[dict[str, Any], list[int]]] = {}
    for k, config in enumerate(configs):
        epochs = int(config["epochs"])
        base = without_epochs({key: v for key, v in config.items() if key in grid_keys})
        source = next(
            (g for key, g in keyed if key == base and epochs in spec.checkpoints(g)), None
        )
        if source is None:  # trained on its own, with those that chose exactly the same
            run, members = groups.setdefault(("exact", config_key(config)), (dict(config), []))
        else:  # as long as the longest member's epochs
            run, members = groups.setdefault(("grid", config_key(source)), (dict(source), []))
            run["epochs"] = max(int(run["epochs"]), epochs) if members else epochs
        members.append(k)
    return list(groups.values())


def _final(
    spec: MethodSpec,
    splits: list[Any],
    configs: list[dict[str, Any]],
    grid: list[dict[str, Any]],
    settings: BenchmarkSettings,
) -> list[dict[str, float] | None]:
    """Test scores per split, trained together as :func:`final_groups` groups them; ``None``
    where that failed (the caller runs those splits the usual way)."""
    scores: list[dict[str, float] | None] = [None] * len(splits)
    for run, members in final_groups(spec, grid, configs):
        datas = [prepare(splits[k], settings.device) for k in members]
        found: list[dict[str, float]] = [{} for _ in members]
        seeds = [
            seed_for(splits[k].dataset, splits[k].split, spec.name, "final", config_key(configs[k]))
            for k in members
        ]
        # each scores its own checkpoint and predictive variant of the shared run
        reports = [
            final_report(configs[k], d, f) for k, d, f in zip(members, datas, found, strict=True)
        ]
        try:
            _stacked_run(
                spec,
                run,
                datas,
                seeds,
                sorted({int(configs[k]["epochs"]) for k in members}),
                reports,
                settings.test_samples,
            )
        except (*_TRAINING_FAILURES, NotImplementedError):
            continue
        for k, got in zip(members, found, strict=True):
            scores[k] = got or None
    return scores


def run_bundle(tasks: list[Task], settings: BenchmarkSettings) -> list[dict[str, Any]]:
    """The records of ``tasks`` (one data set and method, several splits), trained together
    where the method allows (see the module docstring); in the order of ``tasks``.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from benchmarks.uci.writer import write_uci_folder
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     X, y = torch.randn(40, 3), torch.randn(40)
        ...     folder = str(write_uci_folder(Path(tmp) / "toy", X, y))
        ...     tasks = [Task("toy", folder, s, "vi") for s in (0, 1)]
        ...     records = run_bundle(tasks, BenchmarkSettings(quick=True))
        >>> [(r["split"], r["stacked"], "test_ll" in r) for r in records]
        [(0, 2, True), (1, 2, True)]
    """
    spec = get_method(tasks[0].method)
    splits = [load_uci_split(t.folder, t.split) for t in tasks]
    sizes = {(tuple(s.X_train.shape), tuple(s.X_test.shape)) for s in splits}
    if spec.train_stacked is None or len(tasks) < 2 or len(sizes) > 1:
        return [run_task(t, settings) for t in tasks]
    start = time.perf_counter()
    grid = spec.grid(dataset_info(tasks[0].folder, splits[0]), settings.quick)
    records = _search(spec, splits, grid, settings)
    searched = time.perf_counter()
    ranked = [ranked_records(r) for r in records]
    chosen = [dict(r[0]["config"]) if r else None for r in ranked]
    runnable = [k for k, c in enumerate(chosen) if c is not None]
    final = _final(
        spec, [splits[k] for k in runnable], [chosen[k] for k in runnable], grid, settings
    )
    done = time.perf_counter()
    share = len(tasks)
    out: list[dict[str, Any]] = []
    for k, task in enumerate(tasks):
        scores = final[runnable.index(k)] if k in runnable else None
        if scores is None:  # failed together (or nothing chosen): this split the usual way
            out.append(run_task(task, settings))
            continue
        split = splits[k]
        out.append(
            {
                "dataset": task.dataset,
                "split": task.split,
                "method": task.method,
                "test_ll": scores["test_ll"],
                "rmse": scores["rmse"],
                "coverage_95": scores["coverage_95"],
                "config": chosen[k],
                "val_ll": ranked[k][0]["val_ll"],
                **final_check(scores.get("train_rmse"), ranked[k][0].get("val_rmse")),
                "n_train": int(split.X_train.shape[0]),
                "n_test": int(split.X_test.shape[0]),
                "search_seconds": (searched - start) / share,
                "final_seconds": (done - searched) / share,
                "fallbacks": [],
                "records": records[k],
                "threads": torch.get_num_threads(),
                "stacked": share,
            }
        )
    return out


def refit_final_group(
    folder: str, records: list[Mapping[str, Any]], split: int, settings: BenchmarkSettings
) -> dict[int, dict[str, float]]:
    """The test scores of a committed run's final fit of ``split``, re-run without the search.

    ``records`` are the run's records of one (data set, method), every split: their chosen
    configurations say which splits :func:`run_bundle` trained together in the final fit that
    holds ``split`` (:func:`final_groups`), and that group is trained again, every member with
    its own seed and rows, so its scores are the run's up to float rounding. A record trained
    alone (a method that does not stack: no ``"stacked"`` key) is refitted alone, as
    :func:`~benchmarks.uci.runner.run_task`'s final fit.

    Returns:
        ``{split: {"test_ll", "rmse", "coverage_95", "train_rmse"}}`` for every split of the
        group.

    Raises:
        ValueError: ``split`` has no record, or its record failed or fell back to another
            configuration, or a stacked run's records are not all from its bundle (the re-run
            would not be the same fit).
        RuntimeError: the group failed to train together.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from benchmarks.uci.writer import write_uci_folder
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     folder = str(write_uci_folder(Path(tmp) / "toy", torch.randn(40, 3),
        ...                                   torch.randn(40)))
        ...     settings = BenchmarkSettings(quick=True)
        ...     records = run_bundle([Task("toy", folder, s, "swag") for s in (0, 1)], settings)
        ...     again = refit_final_group(folder, records, 1, settings)
        >>> [abs(again[r["split"]]["test_ll"] - r["test_ll"]) < 1e-6 for r in records]
        [True, True]
    """
    ordered = sorted(records, key=lambda r: int(r["split"]))
    record = next((r for r in ordered if int(r["split"]) == split), None)
    if record is None or "error" in record or record.get("fallbacks"):
        raise ValueError(f"split {split} has no clean record to refit: {record!r}")
    spec = get_method(str(record["method"]))
    if "stacked" not in record:
        return {split: _final_fit(spec, load_uci_split(folder, split), record["config"], settings)}
    if any("stacked" not in r or "error" in r for r in ordered):
        raise ValueError("every record of a stacked run must come from its bundle")
    splits = [load_uci_split(folder, int(r["split"])) for r in ordered]
    grid = spec.grid(dataset_info(folder, splits[0]), settings.quick)
    configs = [dict(r["config"]) for r in ordered]
    members = next(m for _, m in final_groups(spec, grid, configs) if split in
                   [int(ordered[k]["split"]) for k in m])  # fmt: skip
    scores = _final(spec, [splits[k] for k in members], [configs[k] for k in members], grid,
                    settings)  # fmt: skip
    picked = [int(ordered[k]["split"]) for k in members]
    if any(s is None for s in scores):
        raise RuntimeError(f"the final group of splits {picked} failed to train together")
    return dict(zip(picked, scores, strict=True))  # type: ignore[arg-type]
