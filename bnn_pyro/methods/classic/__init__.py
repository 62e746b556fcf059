"""The classic methods' base: ``ClassicMethod`` (one net, ``predict`` from ``S`` sampled outputs)
and what their ``fit`` shares (the minibatch loop, data checks, flat parameters, stacked fits)."""

from bnn_pyro.methods.classic.base import ClassicMethod

__all__ = [
    "ClassicMethod",
]
