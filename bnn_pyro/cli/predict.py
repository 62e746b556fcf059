"""``bnn-pyro predict``: mean and std per row (regression) or class probabilities, to CSV."""

from __future__ import annotations

import argparse
import os

from bnn_pyro.cli.errors import naming
from bnn_pyro.exceptions import CLIError

# numpy and the methods are imported where predict runs: building the parser imports neither

__all__ = ["add_parser", "run_predict"]


def run_predict(args: argparse.Namespace) -> int:
    """``bnn-pyro predict``: mean and std (regression) or class probabilities per row.

    The feature columns are found by name (the model stores them); other columns are ignored.

    Args:
        args: the parsed arguments of ``bnn-pyro predict``.

    Returns:
        0 (errors raise naming the option, ``--model``, ``--data`` or ``--out``, and
        :func:`bnn_pyro.cli.main` prints them in one line, exit code 2). ``--out`` is written
        whole or not at all.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from bnn_pyro.cli import main
        >>> folder = Path(tempfile.mkdtemp())
        >>> rows = "".join(f"{i},{i % 2}\\n" for i in range(20))
        >>> _ = (folder / "d.csv").write_text("x,y\\n" + rows)
        >>> main(["fit", "--data", str(folder / "d.csv"), "--target", "y", "--task",
        ...       "classification", "--method", "ensemble", "--epochs", "2", "--out", str(folder),
        ...       "--quiet"])  # doctest: +ELLIPSIS
        classification with ensemble ...
        0
        >>> data = str(folder / "d.csv")
        >>> main(["predict", "--model", str(folder / "model.pt"), "--data", data])
        ... # doctest: +ELLIPSIS
        prediction,p_0,p_1
        ...
        0
        >>> import shutil; shutil.rmtree(folder)
    """
    import numpy as np

    from bnn_pyro.cli.io import read_csv, write_csv

    if args.out is not None and not os.path.isdir(os.path.dirname(os.path.abspath(args.out))):
        raise CLIError(f"--out: {args.out}: its folder does not exist")
    if not os.path.isfile(args.model):
        raise CLIError(f"--model: {args.model}: no such model file")
    from bnn_pyro.estimators import TabularBNN  # torch: after the checks of the paths (a second)

    with naming("--model"):
        model = TabularBNN.load(args.model)
    with naming("--data"):
        table = read_csv(args.data)
    features = model.metadata.get("feature_names")
    if features is None:  # saved from Python without names: the columns in order
        features = table.header
    missing = [name for name in features if name not in table.header]
    if missing:
        raise CLIError(
            f"--data: {args.data}: the model needs the column(s) {', '.join(map(repr, missing))}"
        )
    with naming("--data"):
        X = table.numbers(features)
    if X.shape[1] != model.n_features:
        raise CLIError(f"--data: {args.data}: the model needs {model.n_features} feature column(s)")
    mean, std = model.predict(X)
    if model.task == "regression":
        write_csv(args.out, ["mean", "std"], np.c_[mean[:, :1], std[:, :1]].tolist())
        return 0
    classes = model.metadata.get("classes") or [str(c) for c in range(mean.shape[1])]
    header = ["prediction"] + [f"p_{c}" for c in classes]
    rows = [[classes[int(np.argmax(p))], *p.tolist()] for p in mean]
    write_csv(args.out, header, rows)
    return 0


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``predict`` to the subcommands ``sub`` of ``bnn-pyro``; return its parser, whose
    ``func`` is :func:`run_predict`.

    Example:
        >>> from bnn_pyro.cli.io import parse_with
        >>> args = parse_with(add_parser, ["predict", "--model", "run/model.pt", "--data", "d.csv"])
        >>> args.model, args.out, args.func is run_predict
        ('run/model.pt', None, True)
    """
    predict = sub.add_parser(
        "predict",
        help="predict with a model.pt: mean and std (or class probabilities) per row, as CSV",
        description="Read the feature columns the model was trained on from a CSV file and "
        "write one row per input: mean,std for regression (std: the total predictive std, "
        "noise included); prediction,p_<class>... for classification.",
    )
    predict.add_argument("--model", required=True, help="model.pt written by bnn-pyro fit")
    predict.add_argument("--data", required=True, help="CSV file with the feature columns")
    predict.add_argument("--out", help="output CSV file (default: stdout)")
    predict.set_defaults(func=run_predict)
    return predict
