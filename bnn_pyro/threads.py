"""How many CPU threads ``fit`` and ``predict`` use: one by default.

The nets a BNN library trains on a CPU are small (a few layers of tens to hundreds of units),
and their matrix products are too small to gain from torch's intra-op threads, while a machine
whose cores are shared (a notebook beside other work, a CI runner, a laptop) makes every extra
thread wait: the measurements are in ``benchmarks/threads.py`` and the README. So every
method's ``fit`` and ``predict`` (and ``predictive_gaussian``, ``log_predictive_density`` and
``sample_posterior``: every way of reading its predictive, so that a figure does not depend on
torch's thread count elsewhere; Laplace's evidence and prior-precision search too), and
:func:`bnn_pyro.fit_stacked`, run on one thread unless
told otherwise, and give torch's own setting back when they return:

* ``bp.set_threads(n)``: ``n`` threads inside ``fit``/``predict`` (a wide net on an idle
  many-core machine may gain from more);
* ``bp.set_threads(None)``: leave torch's own setting (``torch.set_num_threads``) alone;
* ``with bp.threads(n): ...``: the same for one block of code.

Only the CPU's intra-op threads are concerned: work on a GPU is not affected.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

__all__ = ["get_threads", "set_threads", "threads", "uses_threads"]

_F = TypeVar("_F", bound=Callable[..., Any])
_UNSET = object()
_setting: dict[str, int | None] = {"threads": 1}


def _check(n: int | None) -> int | None:
    from bnn_pyro._checks import check_int  # (torch: imported on use, see the package's face)

    return None if n is None else check_int("threads", n)


def set_threads(n: int | None) -> None:
    """Set how many intra-op threads ``fit`` and ``predict`` use (default 1); ``None`` leaves
    torch's own setting.

    Args:
        n: a count ``>= 1``, or ``None``.

    Raises:
        TypeError, ValueError: ``n`` is not ``None`` or an int ``>= 1``.

    Example:
        >>> import bnn_pyro as bp
        >>> bp.set_threads(2); bp.get_threads()
        2
        >>> bp.set_threads(1)  # the default again
    """
    _setting["threads"] = _check(n)


def get_threads() -> int | None:
    """The count of :func:`set_threads` (``None``: torch's own setting).

    Example:
        >>> get_threads()
        1
    """
    return _setting["threads"]


@contextmanager
def threads(n: Any = _UNSET) -> Iterator[None]:
    """Run the block on ``n`` intra-op threads (default: :func:`get_threads`), then restore
    torch's setting; ``None`` changes nothing.

    Example:
        >>> import torch
        >>> before = torch.get_num_threads()
        >>> with threads(1):
        ...     torch.get_num_threads()
        1
        >>> torch.get_num_threads() == before
        True
    """
    import torch  # here, not at the top: ``import bnn_pyro`` imports no torch

    n = get_threads() if n is _UNSET else _check(n)
    before = torch.get_num_threads()
    if n is None or n == before:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def uses_threads(fn: _F) -> _F:
    """Decorate ``fn`` (a ``fit`` or ``predict``) to run under :func:`threads`.

    Example:
        >>> import torch
        >>> count = uses_threads(lambda: torch.get_num_threads())
        >>> count()
        1
    """

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        with threads():
            return fn(*args, **kwargs)

    run.__bnn_pyro_threads__ = True  # type: ignore[attr-defined]
    return run  # type: ignore[return-value]
