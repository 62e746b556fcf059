"""Exceptions raised by bnn_pyro."""

from __future__ import annotations

__all__ = ["NotFittedError"]


class NotFittedError(RuntimeError, ValueError):
    """Raised when ``predict`` (or anything needing a trained posterior) runs before ``fit``.

    It subclasses both :class:`RuntimeError` and :class:`ValueError`, so code written against
    scikit-learn's ``NotFittedError`` (a ``ValueError``) catches it too.

    Example:
        >>> from bnn_pyro.exceptions import NotFittedError
        >>> issubclass(NotFittedError, ValueError)
        True
    """
