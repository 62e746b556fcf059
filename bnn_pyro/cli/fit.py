"""``bnn-pyro fit``: a BNN on a CSV file.

It writes ``DIR/model.pt`` (a :class:`~bnn_pyro.estimators.TabularBNN` with the
standardisation, the feature names, the target and the task; it loads with
``torch.load(weights_only=True)``), ``DIR/metrics.json`` (train and, with a validation split,
held-out metrics) and a plot: ``calibration.png`` (regression: coverage of the central
predictive intervals) or ``reliability.png`` (classification).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from bnn_pyro.cli.errors import naming, one_line
from bnn_pyro.cli.output import staged_folder
from bnn_pyro.exceptions import CLIError

if TYPE_CHECKING:
    import numpy as np

# numpy, torch and the methods are imported where a fit runs, not here: building the parser
# (``bnn-pyro --help``) imports none of them

__all__ = ["MethodNames", "add_parser", "evaluate", "method_choices", "parse_hidden", "run_fit"]


def method_choices() -> tuple[str, ...]:
    """The ``--method`` choices: the :data:`bnn_pyro.METHODS` names ``bnn-pyro fit`` can train.

    ``fit`` trains through :class:`~bnn_pyro.estimators.TabularBNN`, which builds every
    registered method from its :class:`~bnn_pyro.spec.MethodSpec`: all the registry names, in
    registry order, read when the parser is built (a method folder added later is offered).

    Example:
        >>> from bnn_pyro.registry import METHODS
        >>> method_choices()[:2], set(method_choices()) == set(METHODS)
        (('vi', 'lrt'), True)
    """
    from bnn_pyro.registry import METHODS

    return tuple(METHODS)


class MethodNames:
    """``--method``'s choices, :func:`method_choices` read when argparse first needs them (a
    check of a value, ``fit --help``): building the parser imports no method.

    Example:
        >>> names = MethodNames()
        >>> "swag" in names, "no_such_method" in names, list(names)[0]
        (True, False, 'vi')
    """

    def __contains__(self, name: object) -> bool:
        return name in method_choices()

    def __iter__(self) -> Iterator[str]:
        return iter(method_choices())


def parse_hidden(text: str) -> tuple[int, ...]:
    """``"50,50"`` -> ``(50, 50)``; ``""`` -> ``()`` (no hidden layer). For argparse ``type=``.

    Example:
        >>> parse_hidden("64, 32")
        (64, 32)
    """
    if not text.strip():
        return ()
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated layer widths such as 50,50, got {text!r}"
        ) from None
    if any(size < 1 for size in sizes):
        raise argparse.ArgumentTypeError(f"layer widths must be >= 1, got {text!r}")
    return sizes


def _split(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Shuffled train and validation row indices; no validation rows if there are too few."""
    import numpy as np

    order = np.random.default_rng(seed).permutation(n)
    n_val = int(round(fraction * n))
    if n_val < 1 or n - n_val < 2:
        return np.sort(order), order[:0]
    return np.sort(order[n_val:]), np.sort(order[:n_val])


def evaluate(model: Any, X: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """Metrics of a fitted :class:`~bnn_pyro.estimators.TabularBNN` on ``X (N, D)``.

    Regression (``y (N,)`` floats): ``rmse``, ``log_likelihood`` (mean per point, nats),
    ``crps``, ``calibration_error`` of the central intervals and ``mean_std`` (total
    predictive std). Classification (``y (N,)`` labels ``0..C-1``): ``accuracy``, ``nll``,
    ``brier`` and ``ece``.

    Args:
        model: a fitted :class:`~bnn_pyro.estimators.TabularBNN`.
        X: ``(N, D)`` inputs.
        y: ``(N,)`` targets or labels.

    Returns:
        ``{metric name: value}``.

    Example:
        >>> import numpy as np
        >>> from bnn_pyro.estimators import TabularBNN
        >>> X = np.arange(10.0)[:, None]; y = (X[:, 0] > 4).astype(int)
        >>> model = TabularBNN("classification", "ensemble", epochs=3, ensemble_size=2)
        >>> sorted(evaluate(model.fit(X, y), X, y))
        ['accuracy', 'brier', 'ece', 'nll']
    """
    import torch

    from bnn_pyro import metrics

    if model.task == "regression":
        locs, scales = model.predictive_gaussian(X)
        target = torch.as_tensor(y, dtype=locs.dtype).reshape(-1, 1)
        mean, std = model.predict(X)
        return {
            "rmse": metrics.rmse(torch.as_tensor(mean), target),
            "log_likelihood": metrics.gaussian_log_likelihood(locs, scales, target),
            "crps": metrics.crps_gaussian_mixture(locs, scales, target),
            "calibration_error": metrics.regression_calibration(locs, scales, target).error,
            "mean_std": float(std.mean()),
        }
    probs = torch.as_tensor(model.predict(X)[0])
    labels = torch.as_tensor(y, dtype=torch.long)
    return {
        "accuracy": metrics.accuracy(probs, labels),
        "nll": metrics.nll(probs, labels),
        "brier": metrics.brier_score(probs, labels),
        "ece": metrics.expected_calibration_error(probs, labels),
    }


def _plot(model: Any, X: np.ndarray, y: np.ndarray, out: str) -> str:
    import torch
    from matplotlib.figure import Figure

    from bnn_pyro.plots import plot_regression_calibration, plot_reliability_diagram

    fig = Figure(figsize=(5, 4.5), layout="constrained")
    ax = fig.subplots()
    if model.task == "regression":
        locs, scales = model.predictive_gaussian(X)
        plot_regression_calibration(locs, scales, torch.as_tensor(y).reshape(-1, 1), ax=ax)
        path = os.path.join(out, "calibration.png")
    else:
        probs = torch.as_tensor(model.predict(X)[0])
        plot_reliability_diagram(probs, torch.as_tensor(y, dtype=torch.long), ax=ax)
        path = os.path.join(out, "reliability.png")
    fig.savefig(path, dpi=100)
    return path


def run_fit(args: argparse.Namespace) -> int:
    """``bnn-pyro fit``: read, split, train, evaluate, write the model, metrics and plot.

    Args:
        args: the parsed arguments of ``bnn-pyro fit`` (see :func:`bnn_pyro.cli.build_parser`).

    Returns:
        0 (errors raise :class:`~bnn_pyro.exceptions.CLIError`, ``ValueError`` or ``TypeError``
        naming the option to change, which :func:`bnn_pyro.cli.main` prints in one line with
        exit code 2). The files are written to a staging folder and moved into ``--out`` only
        on success (:func:`~bnn_pyro.cli.output.staged_folder`): after a failure (a bad file,
        a diverged fit, Ctrl-C) a new ``--out`` does not exist and an existing one keeps its
        old files.

    Example:
        >>> import os, tempfile
        >>> from bnn_pyro.cli import main
        >>> folder = tempfile.mkdtemp(); data = os.path.join(folder, "d.csv")
        >>> with open(data, "w") as f:
        ...     _ = f.write("x,y\\n" + "".join(f"{i},{2 * i}\\n" for i in range(20)))
        >>> main(["fit", "--data", data, "--target", "y", "--method", "swag", "--epochs", "2",
        ...       "--out", folder, "--quiet"])  # doctest: +ELLIPSIS
        regression with swag on 16 rows; validation: rmse ...
        0
        >>> sorted(f for f in os.listdir(folder) if f != "d.csv")
        ['calibration.png', 'metrics.json', 'model.pt']
        >>> import shutil; shutil.rmtree(folder)
    """
    from bnn_pyro.cli.io import read_csv
    from bnn_pyro.cli.target import check_fitted, read_target

    _check_options(args)
    lr, batch_size = method_defaults(args.method, args.lr, args.batch_size)
    with naming("--data"):
        table = read_csv(args.data)
    task, y, classes = read_target(table, args.target, args.task)
    features = args.features or [c for c in table.header if c != args.target]
    if args.target in features:
        raise CLIError(f"--features must not include the target column {args.target!r}")
    if not features:
        raise CLIError(f"--data: {args.data}: no feature columns besides the target")
    with naming("--features"):
        X = table.numbers(features)
    from bnn_pyro.estimators import TabularBNN  # torch: after the checks of the file (a second)

    model = TabularBNN(
        task,
        args.method,
        hidden_sizes=args.hidden,
        epochs=args.epochs,
        batch_size=batch_size,
        lr=lr,
        num_samples=args.num_samples,
        prior_scale=args.prior_scale,
        device=args.device,
    )
    model.metadata = {
        "feature_names": features,
        "target": args.target,
        "classes": classes,
        "source": os.path.basename(args.data),
    }
    train, val = _split(len(y), args.val_fraction, args.seed)
    with staged_folder(args.out, "--out") as stage:  # nothing half-written stays on failure
        start = time.perf_counter()
        try:
            model.fit(
                X[train],
                y[train],
                n_classes=len(classes) or None,
                seed=args.seed,
                progress=not args.quiet,
            )
        except FloatingPointError as err:  # TrainingDivergedError
            first = one_line(err).split(": training stopped")[0]
            given = 0.01 if lr is None else lr  # a measured step: a small given one instead
            raise CLIError(
                f"--lr {lr if lr is None else format(lr, 'g')}: training diverged ({first}); "
                f"try a smaller --lr (e.g. {given / 10:g})"
            ) from err
        seconds = time.perf_counter() - start
        train_metrics = evaluate(model, X[train], y[train])
        check_fitted(train_metrics, y[train], task, lr)
        report: dict[str, Any] = {
            "task": task,
            "method": args.method,
            "data": os.path.abspath(args.data),
            "target": args.target,
            "features": features,
            "classes": classes,
            "n_train": int(len(train)),
            "n_validation": int(len(val)),
            "seconds": round(seconds, 3),
            "hyperparameters": dict(model.params, hidden_sizes=list(model.params["hidden_sizes"])),
            "train": train_metrics,
        }
        held_out = val if len(val) else train
        if len(val):
            report["validation"] = evaluate(model, X[val], y[val])
        model.save(os.path.join(stage, "model.pt"))
        report["plot"] = os.path.basename(_plot(model, X[held_out], y[held_out], stage))
        with open(os.path.join(stage, "metrics.json"), "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=2)
    shown = report.get("validation", report["train"])
    where = "validation" if len(val) else "train"
    summary = ", ".join(f"{k} {v:.4g}" for k, v in shown.items())
    print(f"{task} with {args.method} on {len(train)} rows; {where}: {summary}")
    print(f"wrote {os.path.join(args.out, 'model.pt')}, metrics.json, {report['plot']}")
    return 0


#: ``--lr`` and ``--batch-size`` when not given, for a method trained by an optimiser.
LR, BATCH_SIZE = 1e-2, 128


def method_defaults(
    method: str, lr: float | None, batch_size: int | None
) -> tuple[float | None, int | None]:
    """``--lr`` and ``--batch-size`` as given, or where not given (``None``) the method's:
    ``LR`` and ``BATCH_SIZE`` for a method trained by an optimiser; for one that
    measures its step on the posterior (SG-MCMC, :attr:`~bnn_pyro.spec.MethodSpec.measured_step`)
    ``None`` and ``None``: the measured step, on the whole data set per step (right by default
    and, on the data a CSV file holds, the fastest way there; a given ``--batch-size`` without
    ``--lr`` runs the chain's fixed minibatch step,
    :data:`~bnn_pyro.methods.sgmcmc.step_sizes.MINIBATCH_LR`).

    Args:
        method: a registry name.
        lr: ``--lr`` (``None``: not given).
        batch_size: ``--batch-size`` (``None``: not given).

    Returns:
        ``(lr, batch_size)`` for :class:`~bnn_pyro.estimators.TabularBNN`.

    Example:
        >>> method_defaults("vi", None, None), method_defaults("sghmc", None, None)
        ((0.01, 128), (None, None))
        >>> method_defaults("sghmc", 0.05, 64)
        (0.05, 64)
    """
    from bnn_pyro.registry import method_spec

    if not isinstance(method, str):
        raise TypeError(f"method must be a registry name, got {type(method).__name__}")
    measured = method_spec(method).measured_step
    lr = lr if lr is not None else (None if measured else LR)
    batch_size = batch_size if batch_size is not None else (None if measured else BATCH_SIZE)
    return lr, batch_size


def _check_options(args: argparse.Namespace) -> None:
    """The numeric options, checked before any file is read (the message names the option)."""
    from bnn_pyro._checks import check_float, check_int

    for option in ("epochs", "batch_size", "num_samples"):
        if getattr(args, option) is not None:
            check_int("--" + option.replace("_", "-"), getattr(args, option))
    if args.lr is not None:
        check_float("--lr", args.lr, minimum=0.0, strict=True)
    check_float("--prior-scale", args.prior_scale, minimum=0.0, strict=True)
    if not 0.0 <= args.val_fraction < 1.0:
        raise CLIError(f"--val-fraction must be in [0, 1), got {args.val_fraction}")
    check_int("--seed", args.seed, minimum=0)


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``fit`` to the subcommands ``sub`` of ``bnn-pyro``; return its parser, whose
    ``func`` is :func:`run_fit`.

    Example:
        >>> from bnn_pyro.cli.io import parse_with
        >>> args = parse_with(add_parser, ["fit", "--data", "d", "--target", "y", "--out", "o"])
        >>> args.method, args.epochs, args.hidden, args.func is run_fit
        ('vi', 200, (50,), True)
    """
    fit = sub.add_parser(
        "fit",
        help="train a BNN on a CSV file; write model.pt, metrics.json and a calibration plot",
        description="Train a BNN on the columns of a CSV file (header line required) and write "
        "DIR/model.pt, DIR/metrics.json and DIR/calibration.png (regression) or "
        "DIR/reliability.png (classification). Inputs (and regression targets) are "
        "standardised inside the model.",
    )
    fit.add_argument("--data", required=True, help="CSV file with a header line")
    fit.add_argument("--target", required=True, help="name of the column to predict")
    fit.add_argument(
        "--task",
        choices=("regression", "classification"),
        help="default: regression for a numeric target, classification for text labels",
    )
    fit.add_argument(
        "--method",
        choices=MethodNames(),
        default="vi",
        metavar="NAME",
        help="the method, one of %(choices)s (default: vi)",
    )
    fit.add_argument("--epochs", type=int, default=200, help="passes over the data (200)")
    fit.add_argument(
        "--hidden", type=parse_hidden, default=(50,), help="hidden layer widths, e.g. 50,50 (50)"
    )
    fit.add_argument(
        "--features",
        type=lambda s: [c.strip() for c in s.split(",")],
        help="comma-separated input columns (default: all but the target)",
    )
    fit.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="minibatch size (128; sghmc, sgld, csghmc: the whole data set)",
    )
    fit.add_argument(
        "--lr",
        type=float,
        default=None,
        help="learning rate (0.01; sghmc, sgld, csghmc: measured on the posterior, or with "
        "--batch-size their fixed minibatch step)",
    )
    fit.add_argument(
        "--num-samples", type=int, default=100, help="Monte Carlo samples per prediction (100)"
    )
    fit.add_argument("--prior-scale", type=float, default=1.0, help="prior std of weights (1)")
    fit.add_argument(
        "--val-fraction",
        type=float,
        default=0.2,
        help="share of rows held out for validation metrics; 0 = none (0.2)",
    )
    fit.add_argument("--seed", type=int, default=0, help="random seed (0)")
    fit.add_argument("--out", required=True, help="output folder (created if missing)")
    fit.add_argument("--quiet", action="store_true", help="no progress bar")
    fit.add_argument("--device", default="cpu", help="where to train: cpu, cuda, cuda:1 (cpu)")
    fit.set_defaults(func=run_fit)
    return fit
