"""``main(argv)``: the UCI benchmark command, ``python -m benchmarks.uci`` (repository root).

Example:
    ``python -m benchmarks.uci --data benchmarks/uci/data --out benchmarks/results/uci --jobs 2``
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._report import repo_command
from benchmarks.uci.data import uci_num_splits
from benchmarks.uci.parallel import BACKENDS, check_backend, run_tasks
from benchmarks.uci.registry import available_methods, get_method, runnable_methods
from benchmarks.uci.results import (
    append_jsonl,
    drop_partial_line,
    markdown_report,
    read_jsonl,
    summarize,
    write_charts,
    write_json,
)
from benchmarks.uci.runner import BenchmarkSettings, Task
from benchmarks.uci.selection import parse_names, parse_splits

__all__ = ["build_parser", "find_datasets", "main", "render"]

RUNS_FILE = "uci_runs.jsonl"
JSON_FILE = "uci.json"
MARKDOWN_FILE = "uci.md"


def find_datasets(path: str | Path) -> dict[str, Path]:
    """Data set folders under ``path``: ``path`` itself if it holds ``data.txt``, else its
    sub-folders that do.

    Args:
        path: one data set folder, or a folder of them.

    Returns:
        ``{name: folder}``, sorted by name.

    Raises:
        FileNotFoundError: if ``path`` is not a folder or holds no data set.

    Example:
        >>> import tempfile, torch
        >>> from benchmarks.uci.writer import write_uci_folder
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     _ = write_uci_folder(Path(tmp) / "toy", torch.randn(10, 2), torch.randn(10))
        ...     list(find_datasets(tmp)), list(find_datasets(Path(tmp) / "toy"))
        (['toy'], ['toy'])
    """
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"--data {str(path)!r} is not a folder")
    if (path / "data.txt").is_file():
        return {path.name: path}
    found = {p.name: p for p in sorted(path.iterdir()) if (p / "data.txt").is_file()}
    if not found:
        raise FileNotFoundError(
            f"--data {str(path)!r} holds no UCI data set (a folder with data.txt, index_*.txt)"
        )
    return found


def build_parser(prog: str = "python -m benchmarks.uci") -> argparse.ArgumentParser:
    """The benchmark's argument parser.

    Example:
        >>> args = build_parser().parse_args(["--data", "uci", "--splits", "0-4", "--jobs", "2"])
        >>> args.splits, args.jobs, args.methods, args.quick
        ('0-4', 2, 'all', False)
    """
    parser = argparse.ArgumentParser(
        prog=prog,
        description="UCI regression benchmark (Hernandez-Lobato & Adams 2015 protocol): "
        "hyper-parameters chosen on the last 20% of each training split, retrained, scored on "
        "the test split in original units; mean ± standard error over splits.",
    )
    parser.add_argument("--data", required=True, help="a UCI data set folder, or a folder of them")
    parser.add_argument(
        "--datasets", default="all", help="comma-separated folder names (default: all)"
    )
    parser.add_argument("--splits", default="all", help="e.g. '0-4', '0,3' or 'all' (default: all)")
    parser.add_argument(
        "--methods",
        default="all",
        help=f"comma-separated, from {runnable_methods()} (default: all, the tuned "
        f"{available_methods()})",
    )
    parser.add_argument("--jobs", type=int, default=1, help="workers (default: 1: in process)")
    parser.add_argument(
        "--backend",
        default="loky",
        choices=list(BACKENDS),
        help="joblib backend for --jobs > 1: local processes (loky, multiprocessing), a Dask "
        "cluster (dask: a local one unless --scheduler) or Ray (default: %(default)s)",
    )
    parser.add_argument(
        "--scheduler", default=None, help="a Dask scheduler address for --backend dask"
    )
    parser.add_argument(
        "--out", default="benchmarks/results/uci", help="output folder (default: %(default)s)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny grids, few epochs: a smoke test only"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help=f"keep the finished tasks in OUT/{RUNS_FILE} and run only the others",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar or per-task lines")
    parser.add_argument(
        "--device",
        default="cpu",
        help="where the models train: cpu, cuda, cuda:1 (default: %(default)s)",
    )
    parser.add_argument(
        "--render-only",
        action="store_true",
        help=f"run nothing: rewrite OUT/{MARKDOWN_FILE} and the charts from OUT/{JSON_FILE}",
    )
    return parser


def render(out: str | Path) -> dict[str, Any]:
    """Rewrite ``uci.md`` and the charts in ``out`` from its ``uci.json``; return the payload.

    Raises:
        FileNotFoundError: if ``out`` has no ``uci.json``.
    """
    path = Path(out) / JSON_FILE
    if not path.is_file():
        raise FileNotFoundError(f"--render-only needs {path} (run the benchmark first)")
    payload = json.loads(path.read_text())
    (Path(out) / MARKDOWN_FILE).write_text(markdown_report(payload))
    if payload["summary"]:
        labels = {m: info["label"] for m, info in payload["methods"].items()}
        write_charts(payload["summary"], out, labels)
    return payload


def _versions() -> dict[str, str]:
    import numpy
    import pyro
    import torch

    import bnn_pyro

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "pyro": pyro.__version__,
        "numpy": numpy.__version__,
        "bnn_pyro": bnn_pyro.__version__,
        "platform": platform.platform(),
    }


def _tasks(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[Task]:
    try:
        folders = find_datasets(args.data)
        names = parse_names(args.datasets, list(folders), "datasets")
        methods = (
            available_methods()
            if args.methods.strip().lower() == "all"
            else parse_names(args.methods, runnable_methods(), "methods")
        )
        splits = {name: _splits(args.splits, name, folders[name]) for name in names}
    except (ValueError, FileNotFoundError) as err:
        parser.error(str(err))
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    try:
        check_backend(args.backend)
    except ValueError as err:
        parser.error(f"--backend {args.backend}: {err}")
    if args.scheduler is not None and args.backend != "dask":
        parser.error("--scheduler is only used with --backend dask")
    order = sorted(methods, key=lambda m: -get_method(m).cost)  # long tasks first in each split
    return [
        Task(name, str(folders[name]), split, method)
        for split in sorted(set().union(*splits.values()))
        for name in names
        if split in splits[name]
        for method in order
    ]


def _splits(text: str, name: str, folder: str | Path) -> list[int]:
    """``--splits`` for one data set: ``all`` is that set's own splits (sets of 8 and 6 splits
    run 8 and 6, not 6 each); a split it does not have is an error naming the set."""
    try:
        return parse_splits(text, uci_num_splits(folder))
    except ValueError as err:
        raise ValueError(f"{name}: {err}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the UCI benchmark; write ``uci.json``, ``uci.md`` and the charts to ``--out``.

    Args:
        argv: the command-line arguments (default ``sys.argv[1:]``); see :func:`build_parser`.

    Returns:
        0 on success, 1 if some task failed (the others are still written), 130 if stopped by
        Ctrl-C or SIGTERM (the workers are stopped; the finished tasks are in the runs file,
        one complete JSON line each, for ``--resume``). Bad arguments exit with code 2
        (argparse).

    Example:
        >>> import tempfile, torch
        >>> from benchmarks.uci.writer import write_uci_folder
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     _ = write_uci_folder(Path(tmp) / "toy", torch.randn(40, 2), torch.randn(40))
        ...     code = main(["--data", tmp, "--splits", "0", "--methods", "ensemble",
        ...                  "--quick", "--quiet", "--out", tmp])
        ...     code, sorted(p.name for p in Path(tmp).glob("uci*"))
        (0, ['uci.json', 'uci.md', 'uci_rmse.png', 'uci_runs.jsonl', 'uci_test_ll.png'])
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.render_only:
        try:
            payload = render(args.out)
        except FileNotFoundError as err:
            parser.error(str(err))
        if not args.quiet:
            print(markdown_report(payload), flush=True)
        return 0
    tasks = _tasks(args, parser)
    try:
        settings = BenchmarkSettings(quick=args.quick, device=args.device)
    except (TypeError, ValueError) as err:
        parser.error(str(err))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs_path = out / RUNS_FILE
    done: dict[tuple, dict[str, Any]] = {}
    if args.resume:
        drop_partial_line(runs_path)  # a line cut by a kill mid-write
        for record in read_jsonl(runs_path):
            if record.get("settings") == settings.to_dict() and "error" not in record:
                done[(record["dataset"], record["split"], record["method"])] = record
    elif runs_path.exists():
        runs_path.unlink()
    todo = [t for t in tasks if (t.dataset, t.split, t.method) not in done]
    if not args.quiet:
        print(
            f"{len(tasks)} tasks ({len(tasks) - len(todo)} already done), {args.jobs} "
            f"process(es), settings {settings.to_dict()}",
            flush=True,
        )

    def save(record: dict[str, Any]) -> None:
        append_jsonl(runs_path, {**record, "settings": settings.to_dict()})

    start = time.perf_counter()
    try:
        fresh = run_tasks(
            todo,
            settings,
            args.jobs,
            on_result=save,
            progress=not args.quiet,
            backend=args.backend,
            scheduler=args.scheduler,
        )
    except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM: the workers are already stopped
        saved = len(read_jsonl(runs_path))
        print(
            f"interrupted ({stop or 'Ctrl-C'}): {saved} finished task(s) in {runs_path}; "
            "run again with --resume to continue",
            file=sys.stderr,
            flush=True,
        )
        return 130
    wall = time.perf_counter() - start
    by_key = {(r["dataset"], r["split"], r["method"]): r for r in [*done.values(), *fresh]}
    runs = [by_key[(t.dataset, t.split, t.method)] for t in tasks]
    runs = [{k: v for k, v in r.items() if k != "settings"} for r in runs]
    order = {m: i for i, m in enumerate(runnable_methods())}
    runs.sort(key=lambda r: (r["dataset"], order[r["method"]], r["split"]))
    summary = summarize(runs)
    methods = sorted({t.method for t in tasks}, key=order.get)
    payload = {
        "command": repo_command(list(getattr(sys, "orig_argv", sys.argv))),
        "arguments": [repo_command([a]) for a in argv],
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "wall_time": f"{wall / 3600:.2f} h ({wall:.0f} s, this invocation)",
        "wall_time_seconds": wall,
        "versions": _versions(),
        "settings": {**settings.to_dict(), "jobs": args.jobs, "backend": args.backend},
        "methods": {
            m: {"label": get_method(m).label, "description": get_method(m).description}
            for m in methods
        },
        "summary": summary,
        "runs": runs,
    }
    write_json(out / JSON_FILE, payload)
    (out / MARKDOWN_FILE).write_text(markdown_report(payload))
    if summary:
        write_charts(summary, out, {m: get_method(m).label for m in methods})
    if not args.quiet:
        print(markdown_report(payload), flush=True)
    return 1 if any("error" in r for r in runs) else 0
