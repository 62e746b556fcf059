"""Pyro's JIT ELBOs (``JitTrace_ELBO`` and its kin): which they are, and the refusal of one that
has compiled another model's loss (:func:`check_jit_elbo`, which ``fit`` runs before any work).

A JIT ELBO compiles its loss once, as a closure over the model and guide of its first call, and
runs that pair on every later call whatever model and guide it is then given: an instance is
bound to one model. ``fit`` keeps one bound model method per model, so the same instance across
calls of one model's ``fit`` compiles once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyro.ops.jit
from pyro.infer import (
    ELBO,
    JitTrace_ELBO,
    JitTraceEnum_ELBO,
    JitTraceGraph_ELBO,
    JitTraceMeanField_ELBO,
)

__all__ = ["JIT_ELBOS", "check_jit_elbo"]

#: Pyro's JIT ELBOs: their compiled loss takes the parameters as inputs, found by name.
JIT_ELBOS = (JitTrace_ELBO, JitTraceGraph_ELBO, JitTraceMeanField_ELBO, JitTraceEnum_ELBO)

#: The attribute each JIT ELBO reads before compiling, where a compiled loss it runs again
#: lives (most derived class first). ``JitTraceMeanField_ELBO`` reads
#: ``_loss_and_surrogate_loss`` but keeps its loss under ``_differentiable_loss``: it compiles
#: anew, around the model of the call, on every call, so one instance serves any model.
_REUSED = (
    (JitTraceMeanField_ELBO, "_loss_and_surrogate_loss"),
    (JitTrace_ELBO, "_loss_and_surrogate_loss"),
    (JitTraceGraph_ELBO, "_jit_loss_and_surrogate_loss"),
    (JitTraceEnum_ELBO, "_differentiable_loss"),
)


def check_jit_elbo(elbo: ELBO, model: Callable[..., Any], guide: Callable[..., Any]) -> None:
    """Refuse, before any work, one of Pyro's JIT ELBOs that has compiled another model's loss.

    Pyro's JIT ELBOs build their compiled loss once, as a closure over the model and guide of
    their first call, and run that pair on every later call whatever model they are given: an
    instance first used with one model would train that model, not the one it is given now.
    Each model takes its own instance (the same instance across calls of one model's ``fit``
    is what lets the loss compile once).

    Only the compiled loss the ELBO will run again is read: ``JitTraceMeanField_ELBO``
    compiles anew on every call and passes (see :data:`_REUSED`).

    Args:
        elbo: the ELBO ``fit`` was given (any other ELBO passes).
        model, guide: the pair ``fit`` is about to train (the model compared by ``==``, so
            that another bound method of the same model matches).

    Raises:
        ValueError: naming the fix.

    Example:
        >>> import torch, bnn_pyro as bp
        >>> from pyro.infer import JitTrace_ELBO
        >>> X = torch.randn(8, 2); y = X.sum(-1)
        >>> elbo = JitTrace_ELBO(ignore_jit_warnings=True)
        >>> first = bp.VariationalBNN(bp.nn.mlp(2, [], 1), bp.Gaussian(0.1), guide="normal")
        >>> _ = first.fit(X, y, epochs=1, elbo=elbo, progress=False)
        >>> check_jit_elbo(elbo, first.model, first.guide)  # the same model: passes
        >>> other = bp.VariationalBNN(bp.nn.mlp(2, [], 1), bp.Gaussian(0.1), guide="normal")
        >>> try:
        ...     check_jit_elbo(elbo, other.model, other.guide)
        ... except ValueError as refused:
        ...     print(str(refused).split(": ")[-1])
        give each model its own (elbo=JitTrace_ELBO())
    """
    attribute = next((a for cls, a in _REUSED if isinstance(elbo, cls)), None)
    compiled = None if attribute is None else getattr(elbo, attribute, None)
    if not isinstance(compiled, pyro.ops.jit.CompiledFunction):
        return  # not a JIT ELBO, not compiled yet, or compiled anew on every call
    fn = compiled.fn
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True))
    bound_model = cells["model"].cell_contents if "model" in cells else model
    bound_guide = cells["guide"].cell_contents if "guide" in cells else guide
    if bound_model != model or bound_guide is not guide:
        name = type(elbo).__name__
        raise ValueError(
            f"this {name} has compiled another model's loss, and Pyro's JIT ELBOs keep the "
            f"model and guide of their first call: give each model its own (elbo={name}())"
        )
