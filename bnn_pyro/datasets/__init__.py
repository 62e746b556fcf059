"""Data sets: embedded toy problems, the UCI split-folder loader and published UCI results.

Toy problems (deterministic from ``seed``): :func:`toy_regression_1d`, :func:`toy_function`,
:func:`two_moons`, :func:`load_digits_split`.

UCI regression (any folder of the ``shared/data/uci/<name>/`` format, by path):
:func:`load_uci_split` -> :class:`UCISplit`, :func:`uci_num_splits`,
:func:`load_uci_hyperparameters`, :func:`validation_split`, :func:`write_uci_folder`.

:data:`PUBLISHED_UCI`: published test log-likelihoods and RMSEs on the UCI splits.
"""

from bnn_pyro.datasets.published import PUBLISHED_UCI
from bnn_pyro.datasets.toy import (
    ClassificationSplit,
    load_digits_split,
    toy_function,
    toy_regression_1d,
    two_moons,
)
from bnn_pyro.datasets.uci import (
    UCIHyperparameters,
    UCISplit,
    load_uci_hyperparameters,
    load_uci_split,
    uci_num_splits,
    validation_split,
)
from bnn_pyro.datasets.uci_writer import write_uci_folder

__all__ = [
    "PUBLISHED_UCI",
    "ClassificationSplit",
    "UCIHyperparameters",
    "UCISplit",
    "load_digits_split",
    "load_uci_hyperparameters",
    "load_uci_split",
    "toy_function",
    "toy_regression_1d",
    "two_moons",
    "uci_num_splits",
    "validation_split",
    "write_uci_folder",
]
