"""The target of ``bnn-pyro fit`` and the sanity of what was fitted: refuse silent nonsense.

* :func:`read_target`: the task (``--task`` or guessed), the targets and the classes. A
  classification target must look like classes: ``--task classification`` on a continuous
  column (non-integer numbers, or more distinct values than half the rows) is refused naming
  ``--task``, instead of turning every value into its own class.
* :func:`check_fitted`: a fit whose metrics are non-finite or absurd (an RMSE or predictive std
  above ``1e6`` times the target's std) is an error naming ``--lr``, not a result.
"""

from __future__ import annotations

import math

import numpy as np

from bnn_pyro.cli.io import Table
from bnn_pyro.exceptions import CLIError

__all__ = ["ABSURD", "check_fitted", "read_target"]

#: A regression target whose std is at most this share of its largest magnitude (or of 1) is
#: constant up to float rounding: refused by name rather than trained (it would look diverged).
CONSTANT = 1e-9

#: A regression whose train RMSE or mean predictive std exceeds ``ABSURD`` times the target's
#: std is refused: the mean predictor already scores ``1`` times the std.
ABSURD = 1e6


def _class_order(labels: list[str]) -> list[str]:
    """The distinct labels, in numeric order if they are all numbers, else sorted as text."""
    distinct = set(labels)
    try:
        return sorted(distinct, key=float)
    except ValueError:
        return sorted(distinct)


def _check_classes(labels: list[str], classes: list[str], target: str) -> None:
    numbers = []
    for label in classes:
        try:
            numbers.append(float(label))
        except ValueError:
            break
    else:  # every label is a number: they must be integers
        fractional = [c for c, v in zip(classes, numbers, strict=True) if v != math.floor(v)]
        if fractional:
            raise CLIError(
                f"--task classification: column {target!r} holds non-integer values (e.g. "
                f"{fractional[0]}), so it is not a class label; use --task regression"
            )
    if len(classes) > max(2, len(labels) / 2):
        raise CLIError(
            f"--task classification: column {target!r} has {len(classes)} distinct values in "
            f"{len(labels)} rows, too many to be classes; use --task regression"
        )


def read_target(table: Table, target: str, task: str | None) -> tuple[str, np.ndarray, list[str]]:
    """The task, the targets ``(N,)`` and the class names of column ``target``.

    Args:
        table: the CSV file.
        target: the target column (``--target``).
        task: ``"regression"``, ``"classification"`` or ``None``: regression for a numeric
            column, classification for text labels.

    Returns:
        ``(task, y, classes)``: regression: ``y`` floats and ``classes == []``;
        classification: ``y`` the class indices ``0..C-1`` into ``classes`` (numeric labels in
        numeric order, text labels sorted).

    Raises:
        CLIError: the column is missing, has a missing value, is text for regression, is
            constant (regression), holds one class only, or does not look like classes (naming
            ``--task`` or ``--target``).

    Example:
        >>> t = Table("f.csv", ["y"], [["b"], ["a"], ["b"], ["a"]], [2, 3, 4, 5])
        >>> task, y, classes = read_target(t, "y", None)
        >>> task, y.tolist(), classes
        ('classification', [1, 0, 1, 0], ['a', 'b'])
        >>> t = Table("f.csv", ["y"], [["0.5"], ["1.7"], ["2.2"]], [2, 3, 4])
        >>> read_target(t, "y", "classification")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
          ...
        bnn_pyro.exceptions.CLIError: --task classification: column 'y' holds non-integer ...
    """
    try:
        table.index(target)
    except CLIError as err:
        raise CLIError(f"--target: {err}") from None
    if task is None:
        try:
            table.numbers([target])
            task = "regression"
        except CLIError:
            task = "classification"  # text labels (or a missing value, reported below)
    if task == "regression":
        try:
            y = table.numbers([target])[:, 0]
        except CLIError as err:
            if "is not numeric" in str(err):
                raise CLIError(
                    f"--task regression: {err}; for class labels use --task classification"
                ) from None
            raise CLIError(f"--target: {err}") from None
        spread, level = float(np.std(y)), float(np.abs(y).max())
        if spread <= CONSTANT * max(1.0, level):  # float rounding of one value, not a signal
            raise CLIError(
                f"--target: {table.path}: column {target!r} is constant (std {spread:.3g} "
                f"around {float(np.mean(y)):.6g}): there is nothing to learn"
            )
        return task, y, []
    try:
        labels = table.labels(target)
    except CLIError as err:
        raise CLIError(f"--target: {err}") from None
    classes = _class_order(labels)
    if len(classes) < 2:
        raise CLIError(f"--target: {table.path}: column {target!r} holds one class only")
    _check_classes(labels, classes, target)
    return task, np.array([classes.index(label) for label in labels]), classes


def check_fitted(metrics: dict[str, float], y: np.ndarray, task: str, lr: float | None) -> None:
    """Refuse a fit whose train ``metrics`` are non-finite or absurd: it diverged.

    Args:
        metrics: the train metrics of :func:`~bnn_pyro.cli.fit.evaluate`.
        y: ``(N,)`` the train targets.
        task: ``"regression"`` or ``"classification"``.
        lr: the learning rate (``--lr``), named in the message as the likely cause
            (``None``: a step measured on the posterior; a small given one is advised).

    Raises:
        CLIError: a metric is NaN/inf, or (regression) the RMSE or mean predictive std exceeds
            :data:`ABSURD` times the std of ``y``.

    Example:
        >>> y = np.array([0.0, 1.0, 2.0])
        >>> check_fitted({"rmse": 0.5, "mean_std": 0.3}, y, "regression", 0.01)
        >>> check_fitted({"rmse": 1e60, "mean_std": 1e60}, y, "regression", 1e30)
        ... # doctest: +ELLIPSIS
        Traceback (most recent call last):
          ...
        bnn_pyro.exceptions.CLIError: --lr 1e+30: training diverged (train rmse 1e+60, ...
    """
    advice = f"try a smaller --lr (e.g. {(0.01 if lr is None else lr) / 10:g})"
    shown = "None (measured)" if lr is None else format(lr, "g")
    bad = {k: v for k, v in metrics.items() if not math.isfinite(v)}
    if bad:
        name, value = next(iter(bad.items()))
        raise CLIError(f"--lr {shown}: training diverged (train {name} is {value}); {advice}")
    if task == "regression":
        scale = max(float(np.std(y)), 1e-12)
        for name in ("rmse", "mean_std"):
            if metrics.get(name, 0.0) > ABSURD * scale:
                raise CLIError(
                    f"--lr {shown}: training diverged (train {name} {metrics[name]:.3g}, more "
                    f"than {ABSURD:g} x the target's std {scale:.3g}); {advice}"
                )
