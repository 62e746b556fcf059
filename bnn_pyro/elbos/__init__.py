"""The objectives ``fit`` minimises, below every method: Pyro's ``Trace_ELBO`` with a fast path
(``trace.py``), the recorded ``TraceMeanField_ELBO``, the "sticking the landing" gradient
(``stl.py``) and the black-box alpha energy (``alpha.py``), as Pyro ELBOs: the reference of the
library's plain-torch objective (:mod:`bnn_pyro.methods.vi.objective`) and ``fit``'s path where
that objective does not cover the model. None of them knows a method."""

from bnn_pyro.elbos.alpha import AlphaELBO
from bnn_pyro.elbos.recorder import Recorder
from bnn_pyro.elbos.stl import StickingTheLanding_ELBO
from bnn_pyro.elbos.trace import FastTrace_ELBO, RecordingMeanField_ELBO

__all__ = [
    "AlphaELBO",
    "FastTrace_ELBO",
    "Recorder",
    "RecordingMeanField_ELBO",
    "StickingTheLanding_ELBO",
]
