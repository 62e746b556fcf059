"""The objectives ``fit`` minimises, below every method: Pyro's ``Trace_ELBO`` with a fast path
(``trace.py``), the recorded ``TraceMeanField_ELBO``, the "sticking the landing" gradient
(``stl.py``) and the black-box alpha energy (``alpha.py``). None of them knows a method: a method
hands in its own plain-torch loss (``FastTrace_ELBO(fast_loss=...)``)."""

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
