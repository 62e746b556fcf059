"""Training: the one loop every ``fit`` runs, method-agnostic (it imports no method).

- :func:`train` (``loop.py``): epochs of minibatches, progress bar, :class:`History`, callbacks,
  validation, divergence and blow-up guards. A :class:`TrainingStep` says what one step is: a
  plain loss (:class:`LossStep`); a method brings its own (VI's SVI step is
  :class:`bnn_pyro.methods.vi.svi.SVIStep`).
- :func:`make_optimizer` (``optim.py``): the optimizer spec every ``fit`` takes.
- ``schedules.py``: the learning rate and KL weight over the epochs, iterate averaging.
- ``callbacks.py``: :class:`History`, :class:`EarlyStopping`, :class:`Checkpoint`,
  :func:`linear_annealing`.
- ``batches.py``, ``resume.py``, ``blowup.py``: minibatches, resumable runs, the blow-up guard.
- ``stacked.py``: the engine that trains K models of one architecture as one.
- ``compiled.py``: a step's loss compiled by ``torch.compile`` (``fit(compile=True)``).
- ``distributed.py``: data-parallel training when a ``torch.distributed`` group runs.
"""

from bnn_pyro.training.callbacks import (
    Checkpoint,
    EarlyStopping,
    History,
    check_callbacks,
    linear_annealing,
    state_copy,
)
from bnn_pyro.training.loop import Batch, Callback, LossStep, TrainingStep, train
from bnn_pyro.training.optim import (
    OPTIMIZER_NAMES,
    OptimizerSpec,
    check_optimizer,
    make_optimizer,
)
from bnn_pyro.training.schedules import (
    LR_SCHEDULES,
    IterateAverage,
    KLWeightSpec,
    LRScheduleSpec,
    kl_weight_at,
    make_lr_schedule,
)

__all__ = [
    "LR_SCHEDULES",
    "OPTIMIZER_NAMES",
    "IterateAverage",
    "LRScheduleSpec",
    "OptimizerSpec",
    "Batch",
    "Callback",
    "Checkpoint",
    "EarlyStopping",
    "History",
    "KLWeightSpec",
    "LossStep",
    "TrainingStep",
    "check_callbacks",
    "check_optimizer",
    "kl_weight_at",
    "linear_annealing",
    "make_lr_schedule",
    "make_optimizer",
    "state_copy",
    "train",
]
