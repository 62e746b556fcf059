"""The UCI regression benchmark: data, protocol, methods and their grids, runner,
results. Part of the repository, not of the installed ``bnn_pyro``: run it from the repository
root as ``python -m benchmarks.uci --data benchmarks/uci/data --out benchmarks/results/uci``.

* :mod:`~benchmarks.uci.data`: the split-folder loader (any folder of the
  ``benchmarks/uci/data/<name>/`` format, by path; its ``README.md`` gives the layout);
  :mod:`~benchmarks.uci.writer` writes one.
* :mod:`~benchmarks.uci.published`: published test log-likelihoods and RMSEs on the splits.
* :mod:`~benchmarks.uci.protocol`: normalised data, scores in original units,
  mean ± standard error, deterministic seeds.
* :mod:`~benchmarks.uci.method` / :mod:`~benchmarks.uci.registry`: what a
  method is (a grid and a training function) and the registered ones
  (:mod:`~benchmarks.uci.variational`, :mod:`~benchmarks.uci.baselines`).
* :mod:`~benchmarks.uci.runner`: one task (search on validation rows, retrain, test);
  :mod:`~benchmarks.uci.parallel`: many tasks on worker processes.
* :mod:`~benchmarks.uci.results`: summary, JSON, markdown, charts
  (:func:`~benchmarks.uci.plots.plot_uci_results`).
* :func:`~benchmarks.uci.cli.main`: the command (``python -m benchmarks.uci``).
"""

from benchmarks.uci.cli import main
from benchmarks.uci.data import (
    UCIHyperparameters,
    UCISplit,
    load_uci_hyperparameters,
    load_uci_split,
    uci_num_splits,
    validation_split,
)
from benchmarks.uci.method import DatasetInfo, MethodSpec
from benchmarks.uci.plots import plot_uci_results
from benchmarks.uci.protocol import hidden_units, mean_stderr, prepare, score, seed_for
from benchmarks.uci.published import PUBLISHED_UCI
from benchmarks.uci.registry import METHODS, available_methods, get_method
from benchmarks.uci.results import markdown_report, summarize
from benchmarks.uci.runner import (
    BenchmarkSettings,
    Task,
    run_task,
    select_hyperparameters,
)
from benchmarks.uci.selection import parse_names, parse_splits
from benchmarks.uci.writer import write_uci_folder

__all__ = [
    "METHODS",
    "PUBLISHED_UCI",
    "BenchmarkSettings",
    "DatasetInfo",
    "MethodSpec",
    "Task",
    "UCIHyperparameters",
    "UCISplit",
    "available_methods",
    "get_method",
    "hidden_units",
    "load_uci_hyperparameters",
    "load_uci_split",
    "main",
    "markdown_report",
    "mean_stderr",
    "parse_names",
    "parse_splits",
    "plot_uci_results",
    "prepare",
    "run_task",
    "score",
    "seed_for",
    "select_hyperparameters",
    "summarize",
    "uci_num_splits",
    "validation_split",
    "write_uci_folder",
]
