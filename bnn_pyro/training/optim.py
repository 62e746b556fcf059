"""The one optimizer factory of every ``fit``: names, torch classes, instances, factories."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

__all__ = ["OPTIMIZER_NAMES", "OptimizerSpec", "make_optimizer"]

#: The optimizer names ``fit`` takes besides classes, instances and factories: ``"adam"``
#: (``torch.optim.Adam``) and ``"sgd"`` (``torch.optim.SGD`` with momentum 0.9).
OPTIMIZER_NAMES = ("adam", "sgd")

OptimizerSpec = (
    str
    | type
    | torch.optim.Optimizer
    | Callable[[list[torch.Tensor]], torch.optim.Optimizer]
    | None
)


def _fast_kwargs(optimizer: type) -> dict[str, Any]:
    # The fused CPU/CUDA kernels of Adam/AdamW run the same update in one call per step, faster
    # than the per-tensor loop for a small net's few tensors.
    if optimizer in (torch.optim.Adam, torch.optim.AdamW):
        return {"fused": True}
    return {}


def check_optimizer(spec: object) -> OptimizerSpec:
    """Check an optimizer spec before any work (see :func:`make_optimizer` for the forms).

    Example:
        >>> check_optimizer("sgd")
        'sgd'
    """
    if spec is None or isinstance(spec, torch.optim.Optimizer):
        return spec
    if isinstance(spec, str):
        if spec not in OPTIMIZER_NAMES:
            raise ValueError(f"optimizer must be one of {OPTIMIZER_NAMES}, got {spec!r}")
        return spec
    if isinstance(spec, type):
        if not issubclass(spec, torch.optim.Optimizer):
            raise TypeError(f"optimizer class must subclass torch.optim.Optimizer, got {spec!r}")
        return spec
    if callable(spec):
        return spec  # type: ignore[return-value]
    raise TypeError(
        f"optimizer must be None, one of {OPTIMIZER_NAMES}, a torch.optim.Optimizer class or "
        f"instance, or a factory params -> optimizer, got {spec!r}"
    )


def make_optimizer(
    spec: OptimizerSpec, params: Iterable[torch.Tensor], lr: float, weight_decay: float = 0.0
) -> torch.optim.Optimizer:
    """The torch optimizer that a ``fit`` steps.

    Args:
        spec: ``None`` (``torch.optim.Adam`` with the fused kernel, the library's default),
            ``"adam"`` (``torch.optim.Adam``, the per-tensor kernel), ``"sgd"`` (SGD with
            momentum 0.9), a ``torch.optim.Optimizer`` subclass (built with ``lr`` and
            ``weight_decay``; Adam/AdamW fused), an instance already over ``params`` (used as
            given), or a factory ``params -> optimizer``.
        params: the trainable tensors.
        lr: the learning rate (``> 0``) of the forms that build an optimizer.
        weight_decay: the L2 penalty of the forms that build an optimizer.

    Returns:
        A ``torch.optim.Optimizer`` over ``params``.

    Example:
        >>> params = [torch.nn.Parameter(torch.zeros(3))]
        >>> type(make_optimizer("sgd", params, lr=0.1)).__name__
        'SGD'
        >>> make_optimizer(None, params, lr=0.1).defaults["fused"]
        True
    """
    spec = check_optimizer(spec)
    params = list(params)
    if isinstance(spec, torch.optim.Optimizer):
        return spec
    decay = {"weight_decay": weight_decay} if weight_decay else {}
    if spec is None:
        return torch.optim.Adam(params, lr=lr, fused=True, **decay)
    if spec == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if spec == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=weight_decay)
    if isinstance(spec, type):
        return spec(params, lr=lr, **decay, **_fast_kwargs(spec))
    built = spec(params)  # type: ignore[operator]
    if not isinstance(built, torch.optim.Optimizer):
        raise TypeError(f"optimizer factory must return a torch optimizer, got {built!r}")
    return built
