"""Training: the one loop every ``fit`` runs, its steps, optimizers and callbacks.

- :func:`train` (``loop.py``): epochs of minibatches, progress bar, :class:`History`, callbacks,
  validation, divergence guard. A :class:`TrainingStep` says what one step is: a plain loss
  (:class:`LossStep`) or an SVI step (:class:`SVIStep`).
- :func:`make_optimizer` (``optim.py``): the optimizer spec every ``fit`` takes.
- ``callbacks.py``: :class:`History`, :class:`EarlyStopping`, :class:`Checkpoint`,
  :func:`linear_annealing`.
- ``diagnostics.py``: :class:`LayerDiagnostics`, the per-layer ``kl/`` and ``std/`` entries.
- ``svi.py``: :class:`GuardedSVI`, :func:`make_elbo`, :func:`run_svi`.
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
from bnn_pyro.training.diagnostics import LayerDiagnostics
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
    LRScheduleSpec,
    make_lr_schedule,
)
from bnn_pyro.training.svi import (
    GuardedSVI,
    KLWeightSpec,
    SVIStep,
    as_pyro_optim,
    make_elbo,
    run_svi,
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
    "GuardedSVI",
    "History",
    "KLWeightSpec",
    "LayerDiagnostics",
    "LossStep",
    "SVIStep",
    "TrainingStep",
    "as_pyro_optim",
    "check_callbacks",
    "check_optimizer",
    "linear_annealing",
    "make_elbo",
    "make_lr_schedule",
    "make_optimizer",
    "run_svi",
    "state_copy",
    "train",
]
