"""Run benchmark tasks through joblib (processes here, a Dask or Ray cluster through joblib's
backends), one torch thread per task, with a progress bar.

``run_tasks(..., jobs=1)`` runs in this process. With ``jobs > 1`` the tasks go to
``joblib.Parallel`` under the chosen backend (:data:`BACKENDS`): ``"loky"`` (default: worker
processes on this machine), ``"multiprocessing"``, ``"dask"`` (a ``dask.distributed`` cluster:
the scheduler at ``scheduler`` if given, else a local cluster of ``jobs`` worker processes) or
``"ray"`` (Ray's joblib backend). Records come back as tasks finish (``return_as=
"generator_unordered"``), so the caller's resume file grows one whole record at a time,
whatever the backend: a run stopped under one backend resumes under another.

The splits of a (data set, method) whose method trains stacked go to one worker as one job
(:mod:`benchmarks.uci.bundle`); their records arrive together when it ends.

Stopping: SIGTERM to the parent raises ``KeyboardInterrupt`` in it, as Ctrl-C (SIGINT) does;
either way joblib aborts the run and ends its local workers before the error propagates (for
Dask, the local cluster is closed; tasks already sent to a remote cluster are cancelled). The
tasks ignore SIGINT: a Ctrl-C that reaches the whole process group stops them through the
parent, never half-way through reporting a result.
"""

from __future__ import annotations

import importlib.util
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any

import joblib
import torch
from tqdm.auto import tqdm

from benchmarks.uci.bundle import bundled, run_bundle
from benchmarks.uci.runner import BenchmarkSettings, Task, run_task

__all__ = ["BACKENDS", "check_backend", "run_tasks"]

OnResult = Callable[[dict[str, Any]], None]

#: joblib backends ``--backend`` takes, and the package (and pip install) each needs.
BACKENDS: dict[str, tuple[str | None, str | None]] = {
    "loky": (None, None),
    "multiprocessing": (None, None),
    "dask": ("distributed", "dask[distributed]"),
    "ray": ("ray", "ray"),
}


def check_backend(backend: str) -> None:
    """Refuse an unknown backend, or one whose package is not installed, before any work.

    Example:
        >>> check_backend("loky")
        >>> check_backend("spark")
        Traceback (most recent call last):
          ...
        ValueError: backend must be one of ['loky', 'multiprocessing', 'dask', 'ray'], got 'spark'
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
    module, package = BACKENDS[backend]
    if module is not None and importlib.util.find_spec(module) is None:
        raise ValueError(
            f"backend {backend!r} needs the {module!r} package, which is not installed: "
            f"pip install '{package}'"
        )


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """While inside, SIGTERM raises ``KeyboardInterrupt`` in the main thread (as SIGINT does)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def _backend(backend: str, jobs: int, scheduler: str | None) -> Iterator[None]:
    """joblib's ``parallel_config`` for ``backend`` (a Dask client or Ray registered first)."""
    if backend == "dask":
        from distributed import Client

        if scheduler:
            client = Client(scheduler)
        else:
            client = Client(
                n_workers=jobs, threads_per_worker=1, processes=True, dashboard_address=None
            )
        try:
            with joblib.parallel_config(backend="dask"):
                yield
        finally:
            client.close()
            if client.cluster is not None:
                client.cluster.close()
        return
    if backend == "ray":
        from ray.util.joblib import register_ray

        register_ray()
    with joblib.parallel_config(backend=backend):
        yield


def _group(
    indices: list[int], group: list[Task], settings: BenchmarkSettings
) -> list[tuple[int, dict[str, Any]]]:
    """One group of tasks on a worker (see :func:`benchmarks.uci.bundle.bundled`): one torch
    thread, SIGINT left to the parent."""
    torch.set_num_threads(1)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the workers
    return list(zip(indices, _guarded_group(group, settings), strict=True))


def _guarded_group(group: list[Task], settings: BenchmarkSettings) -> list[dict[str, Any]]:
    """The group's records: stacked (:func:`~benchmarks.uci.bundle.run_bundle`) when it has
    several splits, else :func:`_guarded`; a bundle that raises runs split by split."""
    if len(group) > 1:
        try:
            return run_bundle(group, settings)
        except Exception:  # noqa: BLE001 - each split then runs (and reports) on its own
            pass
    return [_guarded(task, settings) for task in group]


def _in_parallel(
    tasks: list[Task],
    settings: BenchmarkSettings,
    jobs: int,
    finish: Callable[[int, dict[str, Any]], None],
    backend: str,
    scheduler: str | None,
) -> None:
    groups = _indexed_groups(tasks)
    with _backend(backend, jobs, scheduler):
        parallel = joblib.Parallel(n_jobs=jobs, return_as="generator_unordered")
        results = parallel(joblib.delayed(_group)(i, g, settings) for i, g in groups)
        try:
            for finished in results:
                for index, record in finished:
                    finish(index, record)
        finally:
            results.close()  # on an interrupt: joblib aborts the run and ends its workers


def _indexed_groups(tasks: list[Task]) -> list[tuple[list[int], list[Task]]]:
    """The task groups with the tasks' positions, bundles of several splits first (the longest
    jobs start first)."""
    position = {id(t): i for i, t in enumerate(tasks)}
    groups = [([position[id(t)] for t in g], g) for g in bundled(tasks)]
    return sorted(groups, key=lambda ig: len(ig[1]) == 1)


def _guarded(task: Task, settings: BenchmarkSettings) -> dict[str, Any]:
    """:func:`run_task` that turns an exception into an error record (the run goes on)."""
    start = time.perf_counter()
    try:
        return run_task(task, settings)
    except Exception as err:  # noqa: BLE001 - reported in the results, never swallowed silently
        return {
            "dataset": task.dataset,
            "split": task.split,
            "method": task.method,
            "error": f"{err!r}\n{traceback.format_exc()}",
            "search_seconds": time.perf_counter() - start,
            "final_seconds": 0.0,
        }


def _describe(record: dict[str, Any]) -> str:
    head = f"{record['dataset']} split {record['split']} {record['method']}"
    if "error" in record:
        return f"{head}: FAILED {record['error'].splitlines()[0]}"
    seconds = record["search_seconds"] + record["final_seconds"]
    config = ", ".join(f"{k}={v}" for k, v in record["config"].items())
    return (
        f"{head}: test_ll {record['test_ll']:.3f}, rmse {record['rmse']:.3f} "
        f"[{config}] ({seconds:.0f} s)"
    )


def run_tasks(
    tasks: Sequence[Task],
    settings: BenchmarkSettings,
    jobs: int = 1,
    on_result: OnResult | None = None,
    progress: bool = True,
    backend: str = "loky",
    scheduler: str | None = None,
) -> list[dict[str, Any]]:
    """Run ``tasks`` on ``jobs`` workers and return their records in task order.

    With ``jobs == 1`` the tasks run in this process (with one torch thread, restored after);
    otherwise through ``joblib.Parallel`` under ``backend`` (see the module), one torch thread
    per task. Each
    finished task is printed (its scores and chosen hyper-parameters) and passed to
    ``on_result`` as it arrives, so a long run can save partial results. A task that raises
    becomes a record with an ``"error"`` key. SIGTERM or Ctrl-C stops the workers (none
    outlives this call) and raises ``KeyboardInterrupt``; the records passed to ``on_result``
    before it are complete.

    Args:
        tasks: the tasks.
        settings: benchmark settings.
        jobs: number of workers (>= 1).
        on_result: called with each record as it finishes.
        progress: show a tqdm bar (with an ETA) and print each finished task.
        backend: the joblib backend for ``jobs > 1`` (:data:`BACKENDS`).
        scheduler: a Dask scheduler address (``backend="dask"``); ``None``: a local cluster.

    Returns:
        One record per task, in the order of ``tasks``.

    Raises:
        TypeError: if ``tasks`` does not hold :class:`Task` s or ``settings`` is not
            :class:`BenchmarkSettings`.
        ValueError: if ``jobs < 1``, or the backend is unknown or not installed.

    Example:
        >>> import tempfile, torch
        >>> from pathlib import Path
        >>> from benchmarks.uci.writer import write_uci_folder
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     X, y = torch.randn(40, 2), torch.randn(40)
        ...     folder = str(write_uci_folder(Path(tmp) / "toy", X, y))
        ...     tasks = [Task("toy", folder, k, "ensemble") for k in (0, 1)]
        ...     records = run_tasks(tasks, BenchmarkSettings(quick=True), progress=False)
        >>> [(r["split"], r["method"], "test_ll" in r) for r in records]
        [(0, 'ensemble', True), (1, 'ensemble', True)]
    """
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be an int >= 1, got {jobs!r}")
    check_backend(backend)
    if not isinstance(settings, BenchmarkSettings):
        raise TypeError(f"settings must be a BenchmarkSettings, got {type(settings).__name__}")
    tasks = list(tasks)
    for task in tasks:
        if not isinstance(task, Task):
            raise TypeError(f"tasks must hold Task objects, got a {type(task).__name__}")
    results: dict[int, dict[str, Any]] = {}
    bar = tqdm(
        total=len(tasks), desc="UCI benchmark", unit="task", disable=not progress, mininterval=5
    )

    def finish(index: int, record: dict[str, Any]) -> None:
        results[index] = record
        if on_result is not None:
            on_result(record)
        if progress:
            bar.write(_describe(record))
        bar.update(1)

    try:
        with _sigterm_interrupts():
            if jobs == 1:
                threads = torch.get_num_threads()
                torch.set_num_threads(1)
                try:
                    for indices, group in _indexed_groups(tasks):
                        for index, record in zip(
                            indices, _guarded_group(group, settings), strict=True
                        ):
                            finish(index, record)
                finally:
                    torch.set_num_threads(threads)
            else:
                _in_parallel(tasks, settings, jobs, finish, backend, scheduler)
    finally:
        bar.close()
    return [results[i] for i in range(len(tasks))]
