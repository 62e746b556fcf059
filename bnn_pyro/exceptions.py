"""Exceptions raised by bnn_pyro, its warnings, and :func:`warn_user`, which points a warning at
the user's line."""

from __future__ import annotations

import os
import sys
import warnings

__all__ = [
    "CLIError",
    "CheckpointError",
    "HotChainWarning",
    "NotFittedError",
    "PosteriorCollapseWarning",
    "TrainingInstabilityWarning",
    "TrainingDivergedError",
    "warn_user",
]

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn(message, category)`` at the first frame outside ``bnn_pyro``: the
    user's line that called ``fit`` or ``predict``, however deep in the library the warning
    arises.

    Example:
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     warn_user("look here", RuntimeWarning)
        >>> caught[0].filename.startswith(_PACKAGE)
        False
    """
    frame, level = sys._getframe(1), 2  # level 2: warn_user's caller
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


class NotFittedError(RuntimeError, ValueError):
    """Raised when ``predict`` (or anything needing a trained posterior) runs before ``fit``.

    It subclasses both :class:`RuntimeError` and :class:`ValueError`, so code written against
    scikit-learn's ``NotFittedError`` (a ``ValueError``) catches it too.

    Example:
        >>> from bnn_pyro.exceptions import NotFittedError
        >>> issubclass(NotFittedError, ValueError)
        True
    """


class TrainingDivergedError(FloatingPointError):
    """Raised when the loss becomes NaN or infinite during ``fit``.

    Training stops at that step and the method is left as it was before the ``fit`` call (see
    :class:`~bnn_pyro.BaseBayesianMethod`): unfitted after a first fit, the earlier fit after a
    refit. The message says at which epoch and step, and what usually helps (a lower learning
    rate, a smaller ``init_scale``, standardised inputs and targets).

    Example:
        >>> issubclass(TrainingDivergedError, FloatingPointError)
        True
    """


class CLIError(Exception):
    """A user error of the ``bnn-pyro`` command: a bad file, a missing or non-numeric column, a
    bad setting. :func:`bnn_pyro.cli.main` prints it in one line on stderr and exits with code 2.

    Example:
        >>> from bnn_pyro.cli import main
        >>> main(["predict", "--model", "missing.pt", "--data", "x.csv"])  # a CLIError inside
        2
    """


class CheckpointError(ValueError):
    """A checkpoint file cannot be used: empty, truncated, corrupted (a record fails its CRC-32
    check), not a bnn_pyro checkpoint, of another format version, or saved for a net of another
    architecture. The message names the file and says what is wrong.

    It subclasses :class:`ValueError`, so code that caught the ``ValueError`` of earlier
    versions catches it too. A file that does not exist raises :class:`FileNotFoundError`.

    Example:
        >>> import os, tempfile, bnn_pyro as bp
        >>> path = os.path.join(tempfile.mkdtemp(), "model.pt")
        >>> _ = open(path, "wb").close()
        >>> bp.load(path)
        Traceback (most recent call last):
          ...
        bnn_pyro.exceptions.CheckpointError: ... is empty (0 bytes): ...
    """


class PosteriorCollapseWarning(UserWarning):
    """Warned at the end of ``fit`` when a layer of a mean-field posterior learned nothing: its
    posterior stds stayed at ``init_scale`` (too few steps or too low a learning rate), or its
    posterior collapsed onto the prior (a KL per weight near 0: underfitting). The message names
    the layer and what usually helps (see :mod:`bnn_pyro.methods.vi.diagnostics`).

    Example:
        >>> issubclass(PosteriorCollapseWarning, UserWarning)
        True
    """


class HotChainWarning(UserWarning):
    """Warned at the end of an SGHMC ``fit`` when a chain sampled hotter than its temperature:
    its velocity's mean kinetic temperature over the sampling steps was at least twice the
    target's, so its samples are wider than the posterior (their variance about that many times
    its own or more). The minibatch gradient's noise at a fixed step does this on large data
    sets; the message names the fixes (see :mod:`bnn_pyro.methods.sgmcmc.stability`).

    Example:
        >>> issubclass(HotChainWarning, UserWarning)
        True
    """


class TrainingInstabilityWarning(UserWarning):
    """Warned at the end of ``fit`` when the loss leapt out of its optimum and gave back more
    than half of the progress made (a *blow-up*, see :mod:`bnn_pyro.training.blowup`). A fit
    that stayed up keeps its parameters from before the blow-up; the message names the epoch and
    what avoids it (a smaller learning rate, a decaying schedule, more particles).

    Example:
        >>> issubclass(TrainingInstabilityWarning, UserWarning)
        True
    """
