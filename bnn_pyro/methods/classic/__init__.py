"""The classic methods' base: ``ClassicMethod`` (one net, ``predict`` from ``S`` sampled outputs)
and what their ``fit`` shares (the minibatch loop, data checks, flat parameters, stacked fits)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bnn_pyro._lazy import lazy_face

if TYPE_CHECKING:  # the names below, for type checkers and editors; imported on first use
    from bnn_pyro.methods.classic.base import ClassicMethod

__all__ = [
    "ClassicMethod",
]

__getattr__, __dir__ = lazy_face(__name__, __file__)
