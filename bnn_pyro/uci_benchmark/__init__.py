"""The UCI regression benchmark of issue 5: protocol, methods and their grids, runner, results.

* :mod:`~bnn_pyro.uci_benchmark.protocol`: normalised data, scores in original units,
  mean ± standard error, deterministic seeds.
* :mod:`~bnn_pyro.uci_benchmark.method` / :mod:`~bnn_pyro.uci_benchmark.registry`: what a
  method is (a grid and a training function) and the registered ones
  (:mod:`~bnn_pyro.uci_benchmark.variational`, :mod:`~bnn_pyro.uci_benchmark.baselines`).
* :mod:`~bnn_pyro.uci_benchmark.runner`: one task (search on validation rows, retrain, test);
  :mod:`~bnn_pyro.uci_benchmark.parallel`: many tasks on worker processes.
* :mod:`~bnn_pyro.uci_benchmark.results`: summary, JSON, markdown, charts.
* :func:`~bnn_pyro.uci_benchmark.cli.main`: the command.
"""

from bnn_pyro.uci_benchmark.cli import main
from bnn_pyro.uci_benchmark.method import DatasetInfo, MethodSpec
from bnn_pyro.uci_benchmark.protocol import hidden_units, mean_stderr, prepare, score, seed_for
from bnn_pyro.uci_benchmark.registry import METHODS, available_methods, get_method
from bnn_pyro.uci_benchmark.results import markdown_report, summarize
from bnn_pyro.uci_benchmark.runner import (
    BenchmarkSettings,
    Task,
    run_task,
    select_hyperparameters,
)
from bnn_pyro.uci_benchmark.selection import parse_names, parse_splits

__all__ = [
    "METHODS",
    "BenchmarkSettings",
    "DatasetInfo",
    "MethodSpec",
    "Task",
    "available_methods",
    "get_method",
    "hidden_units",
    "main",
    "markdown_report",
    "mean_stderr",
    "parse_names",
    "parse_splits",
    "prepare",
    "run_task",
    "score",
    "seed_for",
    "select_hyperparameters",
    "summarize",
]
