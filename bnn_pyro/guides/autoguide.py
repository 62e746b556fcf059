"""``AutoGuideWrapper``: any Pyro autoguide as a guide of this library (its parameters kept in the
module, not in Pyro's global param store)."""

from __future__ import annotations

import itertools
from contextlib import nullcontext
from typing import Any

import pyro
import torch
import torch.nn as nn
from pyro.infer import autoguide
from pyro.nn import PyroModule

from bnn_pyro.poutine.kl_weight import KLWeight

__all__ = ["AutoGuideWrapper"]


_GUIDE_IDS = itertools.count()


def _forget_store_entries(guide: nn.Module, *_: Any) -> None:
    """Remove ``guide``'s entries (``"<its name>.*"``) from Pyro's global param store; its
    parameters stay in the module. A forward hook of the autoguides that
    :class:`AutoGuideWrapper` wraps."""
    prefix = f"{guide._pyro_name}."
    store = pyro.get_param_store()
    for key in [k for k in store.keys() if k.startswith(prefix)]:
        try:
            del store[key]
        except KeyError:
            # one tensor under two names (AutoIAFNormal's ``_prototype_tensor`` is its first
            # flow's first weight): deleting the first name took the store's one reverse
            # entry, so the second deletion stops before its constraint, which goes here
            store._constraints.pop(key, None)


class AutoGuideWrapper(nn.Module):
    """Adapts a Pyro autoguide to the model's keyword arguments.

    The model of :class:`~bnn_pyro.VariationalBNN` takes ``dataset_size`` and ``kl_weight``;
    this wrapper applies ``kl_weight`` to the autoguide's sites (:class:`KLWeight`) and passes
    only ``(x, y)`` on. The autoguide itself is ``wrapper.autoguide``.

    Pyro's global param store is left as it was: an autoguide is a ``PyroModule`` whose
    parameters are module attributes, and Pyro copies them into the global store under
    ``"<guide name>.<param>"`` whenever the guide runs. The wrapper names an unnamed autoguide
    uniquely (with ``own_name=True``, every autoguide, named or not) and removes its entries
    from the store after every call (a forward hook, so a call of ``wrapper.autoguide`` itself
    is covered too); the next call puts the module's own tensors back, so the module is the one
    place the parameters live (``state_dict``, the optimizer, checkpoints).

    Example:
        >>> import pyro
        >>> import pyro.distributions as dist
        >>> def model(x, y=None):
        ...     pyro.sample("w", dist.Normal(0.0, 1.0))
        >>> keys = len(pyro.get_param_store())
        >>> guide = AutoGuideWrapper(autoguide.AutoNormal(model))
        >>> sorted(guide(torch.zeros(1), kl_weight=0.1))
        ['w']
        >>> len(pyro.get_param_store()) == keys, sorted(n for n, _ in guide.named_parameters())
        (True, ['autoguide.locs.w_unconstrained', 'autoguide.scales.w_unconstrained'])
    """

    def __init__(self, guide: autoguide.AutoGuide, *, own_name: bool = False) -> None:
        super().__init__()
        if isinstance(guide, PyroModule):
            # Pyro copies an autoguide's parameters into its global param store under
            # "<guide name>.<param>" while it runs; a unique name per instance keeps two models
            # from ever sharing them
            if own_name or not guide._pyro_name:
                guide._pyro_name = f"{type(guide).__name__}_{next(_GUIDE_IDS)}"
            guide.register_forward_hook(_forget_store_entries, always_call=True)
        self.autoguide = guide

    def forward(
        self, x: torch.Tensor, y: torch.Tensor | None = None, *, kl_weight: float = 1.0, **_: Any
    ) -> Any:
        with KLWeight(kl_weight) if kl_weight != 1.0 else nullcontext():
            return self.autoguide(x, y)
