"""Run benchmark tasks in worker processes (one torch thread each), with a progress bar.

Stopping: SIGTERM to the parent raises ``KeyboardInterrupt`` in it, as Ctrl-C (SIGINT) does;
either way the parent terminates its workers (SIGTERM, then SIGKILL after a grace period),
waits for them, and re-raises, so no worker outlives it. The workers ignore SIGINT: a Ctrl-C
that reaches the whole process group stops them through the parent, never half-way through
reporting a result. Finished records have already been passed to ``on_result`` one by one.
"""

from __future__ import annotations

import multiprocessing
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from types import FrameType
from typing import Any

import torch
from tqdm.auto import tqdm

from benchmarks.uci.runner import BenchmarkSettings, Task, run_task

__all__ = ["run_tasks"]

OnResult = Callable[[dict[str, Any]], None]


#: Seconds the workers get to exit after SIGTERM before they are killed.
GRACE_SECONDS = 5.0


def _init_worker() -> None:
    torch.set_num_threads(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the workers


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


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Cancel the queued tasks and end the worker processes: SIGTERM, then SIGKILL."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        if process.is_alive():
            process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + GRACE_SECONDS
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join(GRACE_SECONDS)


def _in_pool(
    tasks: list[Task],
    settings: BenchmarkSettings,
    jobs: int,
    finish: Callable[[int, dict[str, Any]], None],
) -> None:
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(jobs, mp_context=context, initializer=_init_worker)
    try:
        futures = {pool.submit(_guarded, task, settings): i for i, task in enumerate(tasks)}
        for future in as_completed(futures):
            finish(futures[future], future.result())
    except BaseException:
        _stop_workers(pool)
        raise
    pool.shutdown(wait=True)


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
) -> list[dict[str, Any]]:
    """Run ``tasks`` on ``jobs`` processes and return their records in task order.

    With ``jobs == 1`` the tasks run in this process (with one torch thread, restored after);
    otherwise in a ``ProcessPoolExecutor`` of spawned workers with one torch thread each. Each
    finished task is printed (its scores and chosen hyper-parameters) and passed to
    ``on_result`` as it arrives, so a long run can save partial results. A task that raises
    becomes a record with an ``"error"`` key. SIGTERM or Ctrl-C stops the workers (none
    outlives this call) and raises ``KeyboardInterrupt``; the records passed to ``on_result``
    before it are complete.

    Args:
        tasks: the tasks.
        settings: benchmark settings.
        jobs: number of processes (>= 1).
        on_result: called with each record as it finishes.
        progress: show a tqdm bar (with an ETA) and print each finished task.

    Returns:
        One record per task, in the order of ``tasks``.

    Raises:
        TypeError: if ``tasks`` does not hold :class:`Task` s or ``settings`` is not
            :class:`BenchmarkSettings`.
        ValueError: if ``jobs < 1``.

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
                    for index, task in enumerate(tasks):
                        finish(index, _guarded(task, settings))
                finally:
                    torch.set_num_threads(threads)
            else:
                _in_pool(tasks, settings, jobs, finish)
    finally:
        bar.close()
    return [results[i] for i in range(len(tasks))]
