"""``bnn-pyro predict``: mean and std per row (regression) or class probabilities, to CSV."""

from __future__ import annotations

import argparse
import os

import numpy as np

from bnn_pyro.cli_io import CLIError, read_csv, write_csv

__all__ = ["run_predict"]


def run_predict(args: argparse.Namespace) -> int:
    """``bnn-pyro predict``: mean and std (regression) or class probabilities per row."""
    from bnn_pyro.estimators import TabularBNN

    if not os.path.isfile(args.model):
        raise CLIError(f"{args.model}: no such model file")
    try:
        model = TabularBNN.load(args.model)
    except ValueError as err:
        raise CLIError(str(err)) from None
    table = read_csv(args.data)
    features = model.metadata.get("feature_names")
    if features is None:  # saved from Python without names: the columns in order
        features = table.header
    missing = [name for name in features if name not in table.header]
    if missing:
        raise CLIError(
            f"{args.data}: the model needs the column(s) {', '.join(map(repr, missing))}"
        )
    X = table.numbers(features)
    if X.shape[1] != model.n_features:
        raise CLIError(f"{args.data}: the model needs {model.n_features} feature column(s)")
    mean, std = model.predict(X)
    if model.task == "regression":
        write_csv(args.out, ["mean", "std"], np.c_[mean[:, :1], std[:, :1]].tolist())
        return 0
    classes = model.metadata.get("classes") or [str(c) for c in range(mean.shape[1])]
    header = ["prediction"] + [f"p_{c}" for c in classes]
    rows = [[classes[int(np.argmax(p))], *p.tolist()] for p in mean]
    write_csv(args.out, header, rows)
    return 0
